"""The probe's layer table: every distinct leaf-layer call of the registry's models timed as the network makes it.

A model's CPU cost per image is the sum over its calls (nets.layer_calls) of each call's forward + backward, timed
in isolation. The isolated step does what the network does for that call and nothing more (HARNESS 2, issue 27):
the upstream gradient is a dense tensor made once, outside the timed call; the backward asks autograd for the
gradients the network needs (the inputs that need one, the module's parameters) and gets them back, as a
training step that sets gradients to None gets them assigned, accumulating into no `.grad`; an in-place module
runs in place on an input that is an op's output (a non-leaf), as inside the network, with no copy of its own.
Harness 1 (records without `layer_table.harness`) summed each output and called backward on it (a full read of
every output and an expanded gradient), accumulated every call's input and parameter gradients into the leaves'
`.grad` (a full add over each activation) and cloned an in-place module's input every call: memory passes the
network does not make, which priced memory-bound models (mobilenets) 1.3-2.2x their real step. The two harnesses'
tables are different quantities: a lease's ratios to one never calibrate the other (predict/transfer.py).

Also the probe's timing primitives (sync, timed_window), which its other parts share. Training side: torch only.
"""

from __future__ import annotations

import copy
import statistics
import time

import torch
from torch.autograd.graph import get_gradient_edge

from gpuscale.contract import probekind
from gpuscale.measure import devices
from gpuscale.models import nets
from gpuscale.models import registry as models

# What the table's timed step does (probe records: layer_table.harness; absent: 1, the summed-output harness).
HARNESS = probekind.LAYER_TABLE_HARNESS
# The layer table's batch (CPUs only, at most train.batch_size): per image, the dev box's 2 cores cost about the
# same at 64 as at 128 (23 models), in half the probe's time; the H200 host's 16 threads cost more at 64.
TABLE_BATCH_CPU = 64
# Each distinct layer call is timed in TABLE_PASSES windows of at least this long (at least one call each) after
# its warm-up call, the passes going round a model's new calls; the median pass is kept.
TABLE_SECONDS_PER_LAYER = 0.001
TABLE_PASSES = 3
# A call whose TABLE_PASSES passes differ by more than RETIME_SPREAD (slowest / fastest) is timed in RETIME_PASSES
# more (timed_passes): the median of 7 holds where two of 3 passes were paused. 1.5: in the harness-2 probes of the
# H100 and H200 hosts (2026-12-05/06, 840 calls each) 3-23% of the calls passed it; their 4 more passes come to
# 0.1-1.0 s on a table of 15-30 s.
RETIME_SPREAD = 1.5
RETIME_PASSES = 4
# A call whose median pass is over PAUSED_RATIO times its fastest after re-timing kept a pause (settled): the paused
# stem ran 40-80x its unpaused time; in the four probes of H200 lease I (2026-12-06) no call's median passed 3x,
# while 13-31 calls per probe passed 1.5x (bimodal timings, e.g. a 3x3 convolution at 21 and 33-35 ms a call).
PAUSED_RATIO = 3.0


def sync(device: torch.device) -> None:
    devices.of(device).synchronize(device)


def timed_window(step, device: torch.device, seconds: float, max_steps: int = 50) -> tuple[float, int]:
    """Seconds per call over one window of at least `seconds` (at least one call), the device drained; the calls."""
    count, start = 0, time.perf_counter()
    while count < max_steps and (count == 0 or time.perf_counter() - start < seconds):
        step()  # queued on a GPU; the synchronize below waits for all of them
        count += 1
    sync(device)
    return (time.perf_counter() - start) / count, count


class _OpOutput(torch.autograd.Function):
    """A tensor's data as an op's output (a non-leaf sharing its storage; no copy): an in-place module's input
    inside a network is the layer before's output, and autograd refuses in-place ops on a leaf that needs a
    gradient. Its backward never runs: the step asks for the gradient at the edge into it."""

    @staticmethod
    def forward(ctx, x):
        return x.detach()

    @staticmethod
    def backward(ctx, grad):
        return grad


def _upstream_gradient(output: torch.Tensor) -> torch.Tensor:
    """A gradient of `output` as the next layer's backward hands it on: dense, channels-last for a channels-last
    output (convolution and batch-norm backward keep the format), else contiguous, whatever view the output is (a
    batch-first attention's output is a transpose; the gradient reaching it is not)."""
    last = output.dim() == 4 and not output.is_contiguous()
    last = last and output.is_contiguous(memory_format=torch.channels_last)
    return torch.randn_like(output, memory_format=torch.channels_last if last else torch.contiguous_format)


class LayerStep:
    """One layer call's forward and backward as the network makes it, on a fresh copy of the module in train mode
    (batch norm updates its running statistics every call, as in training). Calling it returns the gradients it
    computed: of `wanted` (the inputs that need one, as the network's do: not the first layer's images), then of
    the module's parameters that need one (None where a call does not use one). `inputs`: the call's arguments
    (default: random tensors as nets.LayerCall specifies them)."""

    def __init__(self, call: nets.LayerCall, device: torch.device, batch: int, inputs: list | None = None):
        self.module = copy.deepcopy(call.module).to(device).train()
        self.kwargs = call.kwargs
        self.inputs = list(inputs) if inputs is not None else call.inputs(batch, device)
        unique = {id(a): a for a in self.inputs if isinstance(a, torch.Tensor) and a.requires_grad}
        self.wanted = list(unique.values())
        self.params = [p for p in self.module.parameters() if p.requires_grad]
        self.inplace = bool(getattr(self.module, "inplace", False))
        # an in-place module rewrites its input each call: the data it started from, put back between passes
        tensors = {id(a): a for a in self.inputs if isinstance(a, torch.Tensor)}.values()
        self.restore = [(t, t.detach().clone()) for t in tensors] if self.inplace else []
        self.grad_outputs: list[torch.Tensor] | None = None  # made at the first (warm-up) call, then kept

    def _forward(self) -> tuple[list[torch.Tensor], list]:
        """The module's outputs that need a gradient, and where the gradients of `wanted` are taken."""
        args, targets = self.inputs, self.wanted
        if self.inplace and self.wanted:
            alias = {id(t): _OpOutput.apply(t) for t in self.wanted}
            args = [alias.get(id(a), a) if isinstance(a, torch.Tensor) else a for a in self.inputs]
            targets = [get_gradient_edge(alias[id(t)]) for t in self.wanted]
        out = self.module(*args, **self.kwargs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad], targets

    def __call__(self) -> tuple:
        outputs, targets = self._forward()
        if not outputs or not (targets or self.params):
            return ()
        if self.grad_outputs is None:
            self.grad_outputs = [_upstream_gradient(o) for o in outputs]
        return torch.autograd.grad(outputs, [*targets, *self.params], self.grad_outputs, allow_unused=True)

    def reset(self) -> None:
        """Put an in-place module's input back as it was made (untimed, between passes: a contracting activation
        applied to its own output over and over would reach subnormal numbers, which run at another speed)."""
        with torch.no_grad():
            for t, original in self.restore:
                t.copy_(original)


def timed_passes(steps: dict, device: torch.device, passes: int, seconds: float) -> dict[str, dict]:
    """Each step timed in `passes` rounds that go round all of them (RMIT in small: a pause of the host lands
    in one pass of a layer, not in all), after one warm-up call each; then the steps whose passes disagree by
    more than RETIME_SPREAD are timed in RETIME_PASSES more rounds of their own (issue 27: on two H100 leases
    the resnets' stem convolution ran 28 and 52 ms in two of its three passes against 0.6-0.7 ms in the other
    and in two other leases, and the median of three priced resnet18's CPU epoch 1.6-1.9x; a pause is a slow
    pass, never a fast one). Per step: the median of all its passes, their spread (slowest / fastest), their
    count and the seconds per call of each pass in order. A step with a `reset` (LayerStep) has it called
    before each of its passes, untimed."""
    for step in steps.values():
        step()
    sync(device)
    seen: dict[str, list[float]] = {key: [] for key in steps}

    def go_round(keys: list) -> None:
        for key in keys:
            step = steps[key]
            if hasattr(step, "reset"):
                step.reset()
            seen[key].append(timed_window(step, device, seconds)[0])

    for _ in range(passes):
        go_round(list(steps))
    unsettled = [key for key, times in seen.items() if passes > 1 and max(times) > RETIME_SPREAD * min(times)]
    for _ in range(RETIME_PASSES if unsettled else 0):
        go_round(unsettled)
    return {
        key: {
            "seconds_per_call": statistics.median(times),
            "spread": max(times) / min(times),
            "passes": len(times),
            "pass_seconds": times,
        }
        for key, times in seen.items()
    }


def layer_table(device: torch.device, batch: int, seconds: float, names: list[str] | None = None) -> dict:
    """Every distinct leaf-layer call of the registry's models (nets.layer_calls) timed forward + backward at
    `batch` (LayerStep), the models in registry order until `seconds` are spent; per model, the sum over its calls,
    per image. A model's new calls are timed in TABLE_PASSES interleaved passes, the median kept (one pass of one
    layer once ran 30x slow on the H200 host, and the old single window priced the whole model from it).
    A model whose calls were not all timed in time is left out (the cost model falls back to its rates by kind)."""

    start = time.perf_counter()
    timed: dict[str, dict] = {}
    per_model: dict[str, dict] = {}
    skipped: list[str] = []
    for name in names or list(models.MODEL_NAMES):
        if time.perf_counter() - start >= seconds:
            skipped.append(name)
            continue
        torch.manual_seed(0)
        calls, protos = nets.layer_calls(models.build(name, 10))
        steps = {key: LayerStep(call, device, batch) for key, call in protos.items() if key not in timed}
        for key, row in timed_passes(steps, device, TABLE_PASSES, TABLE_SECONDS_PER_LAYER).items():
            timed[key] = {"layer": key, **row}
        del steps
        per_image = sum(n * timed[key]["seconds_per_call"] for key, n in calls.items()) / batch
        paused = sum(n * timed[key]["seconds_per_call"] for key, n in calls.items() if not settled(timed[key]))
        per_model[name] = {
            "seconds_per_image": per_image,
            "layer_calls": sum(calls.values()),
            "distinct_layer_calls": len(calls),
            "unsettled_share": paused / batch / per_image if per_image > 0 else 0.0,
        }
    return {
        "batch_size": batch,
        "passes": TABLE_PASSES,
        "harness": HARNESS,
        "models": per_model,
        "models_not_timed": skipped,
        "layers": sorted(timed.values(), key=lambda row: row["layer"]),
        "retimed_calls": sum(row["passes"] > TABLE_PASSES for row in timed.values()),
        "unsettled_calls": sum(not settled(row) for row in timed.values()),
        "seconds": time.perf_counter() - start,
    }


def settled(row: dict) -> bool:
    """Whether a timed call's median pass is its own time, not a pause's: within PAUSED_RATIO of its fastest pass.
    A call paused in half its passes or more, the extra ones included, is not (its median is a pause): the table's
    figure for every model that makes it is too high by that much. A row without its passes (before 2026-12-06)
    cannot tell, and counts as settled."""
    times = row.get("pass_seconds") or [row["seconds_per_call"]]
    return row["seconds_per_call"] <= PAUSED_RATIO * min(times)
