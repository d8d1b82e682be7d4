"""One timed training epoch, the evaluation after it, the phase profile of a step, and the timing summary of a run.

Timing: the device is synchronised before every clock read; an epoch's time covers loading, host-to-device copies,
forward, backward and the optimizer step, and nothing else (evaluation is timed apart, after the clock stops).
"""

from __future__ import annotations

import statistics
import time

import torch
from torch import nn

from gpuscale.contract import record, sampling
from gpuscale.measure import devices, variants


def synchronize(device: torch.device) -> None:
    devices.of(device).synchronize(device)


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
    protocol would make on this very epoch is known (gpuscale.analyze.aggregate's `sampling` table), and the sampled
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


def profile_phases(model, loader, device, criterion, optimizer, steps: int, runner: variants.Runner) -> dict:
    """Where a training step's time goes, measured in separate instrumented steps.

    The headline epochs stay clean: this pass synchronises the device at every step (the stamps are its kind's:
    CUDA events on a CUDA GPU, perf_counter elsewhere), which itself costs time; `overhead_fraction` in the record
    compares it with the clean per-step time.
    """
    model.train()
    kind = devices.of(device)
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
        clock = kind.stamps()
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
        "clock": kind.phase_clock,
        "phase_seconds_per_step": per_step,
        "phase_fractions": {phase: value / phase_sum for phase, value in per_step.items()},
        "phase_sum_seconds_per_step": phase_sum,
        "instrumented_step_seconds": wall / done,
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
