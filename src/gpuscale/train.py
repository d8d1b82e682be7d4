"""The training stage: one (model, device, variant, seed) trained with the protocol from params,
timed, and written as a run record.

Needs torch, torchvision, numpy, pillow and pyyaml only, so it runs on a bare GPU box.
Timing: the device is synchronised before every clock read; an epoch's time covers loading,
host-to-device copies, forward, backward and the optimizer step, and nothing else (evaluation is
timed apart, after the clock stops).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from gpuscale import data as data_stage
from gpuscale import energy, envinfo, estimate, loaders, nets, record, sampling, variants
from gpuscale.models import MODELS
from gpuscale.params import data_parallel_size

log = logging.getLogger("gpuscale.train")


class TrainError(RuntimeError):
    """A run that cannot be made; str() says the cause and the fix."""


def torch_device(slug: str) -> torch.device:
    """'cpu', 'cuda', 'cuda-1', 'mps' (the params spelling; no ':' in file names) -> torch.device; a data-parallel
    spec ('cuda-ddp4', 'cpu-ddp2') gives its kind of device (each process then takes its own GPU)."""
    if data_parallel_size(slug) > 1:
        return torch.device(slug.split("-", 1)[0])
    if slug.startswith("cuda-"):
        return torch.device("cuda", int(slug.split("-", 1)[1]))
    return torch.device(slug)


def device_unavailable_reason(device: torch.device) -> str | None:
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return "no CUDA GPU on this host (torch.cuda.is_available() is False)"
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


def make_optimizer(model: nn.Module, settings: dict, runner: variants.Runner | None = None):
    spec = settings["optimizer"]
    kwargs = runner.optimizer_kwargs() if runner else {}
    cls = torch.optim.Adam if spec["name"] == "adam" else torch.optim.SGD
    extra = {} if spec["name"] == "adam" else {"momentum": 0.9}
    try:
        optimizer = cls(model.parameters(), lr=spec["lr"], weight_decay=spec["weight_decay"], **extra, **kwargs)
        if runner:
            runner.note_optimizer(bool(kwargs.get("fused")))
    except (RuntimeError, TypeError, ValueError) as err:
        if not kwargs:
            raise
        optimizer = cls(model.parameters(), lr=spec["lr"], weight_decay=spec["weight_decay"], **extra)
        runner.note_optimizer(False, f"fused optimizer unavailable here ({err}); ran the default implementation")
    sched = settings["scheduler"]
    scheduler = (
        torch.optim.lr_scheduler.StepLR(optimizer, step_size=sched["step_size"], gamma=sched["gamma"])
        if sched["name"] == "steplr"
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
    steps_per_epoch = len(loader)
    sampled = max_steps is not None and max_steps < steps_per_epoch
    warmup = min(sample_warmup_steps, max_steps - 1) if sampled else 0
    # Per-step results stay on the device as scalars; summed once at the end (no host sync, fewest kernels).
    losses: list[torch.Tensor] = []
    corrects: list[torch.Tensor] = []
    sizes: list[int] = []
    images_seen = 0
    steps = 0
    warm_seconds = 0.0
    # A few synchronised clock reads per epoch (negligible): from them, the error the sampled protocol would
    # make on this very epoch is known (gpuscale.aggregate's `sampling` table).
    marks = {m for m in (sample_warmup_steps, *STEP_MARKS) if 0 < m < steps_per_epoch}
    step_marks: list[list] = []
    sync()
    start = time.perf_counter()
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
        progress(steps, images_seen, lambda: weighted_loss_sum(losses, sizes), start)
        if steps in marks or (sampled and steps == warmup):
            sync()
            elapsed = time.perf_counter() - start
            if steps in marks:
                step_marks.append([steps, elapsed])
            if sampled and steps == warmup:
                warm_seconds = elapsed
        if sampled and steps >= max_steps:
            break
    sync()
    measured_seconds = time.perf_counter() - start
    seconds = measured_seconds
    train_images = images_seen
    if sampled:
        seconds = sampling.extrapolate(warm_seconds, measured_seconds, warmup, steps, steps_per_epoch)
        train_images = len(loader.dataset)
    return {
        "train_seconds": seconds,
        "train_images": train_images,
        "steps": steps_per_epoch if sampled else steps,
        "measured_steps": steps,
        "measured_seconds": measured_seconds,
        "extrapolated": sampled,
        "step_marks": step_marks,
        "images_per_second": train_images / seconds if seconds > 0 else 0.0,
        "train_loss": weighted_loss_sum(losses, sizes) / max(images_seen, 1),
        "train_accuracy": torch.stack(corrects).sum().item() / max(images_seen, 1),
    }


def weighted_loss_sum(losses: list[torch.Tensor], sizes: list[int]) -> float:
    """Sum of per-batch mean losses times batch sizes (the last batch may be smaller); syncs the device."""
    weights = torch.tensor(sizes, dtype=losses[0].dtype, device=losses[0].device)
    return float((torch.stack(losses) * weights).sum())


PHASES = ("data_wait", "host_to_device", "forward", "backward", "optimizer")


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
        if cuda:
            marks = [torch.cuda.Event(enable_timing=True) for _ in range(5)]
            clock = lambda i: marks[i].record()
        else:
            stamps = [0.0] * 5
            clock = lambda i: stamps.__setitem__(i, time.perf_counter())
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
        if cuda:
            spans = [marks[i].elapsed_time(marks[i + 1]) / 1000.0 for i in range(4)]
        else:
            spans = [stamps[i + 1] - stamps[i] for i in range(4)]
        for phase, span in zip(PHASES[1:], spans):
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
        "description": MODELS[name].description,
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
    world = data_parallel_size(spec)
    if world == 1:
        return device_unavailable_reason(torch_device(spec))
    if spec.startswith("cuda"):
        reason = device_unavailable_reason(torch.device("cuda", 0))
        if reason is None and torch.cuda.device_count() < world:
            reason = f"{spec} needs {world} CUDA GPUs; this host has {torch.cuda.device_count()}"
        return reason
    return None


def run(
    settings: dict, data_dir: Path, out: Path, threads: int | None, label: str | None = None, resume: bool = False
) -> dict:
    """Train one run (see _run); a data-parallel device joins the process group torchrun made, and leaves it."""
    world, device_type = data_parallel_size(settings["device"]), torch_device(settings["device"]).type
    ctx = None
    if world > 1 and not spec_unavailable_reason(settings["device"]):
        from gpuscale import distributed

        ctx = distributed.setup(device_type, world)
    try:
        with variants.compile_cache(settings["variant_knobs"], device_type) as cache:
            return _run(settings, data_dir, out, threads, label, resume, ctx, cache)
    finally:
        if ctx is not None:
            distributed.teardown()


def _run(
    settings: dict,
    data_dir: Path,
    out: Path,
    threads: int | None,
    label: str | None,
    resume: bool,
    ctx,
    cache: dict | None = None,
) -> dict:
    """Train one run as `settings` (gpuscale.params.run_settings) says and write its record to `out`.

    With `resume`, a checkpoint beside `out` is written after every epoch; a later call for the same run on
    the same host, settings and data continues after the last completed epoch. Each epoch keeps the time the
    process that ran it measured, the first epoch of every process counts as a warm-up epoch, and the record
    lists which process timed which epochs.
    """
    wall_start = time.perf_counter()
    started_at = now_iso()
    train_settings = settings["train"]
    if settings.get("sweep", {}).get("parameter") == "threads":
        threads = settings["sweep"]["value"]  # the swept value wins over the job's threads
    threads = threads or train_settings["cpu_threads"] or os.cpu_count() or 1
    distributed_info = None
    if ctx is not None:  # data-parallel: the job's threads shared out, one GPU per process
        threads = max(1, threads // ctx.world_size)
        device = torch.device("cuda", ctx.local_rank) if settings["device"].startswith("cuda") else torch.device("cpu")
        per_process = train_settings["batch_size"]
        if train_settings["distributed_batch"] == "global":
            per_process = max(1, train_settings["batch_size"] // ctx.world_size)
        train_settings = {**train_settings, "batch_size": per_process}
        distributed_info = {
            **ctx.describe(),
            "distributed_batch": settings["train"]["distributed_batch"],
            "per_process_batch_size": per_process,
            "global_batch_size": per_process * ctx.world_size,
        }
        if resume:
            log.warning("runtime.resume is not supported for data-parallel runs yet: running without checkpoints")
            resume = False
    else:
        device = torch_device(settings["device"])
    torch.set_num_threads(threads)
    set_determinism(settings["seed"], train_settings["deterministic"])

    dataset, manifest, manifest_sha256 = data_stage.load_prepared(data_dir)
    model = MODELS[settings["model"]].build(len(dataset.classes))
    base = {
        "schema_version": record.SCHEMA_VERSION,
        "kind": record.KIND,
        "key": {
            k: settings[k] for k in ("model", "device", "variant", "seed") + (("sweep",) if "sweep" in settings else ())
        },
        "label": label,
        "settings": settings,
        "model": model_info(settings["model"], model),
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
    if manifest["synthetic"]:
        log.warning("training on SYNTHETIC data: timings are real, accuracies say nothing about CIFAR-10")

    reason = spec_unavailable_reason(settings["device"])
    if reason:
        if settings["on_missing_device"] == "error":
            raise TrainError(
                f"device {settings['device']}: {reason} (study.on_missing_device: error; set it to record to get a 'not measured' record instead)"
            )
        log.warning("device %s not measured: %s", settings["device"], reason)
        result = {
            **base,
            "status": "not_measured",
            "not_measured_reason": reason,
            "environment": envinfo.capture(torch.device("cpu")),
            "timing": None,
            "epochs": [],
            "phase_profile": None,
            "energy": None,
            "variant": None,
            "quality": None,
            "distributed": None,
            "started_at": started_at,
            "finished_at": now_iso(),
        }
        record.write(out, result)
        return result

    runner = variants.Runner(settings["variant"], settings["variant_knobs"], device, cache)
    core = model = model.to(device)
    wrap = None
    if ctx is not None:

        def wrap(module):
            return nn.parallel.DistributedDataParallel(
                module, device_ids=[device.index] if device.type == "cuda" else None
            )

    model = runner.prepare_model(model, wrap=wrap)
    eval_model = model if ctx is None else core  # every process evaluates the whole test set, no collectives
    if train_settings["max_steps_per_epoch"] and runner.effective["compile"] != "none":
        runner.notes.append(
            "sampled protocol with a compiled model: the recompilation for an epoch's last, smaller "
            "batch falls outside the timed steps, so the first epoch is underestimated"
        )
    criterion = nn.CrossEntropyLoss()
    optimizer, scheduler = make_optimizer(model, train_settings, runner)
    train_loader, test_loader = loaders.make_loaders(
        dataset,
        train_settings,
        settings["variant_knobs"],
        device,
        settings["seed"],
        rank=ctx.rank if ctx else 0,
        world_size=ctx.world_size if ctx else 1,
    )
    sync = None
    if ctx is not None:

        def sync():
            synchronize(device)
            ctx.barrier()

    environment = envinfo.capture(device)
    tag = f"[{settings['model']} {settings['device']} {settings['variant']} seed{settings['seed']}]"
    log.info(
        "%s %d parameters, %.3g training GFLOPs/image, %d threads, %s",
        tag,
        base["model"]["parameters"],
        base["model"]["train_flops_per_image"] / 1e9,
        threads,
        environment["gpu"]["name"] if environment["gpu"] else environment["cpu_model"],
    )
    epochs_total = train_settings["epochs"]
    steps_per_epoch = len(train_loader)
    every = train_settings["log_every_steps"]

    gpu_energy, cpu_energy = energy.gpu_meter(device), energy.cpu_meter()
    epochs: list[dict] = []
    segment = {"pid": os.getpid(), "started_at": started_at, "epochs": []}
    segments = [segment]
    generators = [loader.generator for loader in (train_loader, test_loader) if getattr(loader, "generator", None)]
    ckpt_path = ckpt_identity = None
    if resume:
        from gpuscale import checkpoint

        ckpt_path = checkpoint.path_for(out)
        ckpt_identity = {
            "host_fingerprint": envinfo.host_fingerprint(),
            "settings_sha256": hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest(),
            "manifest_sha256": manifest_sha256,
        }
        meta = checkpoint.usable(ckpt_path, ckpt_identity)
        if meta is not None:
            checkpoint.restore(
                ckpt_path,
                meta,
                model=model,
                optimizer=optimizer,
                scheduler=scheduler,
                scaler=runner.scaler,
                generators=generators,
            )
            epochs, segments = meta["epochs"], [*meta["segments"], segment]
            log.info(
                "%s resumed from %s after epoch %d (timed by process %s)",
                tag,
                ckpt_path,
                len(epochs),
                ", ".join(str(s["pid"]) for s in meta["segments"]),
            )
    first_epoch = len(epochs) + 1
    setup_seconds = time.perf_counter() - wall_start
    loop_start = time.perf_counter()
    timed_steps = min(steps_per_epoch, train_settings["max_steps_per_epoch"] or steps_per_epoch)
    for epoch in range(first_epoch, epochs_total + 1):

        def progress(step, images_seen, loss_sum, start, epoch=epoch):
            if step % every == 0 or step == steps_per_epoch:
                loss = loss_sum() / images_seen  # syncs, so only every `every` steps
                rate = images_seen / (time.perf_counter() - start)
                done = epoch - first_epoch + step / timed_steps  # epochs of this process, evaluations included
                eta = (time.perf_counter() - loop_start) / done * (epochs_total - first_epoch + 1 - done)
                study = estimate.study_eta_seconds(eta, out)
                log.info(
                    "%s epoch %d/%d step %d/%d loss %.4f %.0f img/s, job ETA %.0f s%s",
                    tag,
                    epoch,
                    epochs_total,
                    step,
                    steps_per_epoch,
                    loss,
                    rate,
                    eta,
                    "" if study is None else f", study ETA {study:.0f} s",
                )

        learning_rate = optimizer.param_groups[0]["lr"]
        if hasattr(getattr(train_loader, "sampler", None), "set_epoch"):
            train_loader.sampler.set_epoch(epoch)  # a new shuffle per epoch, the same in every process
        joules_before = (gpu_energy.read(), cpu_energy.read())
        try:
            stats = train_epoch(
                model,
                train_loader,
                device,
                criterion,
                optimizer,
                progress,
                max_steps=train_settings["max_steps_per_epoch"],
                sample_warmup_steps=train_settings["sample_warmup_steps"],
                runner=runner,
                sync=sync,
            )
        except torch.OutOfMemoryError:
            raise TrainError(
                f"{tag}: out of {device.type} memory at batch size {train_settings['batch_size']}; "
                f"lower train.batch_size or models.{settings['model']}.batch_size"
            ) from None
        joules = [None if a is None else b - a for a, b in zip(joules_before, (gpu_energy.read(), cpu_energy.read()))]
        if stats["extrapolated"]:
            joules = [None if j is None else j * stats["train_seconds"] / stats["measured_seconds"] for j in joules]
        stats["energy_joules"] = {"gpu": joules[0], "cpu": joules[1]}
        if ctx is not None:  # loss and accuracy over every process's shard (after the clock stopped)
            seen = stats["train_images"] if not stats["extrapolated"] else stats["measured_steps"]
            loss_sum, correct, images = ctx.sum(
                [stats["train_loss"] * seen, stats["train_accuracy"] * seen, seen], device
            )
            stats.update(train_loss=loss_sum / images, train_accuracy=correct / images)
            if not stats["extrapolated"]:  # a sampled epoch already counts the whole dataset
                stats.update(train_images=int(images), images_per_second=images / stats["train_seconds"])
        if scheduler is not None:
            scheduler.step()
        synchronize(device)
        eval_start = time.perf_counter()
        test_loss, test_accuracy = evaluate(eval_model, test_loader, device, criterion, runner)
        synchronize(device)
        eval_seconds = time.perf_counter() - eval_start
        # warm-up: the first epoch this process ran (cuDNN autotuning, compilation, worker start, lazy init)
        epochs.append(
            {
                "epoch": epoch,
                "warmup": epoch == first_epoch,
                **stats,
                "eval_seconds": eval_seconds,
                "test_loss": test_loss,
                "test_accuracy": test_accuracy,
                "learning_rate": learning_rate,
            }
        )
        segment["epochs"].append(epoch)
        log.info(
            "%s epoch %d/%d done: %.2f s train (%.0f img/s), loss %.4f, test accuracy %.2f%% (%.2f s eval)",
            tag,
            epoch,
            epochs_total,
            stats["train_seconds"],
            stats["images_per_second"],
            stats["train_loss"],
            100 * test_accuracy,
            eval_seconds,
        )
        if ckpt_path is not None and epoch < epochs_total:
            checkpoint.save(
                ckpt_path,
                model=model,
                optimizer=optimizer,
                scheduler=scheduler,
                scaler=runner.scaler,
                generators=generators,
                identity=ckpt_identity,
                epochs=epochs,
                segments=segments,
            )

    phase_profile = None
    if train_settings["phase_profile_steps"]:
        phase_profile = profile_phases(
            model, train_loader, device, criterion, optimizer, train_settings["phase_profile_steps"], runner
        )
        steady = [e for e in epochs if not e["warmup"]] or epochs
        clean = statistics.median(e["train_seconds"] / e["steps"] for e in steady)
        phase_profile["clean_step_seconds"] = clean
        phase_profile["overhead_fraction"] = phase_profile["instrumented_step_seconds"] / clean - 1.0
        log.info(
            "%s phases per step: %s (instrumented step %.4f s vs clean %.4f s)",
            tag,
            ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in phase_profile["phase_seconds_per_step"].items()),
            phase_profile["instrumented_step_seconds"],
            clean,
        )
    clock = "perf_counter after torch.cuda.synchronize" if device.type == "cuda" else "perf_counter"
    result = {
        **base,
        "status": "measured",
        "not_measured_reason": None,
        "environment": environment,
        "timing": summarize_timing(epochs, setup_seconds, time.perf_counter() - wall_start, clock),
        "epochs": epochs,
        "phase_profile": phase_profile,
        "energy": energy_summary(epochs, gpu_energy, cpu_energy),
        "variant": runner.describe(),
        "quality": {
            "final_test_accuracy": epochs[-1]["test_accuracy"],
            "final_test_loss": epochs[-1]["test_loss"],
            "best_test_accuracy": max(e["test_accuracy"] for e in epochs),
        },
        "distributed": distributed_info,
        "started_at": segments[0]["started_at"],
        "finished_at": now_iso(),
    }
    result["process"] = {**base["process"], "resumed": len(segments) > 1, "segments": segments}
    if ctx is not None and not ctx.is_main:
        return result  # rank 0 writes the one record
    record.write(out, result)
    if ckpt_path is not None:
        ckpt_path.unlink(missing_ok=True)
    log.info("%s %.2f s training in %d epochs -> %s", tag, result["timing"]["total_train_seconds"], epochs_total, out)
    return result
