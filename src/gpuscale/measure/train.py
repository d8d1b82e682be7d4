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

from gpuscale.contract import conditions, record
from gpuscale.contract.settings import DeviceSpec, RunSettings, TrainSettings
from gpuscale.inputs import data as data_stage
from gpuscale.measure import devices, energy, envinfo, eta, loaders, sentinel, timinglock, variants
from gpuscale.measure.epoch import evaluate, profile_phases, summarize_timing, synchronize, train_epoch
from gpuscale.models import nets, registry

log = logging.getLogger("gpuscale.train")


class TrainError(RuntimeError):
    """A run that cannot be made; str() says the cause and the fix."""


def torch_device(slug: str) -> torch.device:
    """'cpu', 'cuda', 'cuda-1', 'mps' (the params spelling; no ':' in file names) -> torch.device; a data-parallel
    spec ('cuda-ddp4', 'cpu-ddp2') gives its kind of device (each process then takes its own GPU)."""
    spec = DeviceSpec.parse(slug)
    return devices.of(spec.kind).torch_device(spec.index)


def device_unavailable_reason(device: torch.device) -> str | None:
    return devices.of(device).unavailable(device)


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


def model_info(name: str, model: nn.Module) -> dict:
    return {
        "name": name,
        "description": registry.description(name),
        "parameters": nets.parameter_count(model),
        **nets.flops_per_image(model),
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
    return devices.of(kind).unavailable_processes(spec, world)


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
    environment = devices.environment(run_ctx.device)
    environment["timing_lock"] = timinglock.describe()  # {path, held, waited_seconds, holder_pid}
    run_ctx.environment = environment
    log_start(run_ctx, base, environment)
    before = take_sentinel(run_ctx, "before")
    meters = devices.of(run_ctx.device).energy_meter(run_ctx.device), energy.cpu_meter()
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
        run_ctx.device = devices.of(run.device.kind).process_device(ctx.local_rank)
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
        {**envinfo.capture(), "timing_lock": timinglock.describe()},
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
                module, device_ids=devices.of(device).parallel_device_ids(device)
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
    clock = devices.of(run_ctx.device).clock
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
