"""Each probe a lease holds, in turn, as that lease's probe: how much of a fresh-lease prediction's error
is the moment the probe was taken.

    python research/prediction/probe_moments.py FOLDER [LEASE_ID ...]
        (FOLDER: a paired reference with leases/<id>/probe/, e.g. reference/h100-2026-12-05; default: every lease)

A lease folder keeps its probes of one device at several moments: probe/<device>.json (the one the transfer reads,
the lease's first of that device unless its README says otherwise), probe/first/ (taken before it, e.g. the GPU
probed cold and again: h200_lease.sh's FIRST_PROBES), probe/mid/ (the start and end of later calls), probe/end/.
For each such probe this prints the lease's epochs of that device predicted by the transfer (the other leases of
FOLDER as calibration, as research/prediction/lease_transfer.py --separately) and by the probe alone: median and worst
|error| and the share inside the band, beside the probe's input-pipeline rate. The other device keeps its usual
probe. A wide spread between a lease's rows is the lease's own pace moving, which no probe taken once can follow.
Where a device has two or more probes, a last row pools them (each epoch's geometric mean over the probes'
predictions), and a speedup row divides the two pooled devices (against the first probes' speedup in
lease_transfer.py's table).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import sys
from pathlib import Path

from gpuscale.predict import costmodel as cm
from gpuscale.predict import prediction as predict
from gpuscale.predict import transfer

sys.path.insert(0, str(next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())))
from research.prediction import validation  # noqa: E402  (the leave-one-lease-out check lives in research/)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python research/prediction/probe_moments.py FOLDER [LEASE_ID ...]", file=sys.stderr)
        return 2
    folder, wanted = Path(argv[0]), set(argv[1:])
    facts = cm.load_facts()
    leases = transfer.leases_of(folder, predict.load_records, predict.load_probes)
    print(
        "| lease | device | probe | started | pipeline with a step, images/s | transfer: median / worst | inside | "
        "probe alone: median / worst |"
    )
    print("|---|---|---|---|---|---|---|---|")
    held_out = validation.leave_one_lease_out(leases, facts)  # each lease with its first probes
    for target in leases:
        lease_id = Path(target.name).name
        if wanted and lease_id not in wanted:
            continue
        pooled: dict[str, dict[str, dict[tuple, list[float]]]] = {}  # device -> transfer|alone -> epoch -> predictions
        for path in sorted((Path(target.name) / "probe").rglob("*.json")):
            ((device, record),) = predict.load_probes([path]).items()
            if record.get("status") != "measured" or device not in target.probes:
                continue
            swapped = dataclasses.replace(target, probes={**target.probes, device: record})
            others = [x for x in leases if x.name != target.name]
            rows = [
                r
                for r in validation.leave_one_lease_out([swapped, *others], facts)
                if r["lease"] == target.name and r["device"] == device
            ]
            alone_rows = [
                r for r in validation.probe_only(target.observations, facts, {device: record}) if r["device"] == device
            ]
            alone = [abs(r["error_percent"]) for r in alone_rows]
            if not rows:
                continue
            for how, got in (("transfer", rows), ("alone", alone_rows)):
                for r in got:
                    pooled.setdefault(device, {}).setdefault(how, {}).setdefault((r["model"], r["measured"]), [])
                    pooled[device][how][(r["model"], r["measured"])].append(r["predicted"])
            errors = [abs(r["error_percent"]) for r in rows]
            inside = sum(bool(r["inside"]) for r in rows) / len(rows)
            print(
                f"| {lease_id} | {device} | {path.relative_to(Path(target.name) / 'probe')} | "
                f"{str(record.get('started_at', ''))[11:19]} | {_pipeline(record)} | "
                f"{statistics.median(errors):.1f}% / {max(errors):.1f}% ({len(rows)}) | {100 * inside:.0f}% | "
                f"{statistics.median(alone):.1f}% / {max(alone):.1f}% |"
            )
        speedups = _pooled_speedups(target, held_out, pooled)
        for device, hows in pooled.items():
            n = max(len(v) for v in hows["transfer"].values())
            if n < 2:
                continue
            cells = [_pooled_errors(hows[how]) for how in ("transfer", "alone")]
            print(
                f"| {lease_id} | {device} | all {n}, the geometric mean of their predictions | - | - | "
                f"{cells[0][0]:.1f}% / {cells[0][1]:.1f}% ({len(hows['transfer'])}) | - | "
                f"{cells[1][0]:.1f}% / {cells[1][1]:.1f}% |"
            )
        if speedups:
            errors = [abs(e) for e in speedups]
            print(
                f"| {lease_id} | speedup | each device's geometric mean over its probes | - | - | "
                f"{statistics.median(errors):.1f}% / {max(errors):.1f}% ({len(errors)}) | - | - |"
            )
        _paired_moments(target, leases, facts, lease_id)
    return 0


def _moments(target: transfer.Lease) -> list[tuple[str, dict[str, dict]]]:
    """The lease's CPU and GPU probes taken at one moment, as pairs: probe/cpu.json with probe/cuda.json, and
    mid/cpu-start-of-callN.json with mid/cuda-start-of-callN.json (h200_lease.sh probes the CPU, then the GPU, at
    the start of each call)."""
    root = Path(target.name) / "probe"
    names = [("first probes", root / "cpu.json", root / "cuda.json")] + [
        (f"start of {cpu.stem.split('start-of-')[1]}", cpu, cpu.with_name(cpu.name.replace("cpu-", "cuda-", 1)))
        for cpu in sorted((root / "mid").glob("cpu-start-of-*.json"))
    ]
    out = []
    for name, cpu, gpu in names:
        if cpu.is_file() and gpu.is_file():
            probes = predict.load_probes([cpu, gpu])
            if all(p.get("status") == "measured" for p in probes.values()):
                out.append((name, probes))
    return out


def _paired_moments(target, leases, facts, lease_id) -> None:
    """Speedup rows with the lease's CPU and GPU probes of one moment swapped in together, and, where there are two
    moments or more, each model's speedup as the geometric mean over the moments' predictions."""
    moments = _moments(target)
    if len(moments) < 2:
        return
    others = [x for x in leases if x.name != target.name]
    by_model: dict[tuple, list[float]] = {}
    for name, probes in moments:
        swapped = dataclasses.replace(target, probes={**target.probes, **probes})
        rows = [
            r
            for r in validation.leave_one_lease_out([swapped, *others], facts)
            if r["lease"] == target.name and r["device"] == "speedup"
        ]
        errors = [abs(r["error_percent"]) for r in rows]
        inside = sum(bool(r["inside"]) for r in rows) / len(rows)
        print(
            f"| {lease_id} | speedup | CPU and GPU probes of one moment: {name} | - | - | "
            f"{statistics.median(errors):.1f}% / {max(errors):.1f}% ({len(rows)}) | {100 * inside:.0f}% | - |"
        )
        for r in rows:
            by_model.setdefault((r["model"], r["measured"]), []).append(r["predicted"])
    errors = _pooled_errors(by_model)
    print(
        f"| {lease_id} | speedup | all {len(moments)} moments, the geometric mean of their speedups | - | - | "
        f"{errors[0]:.1f}% / {errors[1]:.1f}% ({len(by_model)}) | - | - |"
    )


def _pooled_speedups(target, held_out, pooled) -> list[float]:
    """The speedup error of each paired model with each device's transfer prediction pooled over the lease's probes
    of that device (those rows only where both devices have two or more probes' predictions: else nothing moved)."""
    if {"cpu", "cuda"} - set(pooled) or min(max(map(len, pooled[d]["transfer"].values())) for d in ("cpu", "cuda")) < 2:
        return []
    base = [r for r in held_out if r["lease"] == target.name and r["device"] == "speedup"]
    out = []
    for r in base:
        cpu = {m: p for (model, m), p in pooled["cpu"]["transfer"].items() if model == r["model"]}
        gpu = {m: p for (model, m), p in pooled["cuda"]["transfer"].items() if model == r["model"]}
        pair = next(((c, g) for c in cpu for g in gpu if math.isclose(c / g, r["measured"], rel_tol=1e-9)), None)
        if pair is None:
            continue
        predicted = _geomean(cpu[pair[0]]) / _geomean(gpu[pair[1]])
        out.append(100 * (predicted / r["measured"] - 1))
    return out


def _geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def _pooled_errors(predictions: dict[tuple, list[float]]) -> tuple[float, float]:
    """Median and worst |error| of each epoch's geometric mean prediction over the lease's probes."""
    errors = [100 * abs(_geomean(got) / measured - 1) for (_, measured), got in predictions.items()]
    return statistics.median(errors), max(errors)


def _pipeline(probe: dict) -> str:
    rate = transfer.pipeline_of(probe).get("images_per_second")
    return f"{rate:,.0f}" if isinstance(rate, (int, float)) else "-"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
