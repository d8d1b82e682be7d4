"""What the transfer across leases can know and what it cannot: each lease's `paper` epochs over its own
probe's prediction (transfer.ratios), split into a lease's level, a model's shape and what is left.

    python research/prediction/ratio_parts.py [--all] [FOLDER ...]
        (default: reference/h200-2026-12-04 reference/h100-2026-12-05, one card per folder)

Per folder and device, over the leases probed as the tool probes today (transfer.Lease.probed_as_today; --all: every
lease whose probe gives ratios), the log ratio of each (lease, model) is fitted as lease + model (two-way, additive,
least squares) and the parts' spreads printed:

- lease: the sd of the leases' levels, how far a lease's epochs ran from what its own probe said, for every model
  alike. The transfer takes the level from the target's probe, so this is the target's probe's miss;
- model: the sd of the models' shapes, what a probe gets wrong the same way in every lease. The transfer learns it
  from the other leases' records;
- left: the residual sd (degrees of freedom: cells - leases - models + 1), one model's ratio in one lease beyond its
  lease's level and its shape. Nothing another lease measured can carry it;
- repeat: the pooled sd of one (lease, model, device)'s steady epoch between rounds of the same lease, the part of
  `left` that is the run itself (where leases ran a model twice).

Then the floor those parts set for a prediction that knew every model's shape exactly and took the level from the
probe: per device sqrt(lease² + left²), the speedup the two devices' in quadrature, scored against N single draws like
round_noise.py (N: the held-out speedups of lease_transfer.py's table for the folder, 4,000 repeats, fixed seed).
Last, whether what is left follows the host: its correlation with how far each sentinel component (gpuscale.measure.
sentinel) moved from the probe's minute (the sentinel the probe took before it) to the job's (before and after it).
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from round_noise import floor  # research/prediction/: the same scoring against single draws

from gpuscale.contract import record
from gpuscale.predict import costmodel as cm
from gpuscale.predict import prediction as predict
from gpuscale.predict import transfer

sys.path.insert(0, str(next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())))
from research.prediction import validation  # noqa: E402  (the leave-one-lease-out check lives in research/)

DEFAULT = ["reference/h200-2026-12-04", "reference/h100-2026-12-05"]
DEVICES = ("cpu", "cuda")


def two_way(cells: dict[tuple[str, str], float]) -> dict:
    """Least-squares fit of cells[(lease, model)] = mu + lease + model (sum-to-zero by lstsq's minimum norm): the sd of
    the lease effects, of the model effects (models in two or more leases), and the residual sd with its degrees of
    freedom."""
    leases = sorted({k[0] for k in cells})
    models = sorted({k[1] for k in cells})
    li = {x: i for i, x in enumerate(leases)}
    mi = {x: i for i, x in enumerate(models)}
    keys = sorted(cells)
    design = np.zeros((len(keys), 1 + len(leases) + len(models)))
    for row, (lease, model) in enumerate(keys):
        design[row, 0] = 1.0
        design[row, 1 + li[lease]] = 1.0
        design[row, 1 + len(leases) + mi[model]] = 1.0
    y = np.array([cells[k] for k in keys])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - design @ coef
    freedom = len(keys) - np.linalg.matrix_rank(design)
    lease_effects = coef[1 : 1 + len(leases)]
    model_effects = coef[1 + len(leases) :]
    shared = [mi[m] for m in models if sum((x, m) in cells for x in leases) >= 2]
    return {
        "cells": len(keys),
        "leases": len(leases),
        "models": len(models),
        "lease_sd": float(np.std(lease_effects - lease_effects.mean())),
        "model_sd": float(np.std(model_effects[shared])) if shared else 0.0,
        "left_sd": float(math.sqrt(float(residual @ residual) / freedom)) if freedom > 0 else float("nan"),
        "freedom": int(freedom),
        "residuals": dict(zip(keys, residual.tolist(), strict=True)),
    }


def repeat_sd(folder: Path, leases: set[str], device: str) -> tuple[float, int]:
    """The pooled sd of one steady `paper` epoch (seed 0) between rounds of the same lease, model and device, over
    the given leases (conditions.lease); 0 degrees of freedom where no model ran twice."""
    by_key: dict[tuple, list[float]] = defaultdict(list)
    for path in record.files(folder):
        rec = record.load(path)
        k = rec["key"]
        if rec["status"] != "measured" or k["variant"] != "paper" or k["seed"] != 0 or k.get("sweep"):
            continue
        if k["device"] != device or rec["conditions"]["lease"][:8] not in leases:
            continue
        by_key[(rec["conditions"]["lease"], k["model"])].append(math.log(rec["timing"]["steady_epoch_seconds_median"]))
    squares = sum(sum((x - statistics.fmean(v)) ** 2 for x in v) for v in by_key.values() if len(v) >= 2)
    freedom = sum(len(v) - 1 for v in by_key.values() if len(v) >= 2)
    return (math.sqrt(squares / freedom), freedom) if freedom else (float("nan"), 0)


SENTINEL = ("memory_bandwidth", "pipeline_one_process", "pipeline_workers", "gpu_launch")


def sentinel_shift(lease: transfer.Lease, model: str, device: str, name: str) -> float | None:
    """log of a sentinel component at the model's jobs (the mean log over its records' before and after) less its
    log in the sentinel the lease's probe of the device took before it: how far the host had moved from the probe's
    minute to the job's (None where either is missing)."""
    start = transfer.sentinel_logs(
        [{"conditions": {"before": (lease.probes[device].get("conditions") or {}).get("before")}}], name
    )
    records = [
        r
        for r in predict.load_records(Path(lease.name))
        if r["key"]["model"] == model and r["key"]["device"] == device and r["key"]["variant"] == "paper"
    ]
    at_job = transfer.sentinel_logs(records, name)
    return statistics.fmean(at_job) - start[0] if start and at_job else None


def main(argv: list[str]) -> int:
    every = "--all" in argv
    folders = [Path(a) for a in argv if not a.startswith("--")] or [Path(f) for f in DEFAULT]
    facts = cm.load_facts()
    shifts: dict[tuple, tuple[float, int]] = {}
    print("| folder | device | leases | models | cells | lease | model | left | repeat | floor: sd, median / worst |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for folder in folders:
        leases = transfer.leases_of(folder, predict.load_records, predict.load_probes)
        leases = [x for x in leases if every or x.probed_as_today()]
        names = {Path(x.name).name[:8] for x in leases}
        by_name = {x.name: x for x in leases}
        draws = sum(r["device"] == "speedup" for r in validation.leave_one_lease_out(leases, facts))
        floors = []
        for device in DEVICES:
            cells = {
                (x.name, model): math.log(r) for x in leases for model, r in transfer.ratios(x, facts, device).items()
            }
            if len(cells) < 3:
                continue
            parts = two_way(cells)
            repeat, repeat_freedom = repeat_sd(folder, names, device)
            sd = math.hypot(parts["lease_sd"], parts["left_sd"])
            floors.append(sd)
            median, worst, _ = floor(sd, draws)
            for name in SENTINEL:
                pairs = [
                    (shift, left)
                    for (lease_name, model), left in parts["residuals"].items()
                    if (shift := sentinel_shift(by_name[lease_name], model, device, name)) is not None
                ]
                if len(pairs) >= 5:
                    shifts[(folder.name, device, name)] = (float(np.corrcoef(np.array(pairs).T)[0, 1]), len(pairs))
            print(
                f"| {folder.name} | {device} | {parts['leases']} | {parts['models']} | {parts['cells']} | "
                f"{parts['lease_sd']:.3f} | {parts['model_sd']:.3f} | {parts['left_sd']:.3f} ({parts['freedom']}) | "
                f"{repeat:.3f} ({repeat_freedom}) | {sd:.3f}, {median:.1f}% / {worst:.1f}% |"
            )
        if len(floors) == 2 and draws:
            sd = math.hypot(*floors)
            median, worst, _ = floor(sd, draws)
            print(f"| {folder.name} | speedup | | | {draws} | | | | | {sd:.3f}, {median:.1f}% / {worst:.1f}% |")
    print(
        "\nwhat is left against the host's move from the probe's minute to the job's (sentinel, log): correlation (n)"
    )
    for (folder_name, device, name), (r, n) in shifts.items():
        print(f"{folder_name:18} {device:5} {name:22} {r:+.2f} ({n})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
