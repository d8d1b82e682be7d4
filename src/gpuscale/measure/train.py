"""The training stage: one (model, device, variant, seed) trained with the protocol from params,
timed, and written as a run record.

Needs torch, torchvision, numpy, pillow and pyyaml only, so it runs on a bare GPU box.
Timing: the device is synchronised before every clock read; an epoch's time covers loading,
host-to-device copies, forward, backward and the optimizer step, and nothing else (evaluation is
timed apart, after the clock stops).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from gpuscale.contract import conditions, record, sampling
from gpuscale.contract.settings import DeviceSpec, RunSettings, TrainSettings
from gpuscale.inputs import data as data_stage
from gpuscale.measure import energy, envinfo, eta, loaders, sentinel, timinglock, variants
from gpuscale.models import nets, registry

log = logging.getLogger("gpuscale.train")


class TrainError(RuntimeError):
    """A run that cannot be made; str() says the cause and the fix."""


def torch_device(slug: str) -> torch.device:
    """'cpu', 'cuda', 'cuda-1', 'mps' (the params spelling; no ':' in file names) -> torch.device; a data-parallel
    spec ('cuda-ddp4', 'cpu-ddp2') gives its kind of device (each process then takes its own GPU)."""
    spec = DeviceSpec.parse(slug)
    return torch.device(spec.kind) if spec.index is None else torch.device(spec.kind, spec.index)


def device_unavailable_reason(device: torch.device) -> str | None:
    if device.type == "cuda":
        if not torch.cuda.is_available():
            # a GPU this torch cannot use (driver too old for the build, or a CPU build) is named, with the fix
            return envinfo.cuda_mismatch() or "no CUDA GPU on this host (torch.cuda.is_available() is False)"
        index = device.index or 0
        if index >= torch.cuda.device_count():
            return f"this host has {torch.cuda.device_count()} CUDA GPU(s); cuda-{index} does not exist"
    if device.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        return "no Apple MPS device on this host"
    return None


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def make_optimizer(model: nn.Module, settings: TrainSettings | dict, runner: variants.Runner | None = None):
    settings = TrainSettings.of(settings)
    spec = settings.optimizer
    kwargs = runner.optimizer_kwargs() if runner else {}
    cls = torch.optim.Adam if spec.name == "adam" else torch.optim.SGD
    extra = {} if spec.name == "adam" else {"momentum": 0.9}
    try:
        optimizer = cls(model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay, **extra, **kwargs)
        if runner:
            runner.note_optimizer(bool(kwargs.get("fused")))
    except (RuntimeError, TypeError, ValueError) as err:
        if not kwargs:
            raise
        optimizer = cls(model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay, **extra)
        runner.note_optimizer(False, f"fused optimizer unavailable here ({err}); ran the default implementation")
    sched = settings.scheduler
    scheduler = (
        torch.optim.lr_scheduler.StepLR(optimizer, step_size=sched.step_size, gamma=sched.gamma)
        if sched.name == "steplr"
        else None
    )
    return optimizer, scheduler


def set_determinism(seed: int, deterministic: bool) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(deterministic)  # process-wide: set both ways


def evaluate(model: nn.Module, loader, device: torch.device, criterion, runner: variants.Runner) -> tuple[float, float]:
    model.eval()
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.long)
    count = 0
    with torch.no_grad():
        for images, labels in loader:
            images = runner.inputs(images)
            labels = labels.to(device, non_blocking=True)
            with runner.autocast():
                outputs = model(images)
                loss = criterion(outputs, labels)
            loss_sum += loss.float() * labels.numel()
            correct += (outputs.argmax(1) == labels).sum()
            count += labels.numel()
    return loss_sum.item() / count, correct.item() / count


STEP_MARKS = (10, 20, 40, 60, 100, 200, 400, 800)


class _EpochClock:
    """The few synchronised clock reads of an epoch (negligible): step marks, from which the error the sampled
    protocol would make on this very epoch is known (gpuscale.aggregate's `sampling` table), and the sampled
    protocol's warm-up and stop. The loop calls `at(step)` only on the steps in `attention`."""

    def __init__(self, steps_per_epoch: int, max_steps: int | None, warmup_steps: int, sync):
        self.steps_per_epoch, self.max_steps, self.sync = steps_per_epoch, max_steps, sync
        self.sampled = max_steps is not None and max_steps < steps_per_epoch
        self.warmup = min(warmup_steps, max_steps - 1) if self.sampled else 0
        self.marks = {m for m in (warmup_steps, *STEP_MARKS) if 0 < m < steps_per_epoch}
        self.attention = self.marks | ({self.warmup, max_steps} if self.sampled else set())
        self.step_marks: list[list] = []
        self.warm_seconds = 0.0
        self.start = 0.0

    def at(self, step: int) -> bool:
        """Read the clock where this step needs it; True when a sampled epoch stops here."""
        if step in self.marks or (self.sampled and step == self.warmup):
            self.sync()
            elapsed = time.perf_counter() - self.start
            if step in self.marks:
                self.step_marks.append([step, elapsed])
            if self.sampled and step == self.warmup:
                self.warm_seconds = elapsed
        return self.sampled and step >= self.max_steps

    def stats(self, steps: int, images_seen: int, dataset_size: int) -> dict:
        """The epoch's time and size: measured, or for a sampled epoch extrapolated to the whole epoch."""
        measured = time.perf_counter() - self.start
        seconds = measured
        if self.sampled:
            seconds = sampling.extrapolate(self.warm_seconds, measured, self.warmup, steps, self.steps_per_epoch)
        images = dataset_size if self.sampled else images_seen
        return {
            "train_seconds": seconds,
            "train_images": images,
            "steps": self.steps_per_epoch if self.sampled else steps,
            "measured_steps": steps,
            "measured_seconds": measured,
            "extrapolated": self.sampled,
            "step_marks": self.step_marks,
            "images_per_second": images / seconds if seconds > 0 else 0.0,
        }


def train_epoch(
    model,
    loader,
    device,
    criterion,
    optimizer,
    progress,
    max_steps: int | None = None,
    sample_warmup_steps: int = 0,
    runner: variants.Runner | None = None,
    sync=None,
) -> dict:
    """One timed epoch. Loss and accuracy accumulate on the device: no per-step host sync.

    With max_steps below the loader's length (the sampled protocol) only that many steps run; the epoch
    time is then the measured time of the first `sample_warmup_steps` (loader start, warm-up) plus the
    steady per-step time of the rest, times the steps left, and the epoch is marked extrapolated.
    """
    runner = runner or variants.Runner("paper", variants.PAPER_KNOBS, device)
    sync = sync or (lambda: synchronize(device))  # data-parallel: also a barrier, so rank 0's clock covers all
    model.train()
    clock = _EpochClock(len(loader), max_steps, sample_warmup_steps, sync)
    # Per-step results stay on the device as scalars; summed once at the end (no host sync, fewest kernels).
    losses: list[torch.Tensor] = []
    corrects: list[torch.Tensor] = []
    sizes: list[int] = []
    images_seen = steps = 0
    sync()
    clock.start = time.perf_counter()
    for images, labels in loader:
        images = runner.inputs(images)
        labels = labels.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        with runner.autocast():
            outputs = model(images)
            loss = criterion(outputs, labels)
        runner.backward_step(loss, optimizer)
        losses.append(loss.detach().float())
        corrects.append((outputs.detach().argmax(1) == labels).sum())
        sizes.append(labels.numel())
        images_seen += sizes[-1]
        steps += 1
        progress(steps, images_seen, lambda: weighted_loss_sum(losses, sizes), clock.start)
        if steps in clock.attention and clock.at(steps):
            break
    sync()
    return {
        **clock.stats(steps, images_seen, len(loader.dataset)),
        "train_loss": weighted_loss_sum(losses, sizes) / max(images_seen, 1),
        "train_accuracy": torch.stack(corrects).sum().item() / max(images_seen, 1),
    }


def weighted_loss_sum(losses: list[torch.Tensor], sizes: list[int]) -> float:
    """Sum of per-batch mean losses times batch sizes (the last batch may be smaller); syncs the device."""
    weights = torch.tensor(sizes, dtype=losses[0].dtype, device=losses[0].device)
    return float((torch.stack(losses) * weights).sum())


PHASES = record.PHASES


class _StepClock:
    """Five time stamps around a step's phases: CUDA events on the GPU, perf_counter elsewhere."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.marks: list = [torch.cuda.Event(enable_timing=True) for _ in range(5)] if cuda else [0.0] * 5

    def __call__(self, i: int) -> None:
        if self.cuda:
            self.marks[i].record()
        else:
            self.marks[i] = time.perf_counter()

    def spans(self) -> list[float]:
        """Seconds between consecutive stamps (after the device was synchronised)."""
        if self.cuda:
            return [self.marks[i].elapsed_time(self.marks[i + 1]) / 1000.0 for i in range(4)]
        return [self.marks[i + 1] - self.marks[i] for i in range(4)]


def profile_phases(model, loader, device, criterion, optimizer, steps: int, runner: variants.Runner) -> dict:
    """Where a training step's time goes, measured in separate instrumented steps.

    The headline epochs stay clean: this pass synchronises the device at every step (CUDA events on
    the GPU, perf_counter on the CPU), which itself costs time; `overhead_fraction` in the record
    compares it with the clean per-step time.
    """
    model.train()
    cuda = device.type == "cuda"
    totals = dict.fromkeys(PHASES, 0.0)
    done = 0
    iterator = iter(loader)
    synchronize(device)
    wall_start = time.perf_counter()
    while done < steps:
        t0 = time.perf_counter()
        try:
            images, labels = next(iterator)
        except StopIteration:
            iterator = iter(loader)
            continue
        totals["data_wait"] += time.perf_counter() - t0
        clock = _StepClock(cuda)
        clock(0)
        images = runner.inputs(images)
        labels = labels.to(device, non_blocking=True)
        clock(1)
        with runner.autocast():
            outputs = model(images)
            loss = criterion(outputs, labels)
        clock(2)
        optimizer.zero_grad(set_to_none=True)
        runner.backward(loss)
        clock(3)
        runner.step(optimizer)
        clock(4)
        synchronize(device)
        for phase, span in zip(PHASES[1:], clock.spans(), strict=True):
            totals[phase] += span
        done += 1
    wall = time.perf_counter() - wall_start
    per_step = {phase: total / done for phase, total in totals.items()}
    phase_sum = sum(per_step.values())
    return {
        "steps": done,
        "clock": "cuda events (data wait: perf_counter)" if cuda else "perf_counter",
        "phase_seconds_per_step": per_step,
        "phase_fractions": {phase: value / phase_sum for phase, value in per_step.items()},
        "phase_sum_seconds_per_step": phase_sum,
        "instrumented_step_seconds": wall / done,
    }


def model_info(name: str, model: nn.Module) -> dict:
    return {
        "name": name,
        "description": registry.description(name),
        "parameters": nets.parameter_count(model),
        **nets.flops_per_image(model),
    }


def summarize_timing(epochs: list[dict], setup_seconds: float, wall_seconds: float, clock: str) -> dict:
    """Totals over all epochs; steady figures over the epochs not flagged warm-up (the first of each process)."""
    train_seconds = [e["train_seconds"] for e in epochs]
    steady = [e["train_seconds"] for e in epochs if not e["warmup"]]
    images = sum(e["train_images"] for e in epochs)
    steady_images = sum(e["train_images"] for e in epochs if not e["warmup"])
    total = sum(train_seconds)
    return {
        "clock": clock,
        "total_train_seconds": total,
        "warmup_epoch_seconds": train_seconds[0],
        "steady_epoch_seconds_mean": statistics.fmean(steady) if steady else None,
        "steady_epoch_seconds_median": statistics.median(steady) if steady else None,
        "total_eval_seconds": sum(e["eval_seconds"] for e in epochs),
        "train_images_per_second": images / total if total > 0 else 0.0,
        "steady_images_per_second": steady_images / sum(steady) if steady and sum(steady) > 0 else None,
        "setup_seconds": setup_seconds,
        "wall_seconds": wall_seconds,
        "extrapolated": any(e["extrapolated"] for e in epochs),
    }


def energy_summary(epochs: list[dict], gpu_energy, cpu_energy) -> dict:
    out = {}
    for name, meter in (("gpu", gpu_energy), ("cpu", cpu_energy)):
        joules = [e["energy_joules"][name] for e in epochs]
        info = meter.describe()
        if info["available"] and all(j is not None for j in joules):
            images = sum(e["train_images"] for e in epochs)
            info.update(
                joules_per_epoch=statistics.fmean(joules),
                images_per_joule=images / sum(joules) if sum(joules) > 0 else None,
            )
        else:
            info.update(joules_per_epoch=None, images_per_joule=None)
        out[name] = info
    return out


def spec_unavailable_reason(spec: str) -> str | None:
    """Why a device spec (params spelling, data-parallel ones included) cannot run on this host, or None."""
    world, kind = DeviceSpec.parse(spec).world_size, DeviceSpec.parse(spec).kind
    if world == 1:
        return device_unavailable_reason(torch_device(spec))
    if kind == "cuda":
        reason = device_unavailable_reason(torch.device("cuda", 0))
        if reason is None and torch.cuda.device_count() < world:
            reason = f"{spec} needs {world} CUDA GPUs; this host has {torch.cuda.device_count()}"
        return reason
    return None


def run(
    settings: RunSettings | dict,
    data_dir: Path,
    out: Path,
    threads: int | None,
    label: str | None = None,
    resume: bool = False,
    round_: int = 1,
) -> dict:
    """Train one run (see _run); a data-parallel device joins the process group torchrun made, and leaves it.
    `settings`: the typed run settings, or params.run_settings' dict (typed here, once, and passed down)."""
    run = RunSettings.of(settings)
    world, device_type = run.device.world_size, run.device.kind
    ctx = None
    if world > 1 and not spec_unavailable_reason(run.device.spec):
        from gpuscale.measure import distributed

        ctx = distributed.setup(device_type, world)
    try:  # the host-wide timing lock (measure.timinglock): re-entrant, so a no-op where `gpuscale train` took it
        with (
            timinglock.hold(watch_parent=False),
            variants.compile_cache(run.variant_knobs, device_type) as cache,
        ):
            return _run(run, data_dir, out, threads, label, resume, ctx, cache, round_)
    finally:
        if ctx is not None:
            distributed.teardown()


@dataclass
class RunContext:
    """What one process of a run works with: its settings, device, threads, and the run's bookkeeping."""

    settings: dict  # the run's settings as the record keeps them (run.to_dict(): params.run_settings' dict)
    run: RunSettings  # the same, typed once
    train: TrainSettings  # train.* for this process (a data-parallel run shares out the batch)
    device: torch.device
    threads: int
    out: Path
    resume: bool
    ctx: object | None = None  # gpuscale.measure.distributed.Context of a data-parallel run
    distributed: dict | None = None
    tag: str = ""
    round: int = 1  # of the study's interleaved order (study.rounds)
    environment: dict = field(default_factory=dict)
    first_epoch: int = 1
    loop_start: float = 0.0  # envinfo.capture, once the device is set up
    started_at: str = field(default_factory=now_iso)
    wall_start: float = field(default_factory=time.perf_counter)
    setup_seconds: float = 0.0  # from the start to the first epoch this process trains


@dataclass
class Training:
    """The objects the epochs train: model, optimizer, loaders, and how to synchronise."""

    runner: variants.Runner
    model: nn.Module
    eval_model: nn.Module
    criterion: nn.Module
    optimizer: object
    scheduler: object
    train_loader: object
    test_loader: object
    sync: object = None


def _run(
    run: RunSettings,
    data_dir: Path,
    out: Path,
    threads: int | None,
    label: str | None,
    resume: bool,
    ctx,
    cache: dict | None = None,
    round_: int = 1,
) -> dict:
    """Train one run as `run` (gpuscale.contract.params.typed_run_settings) says and write its record to `out`.

    With `resume`, a checkpoint beside `out` is written after every epoch; a later call for the same run on
    the same host, settings and data continues after the last completed epoch. Each epoch keeps the time the
    process that ran it measured, the first epoch of every process counts as a warm-up epoch, and the record
    lists which process timed which epochs.
    """
    run_ctx = prepare_context(run, out, threads, resume, ctx)
    run_ctx.round = round_
    dataset, manifest, manifest_sha256 = data_stage.load_prepared(data_dir)
    model = registry.build(run_ctx.run.model, len(dataset.classes))
    base = base_record(run_ctx, label, model, manifest, manifest_sha256)
    if manifest["synthetic"]:
        log.warning("training on SYNTHETIC data: timings are real, accuracies say nothing about CIFAR-10")
    reason = spec_unavailable_reason(run_ctx.run.device.spec)
    if reason:
        return write_not_measured(run_ctx, base, reason)
    training = build_training(run_ctx, model, dataset, cache)
    environment = envinfo.capture(run_ctx.device)
    environment["timing_lock"] = timinglock.describe()  # {path, held, waited_seconds, holder_pid}
    run_ctx.environment = environment
    log_start(run_ctx, base, environment)
    before = take_sentinel(run_ctx, "before")
    meters = energy.gpu_meter(run_ctx.device), energy.cpu_meter()
    epochs, segments, ckpt = train_epochs(run_ctx, training, meters, manifest_sha256)
    phase_profile = profile(run_ctx, training, epochs)
    state = conditions.conditions(environment.get("boot_id"), before, take_sentinel(run_ctx, "after"))
    result = measured_record(run_ctx, base, environment, epochs, segments, phase_profile, training, meters, state)
    if ctx is not None and not ctx.is_main:
        return result  # rank 0 writes the one record
    record.write(out, result)
    from gpuscale.measure import checkpoint

    checkpoint.discard(out, "the run finished")  # also one left by a killed run that had runtime.resume on
    total = result["timing"]["total_train_seconds"]
    log.info("%s %.2f s training in %d epochs -> %s", run_ctx.tag, total, run_ctx.train.epochs, out)
    drifted = conditions.drift_line(state)
    if drifted:
        log.warning("%s %s", run_ctx.tag, drifted)
    return result


def take_sentinel(run_ctx: RunContext, when: str) -> dict | None:
    """The sentinel (measure.sentinel) on the run's device, with its train settings and threads; rank 0 only."""
    if run_ctx.ctx is not None and not run_ctx.ctx.is_main:
        return None
    doc = sentinel.measure(run_ctx.train, run_ctx.device)
    parts = ", ".join(f"{name} {conditions.format_value(name, c['value'])}" for name, c in doc["components"].items())
    log.info("%s sentinel %s (%.1f s): %s", run_ctx.tag, when, doc["seconds"], parts)
    return doc


def prepare_context(run: RunSettings, out: Path, threads: int | None, resume: bool, ctx) -> RunContext:
    """Threads, device and per-process batch of this process; seeds and determinism set."""
    train = run.train
    if run.sweep is not None and run.sweep.parameter == "threads":
        threads = run.sweep.value  # the swept value wins over the job's threads
    threads = threads or train.cpu_threads or os.cpu_count() or 1
    tag = f"[{run.model} {run.device} {run.variant} seed{run.seed}]"
    run_ctx = RunContext(run.to_dict(), run, train, torch_device(run.device.spec), threads, out, resume, tag=tag)
    if ctx is not None:  # data-parallel: the job's threads shared out, one GPU per process
        per_process = train.batch_size
        if train.distributed_batch == "global":
            per_process = max(1, train.batch_size // ctx.world_size)
        run_ctx.threads = max(1, threads // ctx.world_size)
        run_ctx.device = torch.device("cuda", ctx.local_rank) if run.device.kind == "cuda" else torch.device("cpu")
        run_ctx.train = dataclasses.replace(train, batch_size=per_process)
        run_ctx.ctx = ctx
        run_ctx.distributed = {
            **ctx.describe(),
            "distributed_batch": train.distributed_batch,
            "per_process_batch_size": per_process,
            "global_batch_size": per_process * ctx.world_size,
        }
        if resume:
            log.warning("runtime.resume is not supported for data-parallel runs yet: running without checkpoints")
            run_ctx.resume = False
    torch.set_num_threads(run_ctx.threads)
    set_determinism(run.seed, run_ctx.train.deterministic)
    return run_ctx


def base_record(run_ctx: RunContext, label: str | None, model: nn.Module, manifest: dict, manifest_sha256: str) -> dict:
    """The fields every record has, measured or not (the settings as params gave them)."""
    return {
        "schema_version": record.SCHEMA_VERSION,
        "kind": record.KIND,
        "key": record.key_of(run_ctx.settings, run_ctx.round),
        "label": label,
        "settings": run_ctx.settings,
        "model": model_info(run_ctx.run.model, model),
        "data": {
            "source": manifest["source"],
            "synthetic": manifest["synthetic"],
            "manifest_sha256": manifest_sha256,
            "train_images": manifest["counts"]["train"]["total"],
            "test_images": manifest["counts"]["test"]["total"],
            "classes": manifest["classes"],
        },
        "process": {"pid": os.getpid(), "argv": sys.argv, "resumed": False},
    }


def write_not_measured(run_ctx: RunContext, base: dict, reason: str) -> dict:
    """The record of a device this host lacks (study.on_missing_device: record), or the error (: error)."""
    run = run_ctx.run
    if run.on_missing_device == "error":
        raise TrainError(
            f"device {run.device}: {reason} (study.on_missing_device: error; "
            "set it to record to get a 'not measured' record instead)"
        )
    log.warning("device %s not measured: %s", run.device, reason)
    result = record.not_measured(
        base,
        reason,
        {**envinfo.capture(torch.device("cpu")), "timing_lock": timinglock.describe()},
        started_at=run_ctx.started_at,
        finished_at=now_iso(),
    )
    record.write(run_ctx.out, result)
    return result


def build_training(run_ctx: RunContext, model: nn.Module, dataset, cache: dict | None) -> Training:
    """Model on its device and wrapped as the variant says, optimizer, scheduler and loaders."""
    run, device, ctx = run_ctx.run, run_ctx.device, run_ctx.ctx
    runner = variants.Runner(run.variant, run.variant_knobs, device, cache)
    core = model = model.to(device)
    wrap = sync = None
    if ctx is not None:

        def wrap(module):
            return nn.parallel.DistributedDataParallel(
                module, device_ids=[device.index] if device.type == "cuda" else None
            )

        def sync():
            synchronize(device)
            ctx.barrier()

    model = runner.prepare_model(model, wrap=wrap)
    if run_ctx.train.max_steps_per_epoch and runner.effective["compile"] != "none":
        runner.notes.append(
            "sampled protocol with a compiled model: the recompilation for an epoch's last, smaller "
            "batch falls outside the timed steps, so the first epoch is underestimated"
        )
    optimizer, scheduler = make_optimizer(model, run_ctx.train, runner)
    train_loader, test_loader = loaders.make_loaders(
        dataset,
        run_ctx.train,
        run.variant_knobs,
        device,
        run.seed,
        rank=ctx.rank if ctx else 0,
        world_size=ctx.world_size if ctx else 1,
    )
    eval_model = model if ctx is None else core  # every process evaluates the whole test set, no collectives
    criterion = nn.CrossEntropyLoss()
    return Training(runner, model, eval_model, criterion, optimizer, scheduler, train_loader, test_loader, sync)


def log_start(run_ctx: RunContext, base: dict, environment: dict) -> None:
    log.info(
        "%s %d parameters, %.3g training GFLOPs/image, %d threads, %s",
        run_ctx.tag,
        base["model"]["parameters"],
        base["model"]["train_flops_per_image"] / 1e9,
        run_ctx.threads,
        environment["gpu"]["name"] if environment["gpu"] else environment["cpu_model"],
    )


def _generators(training: Training) -> list:
    loaders_ = (training.train_loader, training.test_loader)
    return [loader.generator for loader in loaders_ if getattr(loader, "generator", None)]


def resume_state(run_ctx: RunContext, training: Training, manifest_sha256: str, segment: dict):
    """(epochs, segments, (checkpoint path, identity)) from a usable checkpoint, else a fresh start."""
    from gpuscale.measure import checkpoint

    path = checkpoint.path_for(run_ctx.out)
    identity = checkpoint.identity(
        host_fingerprint=envinfo.host_fingerprint(),
        settings=run_ctx.settings,
        manifest_sha256=manifest_sha256,
        environment=run_ctx.environment,
    )
    meta = checkpoint.usable(path, identity)
    if meta is None:
        return [], [segment], (path, identity)
    checkpoint.restore(path, meta, **_state(training))
    timed_by = ", ".join(str(s["pid"]) for s in meta["segments"])
    log.info(
        "%s resumed from %s after epoch %d (timed by process %s)", run_ctx.tag, path, len(meta["epochs"]), timed_by
    )
    return meta["epochs"], [*meta["segments"], segment], (path, identity)


def _state(training: Training) -> dict:
    """What a checkpoint saves and restores besides the epochs."""
    return {
        "model": training.model,
        "optimizer": training.optimizer,
        "scheduler": training.scheduler,
        "scaler": training.runner.scaler,
        "generators": _generators(training),
    }


def train_epochs(run_ctx: RunContext, training: Training, meters, manifest_sha256: str):
    """Every epoch not yet done: train, evaluate, checkpoint. Returns (epochs, segments, checkpoint or None)."""
    segment = {"pid": os.getpid(), "started_at": run_ctx.started_at, "epochs": []}
    epochs, segments, ckpt = [], [segment], None
    if run_ctx.resume:
        epochs, segments, ckpt = resume_state(run_ctx, training, manifest_sha256, segment)
    first_epoch, epochs_total = len(epochs) + 1, run_ctx.train.epochs
    run_ctx.setup_seconds = time.perf_counter() - run_ctx.wall_start
    run_ctx.first_epoch, run_ctx.loop_start = first_epoch, time.perf_counter()  # for the progress lines' ETA
    for epoch in range(first_epoch, epochs_total + 1):
        stats = one_epoch(run_ctx, training, meters, epoch)
        # warm-up: the first epoch this process ran (cuDNN autotuning, compilation, worker start, lazy init)
        epochs.append({"epoch": epoch, "warmup": epoch == first_epoch, **stats})
        segment["epochs"].append(epoch)
        if ckpt is not None and epoch < epochs_total:
            from gpuscale.measure import checkpoint

            checkpoint.save(ckpt[0], **_state(training), identity=ckpt[1], epochs=epochs, segments=segments)
    return epochs, segments, ckpt


def _progress(run_ctx: RunContext, epoch: int, steps_per_epoch: int):
    every, tag, epochs_total = run_ctx.train.log_every_steps, run_ctx.tag, run_ctx.train.epochs
    timed_steps = min(steps_per_epoch, run_ctx.train.max_steps_per_epoch or steps_per_epoch)
    first_epoch, loop_start = run_ctx.first_epoch, run_ctx.loop_start

    def progress(step, images_seen, loss_sum, start):
        if step % every == 0 or step == steps_per_epoch:
            loss = loss_sum() / images_seen  # syncs, so only every `every` steps
            rate = images_seen / (time.perf_counter() - start)
            done = epoch - first_epoch + min(step, timed_steps) / timed_steps  # this process's epochs, evaluations in
            job_eta = (time.perf_counter() - loop_start) / done * (epochs_total - first_epoch + 1 - done)
            study = eta.study_eta_seconds(job_eta, run_ctx.out)
            log.info(
                "%s epoch %d/%d step %d/%d loss %.4f %.0f img/s, job ETA %.0f s%s",
                tag,
                epoch,
                epochs_total,
                step,
                steps_per_epoch,
                loss,
                rate,
                job_eta,
                "" if study is None else f", study ETA {study:.0f} s",
            )

    return progress


def one_epoch(run_ctx: RunContext, training: Training, meters, epoch: int) -> dict:
    """One timed training epoch with its energy, then the evaluation (timed apart)."""
    t, device = training, run_ctx.device
    learning_rate = t.optimizer.param_groups[0]["lr"]
    if hasattr(getattr(t.train_loader, "sampler", None), "set_epoch"):
        t.train_loader.sampler.set_epoch(epoch)  # a new shuffle per epoch, the same in every process
    joules_before = [meter.read() for meter in meters]
    progress = _progress(run_ctx, epoch, len(t.train_loader))
    try:
        stats = train_epoch(
            t.model,
            t.train_loader,
            device,
            t.criterion,
            t.optimizer,
            progress,
            max_steps=run_ctx.train.max_steps_per_epoch,
            sample_warmup_steps=run_ctx.train.sample_warmup_steps,
            runner=t.runner,
            sync=t.sync,
        )
    except torch.OutOfMemoryError:
        raise TrainError(
            f"{run_ctx.tag}: out of {device.type} memory at batch size {run_ctx.train.batch_size}; "
            f"lower train.batch_size or models.{run_ctx.run.model}.batch_size"
        ) from None
    stats["energy_joules"] = epoch_energy(stats, joules_before, [meter.read() for meter in meters])
    if run_ctx.ctx is not None:
        reduce_over_processes(run_ctx.ctx, stats, device)
    if t.scheduler is not None:
        t.scheduler.step()
    synchronize(device)
    eval_start = time.perf_counter()
    test_loss, test_accuracy = evaluate(t.eval_model, t.test_loader, device, t.criterion, t.runner)
    synchronize(device)
    eval_seconds = time.perf_counter() - eval_start
    log.info(
        "%s epoch %d/%d done: %.2f s train (%.0f img/s), loss %.4f, test accuracy %.2f%% (%.2f s eval)",
        run_ctx.tag,
        epoch,
        run_ctx.train.epochs,
        stats["train_seconds"],
        stats["images_per_second"],
        stats["train_loss"],
        100 * test_accuracy,
        eval_seconds,
    )
    return {
        **stats,
        "eval_seconds": eval_seconds,
        "test_loss": test_loss,
        "test_accuracy": test_accuracy,
        "learning_rate": learning_rate,
    }


def epoch_energy(stats: dict, before: list, after: list) -> dict:
    """Joules per meter over the epoch; a sampled epoch's scaled to the whole epoch like its time."""
    joules = [None if a is None else b - a for a, b in zip(before, after, strict=True)]
    if stats["extrapolated"]:
        joules = [None if j is None else j * stats["train_seconds"] / stats["measured_seconds"] for j in joules]
    return {"gpu": joules[0], "cpu": joules[1]}


def reduce_over_processes(ctx, stats: dict, device: torch.device) -> None:
    """Loss and accuracy over every process's shard (after the clock stopped)."""
    seen = stats["train_images"] if not stats["extrapolated"] else stats["measured_steps"]
    loss_sum, correct, images = ctx.sum([stats["train_loss"] * seen, stats["train_accuracy"] * seen, seen], device)
    stats.update(train_loss=loss_sum / images, train_accuracy=correct / images)
    if not stats["extrapolated"]:  # a sampled epoch already counts the whole dataset
        stats.update(train_images=int(images), images_per_second=images / stats["train_seconds"])


def profile(run_ctx: RunContext, training: Training, epochs: list[dict]) -> dict | None:
    """The phase profile (train.phase_profile_steps instrumented steps), against the clean step time."""
    steps = run_ctx.train.phase_profile_steps
    if not steps:
        return None
    t = training
    phase_profile = profile_phases(t.model, t.train_loader, run_ctx.device, t.criterion, t.optimizer, steps, t.runner)
    steady = [e for e in epochs if not e["warmup"]] or epochs
    clean = statistics.median(e["train_seconds"] / e["steps"] for e in steady)
    phase_profile["clean_step_seconds"] = clean
    phase_profile["overhead_fraction"] = phase_profile["instrumented_step_seconds"] / clean - 1.0
    log.info(
        "%s phases per step: %s (instrumented step %.4f s vs clean %.4f s)",
        run_ctx.tag,
        ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in phase_profile["phase_seconds_per_step"].items()),
        phase_profile["instrumented_step_seconds"],
        clean,
    )
    return phase_profile


def measured_record(run_ctx, base, environment, epochs, segments, phase_profile, training, meters, state) -> dict:
    clock = "perf_counter after torch.cuda.synchronize" if run_ctx.device.type == "cuda" else "perf_counter"
    wall_seconds = time.perf_counter() - run_ctx.wall_start
    return record.measured(
        base,
        environment=environment,
        timing=summarize_timing(epochs, run_ctx.setup_seconds, wall_seconds, clock),
        epochs=epochs,
        phase_profile=phase_profile,
        energy=energy_summary(epochs, *meters),
        variant=training.runner.describe(),
        distributed=run_ctx.distributed,
        segments=segments,
        finished_at=now_iso(),
        conditions=state,
    )
