"""The probe: what one training step on a device is made of, measured in at most a minute.

Sustained forward+backward throughput of representative layers (dense convolutions at the sizes the
model ladder runs at on 32x32 images, a depthwise and a grouped convolution, a matrix multiply, an
attention block), the fixed cost of a step (a tiny model: launches and the optimizer), the cost each
further layer adds, host-to-device bandwidth (cuda), and the host input pipeline's images/s at the
configured workers and transforms on synthetic uint8 images (alone, and with a training step on each batch), the
optimizer's cost per parameter and, on a CPU, the layer table: every distinct layer call of the registry's
models timed as the network makes it (the kernel paths rates by kind cannot tell apart). Written as a probe record
(contract/schemas/probe-record.schema.json) with the host fingerprint, as run records carry it.

Training side: imports torch, never analysis or reporting libraries.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from importlib import resources
from pathlib import Path

import torch
from torch import nn

from gpuscale.contract import conditions, fsutil, probekind
from gpuscale.contract.settings import TrainSettings
from gpuscale.measure import devices, envinfo, sentinel
from gpuscale.measure.layertable import PAUSED_RATIO, RETIME_PASSES, TABLE_BATCH_CPU, TABLE_PASSES, layer_table
from gpuscale.measure.layertable import sync as _sync
from gpuscale.measure.layertable import timed_window as _timed_window
from gpuscale.models import nets
from gpuscale.models import registry as models

log = logging.getLogger("gpuscale.probe")

SCHEMA_VERSION = 3
# Schema 3 adds the layer table: every distinct layer call of the registry's models timed as the network makes it.
# Schema 1 counted its layers' FLOPs by torch's own formulas, whose weight gradient of a grouped convolution is
# `groups` times too many (nets.CostCounter corrects it for the model facts), and timed the layers without their
# input gradient: its depthwise and grouped rates are not in the facts' units (costmodel.from_probe drops them).
KIND = "gpuscale.probe"
# A model whose layer table holds more than this share in calls still paused after re-timing (layertable.settled)
# gets a warning in the probe's log: its CPU prediction would read slow (issue 27: a paused stem convolution priced
# resnet18's table 2.2-2.9x on two H100 leases).
UNSETTLED_WARNING = 0.05
# Shares of the budget. The layer table prices the registry's models; the rates by kind price any other model
# (and the quick rate check); the loader needs its workers started.
SHARES = {
    "conv": 0.06,
    "depthwise_conv": 0.03,
    "grouped_conv": 0.02,
    "linear": 0.02,
    "attention": 0.02,
    "other": 0.02,
    "fixed": 0.03,
    "layers": 0.03,
    "optimizer": 0.02,
    "host_to_device": 0.02,
    "input_pipeline": 0.13,
    "layer_table": 0.60,
}
LAYER_STACK = 16  # conv + batch-norm blocks in the per-layer measurement: 2 parameterised layers each


class ProbeError(RuntimeError):
    """A probe that cannot run as asked."""


@functools.cache
def schema() -> dict:
    return json.loads(resources.files("gpuscale").joinpath("contract/schemas/probe-record.schema.json").read_text())


def validate(doc: dict, source: str = "probe record") -> None:
    try:
        import jsonschema
    except ImportError:  # bare GPU host
        if doc.get("schema_version") != SCHEMA_VERSION:
            raise ProbeError(
                f"{source}: schema_version {doc.get('schema_version')!r}, expected {SCHEMA_VERSION}"
            ) from None
        return
    error = jsonschema.exceptions.best_match(jsonschema.Draft7Validator(schema()).iter_errors(doc))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "(top level)"
        raise ProbeError(f"{source}: {where}: {error.message}")


def _timed(step, device: torch.device, seconds: float, max_steps: int = 200) -> tuple[float, int]:
    """Seconds per call of step() after one warm-up call; repeats until `seconds` have passed (at least once)."""
    step()
    _sync(device)
    return _timed_window(step, device, seconds, max_steps)


class _Attention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)

    def forward(self, x):
        return self.attention(x, x, x, need_weights=False)[0]


def layer_cases(batch: int) -> dict[str, list[tuple[str, nn.Module, tuple]]]:
    """(label, module, input shape) per kind, at the shapes 32x32 models run: CIFAR-stem and ImageNet-stem
    ResNet stages, MobileNet-style depthwise and grouped blocks, a ViT-tiny block's matmul and attention."""
    return {
        "conv": [
            ("conv3x3 64->64 @32x32", nn.Conv2d(64, 64, 3, padding=1, bias=False), (batch, 64, 32, 32)),
            ("conv3x3 128->128 @8x8", nn.Conv2d(128, 128, 3, padding=1, bias=False), (batch, 128, 8, 8)),
            ("conv3x3 256->256 @4x4", nn.Conv2d(256, 256, 3, padding=1, bias=False), (batch, 256, 4, 4)),
            ("conv1x1 256->64 @16x16", nn.Conv2d(256, 64, 1, bias=False), (batch, 256, 16, 16)),
        ],
        # MobileNet/EfficientNet/ConvNeXt blocks on 32x32 images run their depthwise layers from 16x16 down to
        # 1x1; CPU kernels slow down by two orders of magnitude per FLOP at the smallest sizes. (A 144-channel
        # 32x32 case, where CIFAR-stem MobileNets run most of theirs, was tried on the H200 on 2026-12-05: the GPU
        # rate rose 203 -> 297 GFLOP/s, yet mobilenet_v2_cifar's GPU epoch was still priced 19 s against 8.8 s
        # measured; left out, so that ratios to this probe keep transferring between leases.)
        "depthwise_conv": [
            _grouped("depthwise3x3", 96, 96, 3, 16, batch),
            _grouped("depthwise3x3", 144, 144, 3, 8, batch),
            _grouped("depthwise3x3", 192, 192, 3, 4, batch),
            _grouped("depthwise3x3", 576, 576, 3, 2, batch),
            _grouped("depthwise3x3", 960, 960, 3, 1, batch),
            _grouped("depthwise5x5", 672, 672, 5, 2, batch),
            _grouped("depthwise7x7", 384, 384, 7, 2, batch),
        ],
        # RegNet-style groups of 8 channels
        "grouped_conv": [
            _grouped("grouped3x3", 104, 13, 3, 8, batch),
            _grouped("grouped3x3", 208, 26, 3, 4, batch),
            _grouped("grouped3x3", 440, 55, 3, 1, batch),
        ],
        "linear": [("linear 192->768 x65 tokens", nn.Linear(192, 768), (batch, 65, 192))],
        "attention": [("attention 3 heads x192, 65 tokens", _Attention(192, 3), (batch, 65, 192))],
        # normalisation and activations: modelfacts' "other", counted in output elements, not FLOPs
        "other": [
            ("batchnorm+relu 64 @16x16", nn.Sequential(nn.BatchNorm2d(64), nn.ReLU()), (batch, 64, 16, 16)),
            ("batchnorm+silu 480 @2x2", nn.Sequential(nn.BatchNorm2d(480), nn.SiLU()), (batch, 480, 2, 2)),
        ],
    }


def _grouped(name: str, channels: int, groups: int, kernel: int, size: int, batch: int) -> tuple[str, nn.Module, tuple]:
    label = f"{name} {channels}" + (f" g{groups}" if groups != channels else "") + f" @{size}x{size}"
    conv = nn.Conv2d(channels, channels, kernel, padding=kernel // 2, groups=groups, bias=False)
    return label, conv, (batch, channels, size, size)


def train_flops(module: nn.Module, shape: tuple, kind: str = "conv") -> int:
    """Forward + backward work of one call at `shape` as the model facts count it (nets.CostCounter: FLOPs, or
    for kind "other" output elements), the input's gradient included as inside a network; counted on two images
    (batch norm needs more than one) and scaled, linear in the batch."""
    x = torch.randn(2, *shape[1:], requires_grad=True)
    with nets.CostCounter() as counter:
        module(x).sum().backward()
    module.zero_grad(set_to_none=True)
    work = counter.flops["other"] if kind == "other" else sum(v for k, v in counter.flops.items() if k != "other")
    return int(work) * shape[0] // 2


def measure_kind(cases, device: torch.device, seconds: float, kind: str = "conv") -> dict:
    measurements, total_flops, total_seconds = [], 0, 0.0
    for label, module, shape in cases:
        flops = train_flops(module, shape, kind)
        module = module.to(device)
        x = torch.randn(*shape, device=device, requires_grad=True)

        def step(module=module, x=x):
            module(x).sum().backward()

        per_step, count = _timed(step, device, seconds / len(cases))
        measurements.append(
            {
                "layer": label,
                "input_shape": list(shape),
                "train_flops": flops,
                "seconds_per_step": per_step,
                "steps": count,
                "flops_per_second": flops / per_step,
            }
        )
        total_flops += flops
        total_seconds += per_step
    # The kind's rate over its shapes together: total FLOPs / total seconds (as a model mixing them would run).
    return {"flops_per_second": total_flops / total_seconds, "measurements": measurements}


def _train_step(model: nn.Module, device: torch.device, batch: int):
    model = model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()
    x = torch.randn(batch, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (batch,), device=device)

    def step(x=x, y=y):  # a random batch of its own, or the one given (the input pipeline's)
        optimizer.zero_grad(set_to_none=True)
        criterion(model(x), y).backward()
        optimizer.step()

    return step


def tiny_model() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3, stride=4, padding=1), nn.Flatten(), nn.Linear(4 * 8 * 8, 10))


def _work_seconds(cost: dict, kinds: dict, batch: int, skip: tuple[str, ...] = ()) -> float:
    """A training step's FLOPs and elements by kind (`cost`: nets.training_cost's flops_by_kind) at the kinds'
    measured rates, the kinds in `skip` left out; a kind not measured counts at the dense convolution's rate."""
    dense = kinds.get("conv", {}).get("flops_per_second")
    if not dense:
        return 0.0
    return batch * sum(
        work / ((kinds.get(k) or {}).get("flops_per_second") or dense) for k, work in cost.items() if k not in skip
    )


def stacked_model(blocks: int) -> nn.Module:
    layers: list[nn.Module] = [nn.Conv2d(3, 8, 3, stride=4, padding=1)]
    for _ in range(blocks):
        layers += [nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU()]
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(8 * 8 * 8, 10))


def optimizer_seconds(device: torch.device, seconds: float) -> float:
    """Seconds per parameter of an Adam step (the training loop's optimizer) over 8M parameters in 64 tensors,
    gradients set: a model's step pays it per parameter (memory-bound elementwise updates)."""
    params = [torch.zeros(1 << 17, device=device, requires_grad=True) for _ in range(64)]
    for p in params:
        p.grad = torch.randn_like(p)
    optimizer = torch.optim.Adam(params, lr=1e-3)
    per_step, _ = _timed(optimizer.step, device, seconds)
    return per_step / sum(p.numel() for p in params)


def host_to_device(device: torch.device, seconds: float) -> float | None:
    if not devices.of(device).pins_memory:
        return None
    source = torch.empty(64 << 20, dtype=torch.uint8).pin_memory()
    target = torch.empty_like(source, device=device)

    def step():
        target.copy_(source, non_blocking=True)

    per_copy, _ = _timed(step, device, seconds)
    return source.numel() / per_copy


PIPELINE_WINDOWS = 3  # the input pipeline is timed in this many windows (each its own loader pass): its spread


def input_pipeline(
    train: TrainSettings,
    device: torch.device,
    seconds: float,
    images: int = 16384,
    step=None,
    dataset=None,
    windows: int = PIPELINE_WINDOWS,
) -> dict:
    """images/s of the `paper` host DataLoader (configured workers, pinning, transforms), on the prepared dataset
    training reads when `dataset` is given (else `images` seeded synthetic uint8 images), in `windows` passes of
    `seconds / windows` each, each pass a fresh loader iterator as a training epoch starts one. Per pass: the
    seconds to its first batch (worker start-up, which every epoch of non-persistent workers pays) and the
    images/s after it. With `step`, each batch is also copied to the device and a training step run on it, as
    the training loop does (the main process's share of loading, collation and pinning, then the wait for the
    step: the rate training sees when the compute is small). The rate is the median pass; `spread` is the
    largest pass over the smallest less one: within one lease the host's pace moves from minute to minute."""
    from gpuscale.measure import loaders

    if dataset is not None:
        loader, _ = loaders.host_loaders(dataset, train, device, seed=0)
        source = probekind.PREPARED_DATA
    else:
        loader = loaders.synthetic_host_loader(images, train, device, "probe synthetic")
        source = probekind.SYNTHETIC
    passes = [_pipeline_pass(loader, device, seconds / max(1, windows), step) for _ in range(max(1, windows))]
    rates = sorted(p["images_per_second"] for p in passes if p["images_per_second"])
    median = rates[len(rates) // 2] if rates else None
    return {
        "images_per_second": median,
        "passes": passes,
        "spread": (rates[-1] / rates[0] - 1.0) if rates else None,
        "startup_seconds": sorted(p["startup_seconds"] for p in passes)[len(passes) // 2],
        "batches": sum(p["batches"] for p in passes),
        "source": source,
        "num_workers": train.loader.num_workers,
        "batch_size": train.batch_size,
    }


def _pipeline_pass(loader, device: torch.device, seconds: float, step) -> dict:
    """One loader pass: seconds to the first batch (worker start-up), then images/s for about `seconds`."""
    batches, seen, begin = 0, 0, time.perf_counter()
    start = None
    for x, y in loader:
        if step is not None:
            step(x.to(device, non_blocking=True), y.to(device, non_blocking=True))
        if start is None:  # worker start-up is not the pipeline's rate
            _sync(device)
            startup, start = time.perf_counter() - begin, time.perf_counter()
            continue
        seen += x.shape[0]
        batches += 1
        if time.perf_counter() - start >= seconds:
            break
    _sync(device)
    elapsed = time.perf_counter() - start if start is not None else 0.0
    return {
        "images_per_second": seen / elapsed if seen and elapsed > 0 else None,
        "batches": batches,
        "startup_seconds": startup if start is not None else 0.0,
    }


def run(
    device_slug: str,
    train_settings: TrainSettings | dict,
    budget_seconds: float = 60.0,
    threads: int | None = None,
    quick: bool = False,
    dataset=None,
    spec_models: tuple[str, ...] = (),
) -> dict:
    """Measure `device_slug` within about `budget_seconds`; returns the probe record.

    quick: the rate check before a study (one dense convolution, the step costs, the input pipeline);
    every other kind then runs at the dense rate in the cost model. dataset: the prepared dataset training reads
    (inputs.data.load_prepared); its input pipeline is then timed on it, not on synthetic images. spec_models: the
    study's models named by spec, timed first in the layer table."""
    from gpuscale.measure import train as train_mod

    train = TrainSettings.of(train_settings)
    started = train_mod.now_iso()
    wall = time.perf_counter()
    device = train_mod.torch_device(device_slug)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "device": device_slug,
        "budget_seconds": budget_seconds,
        "batch_size": train.batch_size,
        "threads": None,
        "status": "measured",
        "not_measured_reason": None,
        "kinds": {},
        "fixed_step_seconds": None,
        "layer_seconds": None,
        "op_seconds": None,
        "optimizer_seconds_per_parameter": None,
        "layer_table": None,
        "host_to_device_bytes_per_second": None,
        "input_pipeline_images_per_second": None,
        "input_pipeline": None,
        "environment": None,
        "started_at": started,
        "finished_at": None,
        "elapsed_seconds": None,
    }
    reason = train_mod.device_unavailable_reason(device)
    if reason:
        _not_measured(doc, device_slug, reason)
    else:
        if not devices.of(device).facts.gpu:
            torch.set_num_threads(threads or train.cpu_threads or os.cpu_count() or 1)
        doc["threads"] = torch.get_num_threads()
        doc["environment"] = devices.environment(device)
        _measure_witnessed(doc, device, device_slug, train, budget_seconds, quick, dataset, spec_models)
    doc["finished_at"] = train_mod.now_iso()
    doc["elapsed_seconds"] = time.perf_counter() - wall
    return doc


def _not_measured(doc: dict, device_slug: str, reason: str) -> None:
    log.warning("probe: %s not measured: %s", device_slug, reason)
    doc.update(status="not_measured", not_measured_reason=reason)
    doc["environment"] = {"host_fingerprint": envinfo.host_fingerprint(), "hardware": envinfo.hardware()}
    doc["conditions"] = conditions.conditions(envinfo.boot_id(), None, None)


def _measure_witnessed(
    doc: dict,
    device,
    device_slug: str,
    train: TrainSettings,
    budget: float,
    quick: bool,
    dataset=None,
    spec_models: tuple = (),
) -> None:
    """_measure between two sentinels (gpuscale.measure.sentinel): the probe's lease and whether the machine drifted."""
    before = sentinel.measure(train, device)
    _measure(doc, device, device_slug, train, budget, quick, dataset, spec_models)
    after = sentinel.measure(train, device)
    doc["conditions"] = conditions.conditions(doc["environment"].get("boot_id"), before, after)
    drifted = conditions.drift_line(doc["conditions"])
    if drifted:
        log.warning("probe %s: %s", device_slug, drifted.replace("this job", "this probe"))


def _measure(
    doc: dict,
    device,
    device_slug: str,
    train: TrainSettings,
    budget_seconds: float,
    quick: bool,
    dataset=None,
    spec_models=(),
) -> None:
    """The probe's parts, in order, each within its share of the budget, into `doc`."""
    batch = train.batch_size
    torch.manual_seed(0)
    cases_by_kind = layer_cases(batch)
    if quick:
        cases_by_kind = {"conv": cases_by_kind["conv"][1:2]}
    for kind, cases in cases_by_kind.items():
        doc["kinds"][kind] = measure_kind(cases, device, budget_seconds * SHARES[kind], kind)
        unit = "G elements/s" if kind == "other" else "GFLOP/s"
        log.info("probe %s: %s %.3g %s", device_slug, kind, doc["kinds"][kind]["flops_per_second"] / 1e9, unit)
    tiny, stack = tiny_model(), stacked_model(LAYER_STACK)
    fixed, _ = _timed(_train_step(tiny, device, batch), device, budget_seconds * SHARES["fixed"])
    stacked, _ = _timed(_train_step(stack, device, batch), device, budget_seconds * SHARES["layers"])
    doc["fixed_step_seconds"] = fixed
    stack_cost, tiny_cost = nets.training_cost(stack), nets.training_cost(tiny)

    def extra_work(skip: tuple[str, ...] = ()) -> float:  # the stack's work beyond the tiny model's, in seconds
        stack_work = _work_seconds(stack_cost["flops_by_kind"], doc["kinds"], batch, skip)
        return stack_work - _work_seconds(tiny_cost["flops_by_kind"], doc["kinds"], batch, skip)

    # what each further layer adds beyond its FLOPs and elements (charged at the rates measured above)
    doc["layer_seconds"] = max(0.0, stacked - fixed - max(0.0, extra_work())) / (2 * LAYER_STACK)
    # what each further dispatched op adds beyond the FLOPs of convolutions, matmuls and attention, its
    # normalisation or activation included: how a GPU's eager step is priced (launches, not elements)
    ops = stack_cost["ops_per_step"] - tiny_cost["ops_per_step"]
    doc["op_seconds"] = max(0.0, stacked - fixed - max(0.0, extra_work(skip=("other",)))) / ops
    doc["optimizer_seconds_per_parameter"] = optimizer_seconds(device, budget_seconds * SHARES["optimizer"])
    if not quick:
        doc["host_to_device_bytes_per_second"] = host_to_device(device, budget_seconds * SHARES["host_to_device"])
    # a GPU's isolated layers are launch-bound: see costmodel.from_probe
    if not quick and not devices.of(device).facts.gpu:
        # the models asked for (gpuscale probe --model) and the study's own named by spec first, then the registry's
        names = list(dict.fromkeys([*spec_models, *models.MODEL_NAMES])) if spec_models else None
        table = layer_table(device, min(batch, TABLE_BATCH_CPU), budget_seconds * SHARES["layer_table"], names)
        doc["layer_table"] = table
        log.info(
            "probe %s: layer table, %d distinct layer calls of %d models in %.1f s (not timed: %s)",
            device_slug,
            len(table["layers"]),
            len(table["models"]),
            table["seconds"],
            ", ".join(table["models_not_timed"]) or "none",
        )
        warn_unsettled(table, device_slug)
    _measure_pipeline(doc, device, device_slug, train, budget_seconds * SHARES["input_pipeline"], quick, dataset)


def warn_unsettled(table: dict, device_slug: str) -> bool:
    """Warn (and say so) where a model's layer table holds over UNSETTLED_WARNING in calls still paused after
    re-timing (layertable.settled): its CPU prediction would read slow."""
    worst = max(table["models"].items(), key=lambda kv: kv[1].get("unsettled_share", 0.0), default=None)
    if not worst or worst[1].get("unsettled_share", 0.0) <= UNSETTLED_WARNING:
        return False
    log.warning(
        "probe %s: %d layer calls' median pass was over %.1fx their fastest after %d passes (%d calls re-timed): a "
        "pause of the host, not their cost; they make up %.0f%% of %s's table, so its CPU prediction reads slow: "
        "probe again",
        device_slug,
        table.get("unsettled_calls", 0),
        PAUSED_RATIO,
        TABLE_PASSES + RETIME_PASSES,
        table.get("retimed_calls", 0),
        100 * worst[1]["unsettled_share"],
        worst[0],
    )
    return True


def _measure_pipeline(doc: dict, device, device_slug: str, train: TrainSettings, share: float, quick: bool, dataset):
    """The input pipeline alone and (not quick) with the fixed step's model trained on each batch, into `doc`."""
    pipeline = input_pipeline(train, device, share / 2, dataset=dataset)
    if not quick:
        step = _train_step(tiny_model(), device, train.batch_size)  # the fixed step's model
        pipeline["with_step"] = input_pipeline(train, device, share / 2, step=step, dataset=dataset)
    doc["input_pipeline"] = pipeline
    doc["input_pipeline_images_per_second"] = pipeline["images_per_second"]
    log.info(
        "probe %s: fixed step %.2f ms, %.3f ms per layer, input pipeline %.0f images/s (%s, passes %s)",
        device_slug,
        doc["fixed_step_seconds"] * 1e3,
        doc["layer_seconds"] * 1e3,
        pipeline["images_per_second"] or 0,
        pipeline["source"],
        " ".join(f"{p['images_per_second'] or 0:.0f}" for p in (pipeline.get("with_step") or pipeline)["passes"]),
    )


def write(path: Path | str, doc: dict) -> None:
    validate(doc, source=str(path))
    fsutil.write_json(path, doc)


def load(path: Path | str) -> dict:
    doc = json.loads(Path(path).read_text())
    validate(doc, source=str(path))
    return doc
