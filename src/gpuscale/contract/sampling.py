"""The sampled protocol's arithmetic, shared by training (which extrapolates) and aggregation (which checks the
extrapolation on full runs). No torch here: analysis imports it."""

from __future__ import annotations


def extrapolate(
    warm_seconds: float, measured_seconds: float, warmup_steps: int, measured_steps: int, steps_per_epoch: int
) -> float:
    """An epoch's seconds from its first `measured_steps`: the first `warmup_steps` as they were (loader start,
    warm-up), the rest at the steady per-step time of those measured after them."""
    per_step = (measured_seconds - warm_seconds) / (measured_steps - warmup_steps)
    return warm_seconds + per_step * (steps_per_epoch - warmup_steps)
