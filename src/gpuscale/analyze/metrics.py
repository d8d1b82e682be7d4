"""results/metrics.json: this host's figures under short stable keys, for `dvc exp show` and `dvc metrics diff`.

Three groups, the speedups first (so they are the columns a narrow terminal shows):

    x.<variant>.<model>               steady speedup: the CPU's steady epoch over the GPU's (both devices ran)
    s.<variant>.<model>.<device>      seconds per epoch (median over seeds)
    acc.<variant>.<model>.<device>    final test accuracy (median over seeds; sampled runs left out)

A speedup against another GPU than `cuda` is keyed `<model>@<device>` (e.g. `resnet18@cuda-1`). Only this
host's records count: the shipped reference studies never change between experiments, so they stay out. A
figure that does not exist (a device not measured, a single epoch has no steady part) has no key.
Pure Python (no torch, no polars): the aggregation stage hands it plain rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

from gpuscale.contract import fsutil

GPU_DEFAULT = "cuda"
DIGITS = {"x": 2, "s": 3, "acc": 4}


def _number(value, digits: int) -> float | None:
    if value is None or (isinstance(value, float) and (math.isnan(value) or math.isinf(value))):
        return None
    return round(float(value), digits)


def _put(out: dict, group: str, path: list[str], value) -> None:
    value = _number(value, DIGITS[group])
    if value is None:
        return
    node = out[group]
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value


def build(speedup_rows: Iterable[dict]) -> dict:
    """The metrics of one host from rows of the speedup table (one source's rows).

    Each row pairs a GPU device with the CPU for one (variant, model); a row without a GPU (CPU only) or
    without a CPU (GPU only) gives that device's seconds and accuracy alone."""
    out: dict = {"x": {}, "s": {}, "acc": {}}
    for row in speedup_rows:
        variant, model, gpu = row["variant"], row["model"], row.get("gpu_device")
        if gpu is not None:
            name = model if gpu == GPU_DEFAULT else f"{model}@{gpu}"
            _put(out, "x", [variant, name], row.get("steady_speedup"))
            _put(out, "s", [variant, model, gpu], row.get("gpu_epoch_seconds"))
            if not row.get("gpu_extrapolated"):
                _put(out, "acc", [variant, model, gpu], row.get("gpu_accuracy"))
        _put(out, "s", [variant, model, "cpu"], row.get("cpu_epoch_seconds"))
        if not row.get("cpu_extrapolated"):
            _put(out, "acc", [variant, model, "cpu"], row.get("cpu_accuracy"))
    return out


def write(path: Path, speedup_rows: Iterable[dict]) -> dict:
    metrics = build(speedup_rows)
    fsutil.write_json(path, metrics)
    return metrics
