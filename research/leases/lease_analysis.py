"""Leases of one machine kind side by side: each lease's sentinel figures, each model's speedup per
lease, the lease-to-lease spread, and which sentinel components moved between leases in step with the epochs.

Reads the run records under FOLDER (any schema: record.load upgrades them) and prints Markdown tables:

    python research/leases/lease_analysis.py reference/h200-2026-12-04

A component "moves in step" when, for the models measured in two leases, its lease-to-lease ratio (median of the
lease's before-sentinels) has the sign of the models' median epoch ratio on the device it belongs to and lies
within a factor 1.5 of it: the machine got slower where the epochs got slower. A sentinel cannot correct a
timing (docs/conditions.md); this only says which of its parts witness what the epochs saw.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from gpuscale.contract import conditions, record

GPU_SIDE = set(conditions.GPU_COMPONENTS) | {"pipeline_workers", "pipeline_one_process"}  # the GPU epoch's pace
ALL = [*conditions.COMPONENTS, *conditions.DROPPED]  # the dropped ones too: the records of 2026-12-04 have them


def load(folder: Path) -> list[dict]:
    recs = [record.load(p) for p in sorted(folder.rglob("*.json")) if "runs" in p.relative_to(folder).parts]
    return [r for r in recs if r["status"] == "measured" and not r["key"].get("sweep")]


def epoch_seconds(rec: dict) -> float:
    return rec["timing"]["steady_epoch_seconds_median"] or rec["timing"]["total_train_seconds"] / len(rec["epochs"])


def leases(recs: list[dict]) -> list[str]:
    first = {}
    for r in recs:
        lease = r["conditions"]["lease"]
        first[lease] = min(first.get(lease, r["started_at"]), r["started_at"])
    return sorted(first, key=first.get)


def sentinel_levels(recs: list[dict], lease: str) -> dict[str, tuple[float, float, int]]:
    """component -> (median of the lease's before-sentinels, relative spread across them, count)."""
    values = defaultdict(list)
    for r in recs:
        before = r["conditions"]["before"]
        if r["conditions"]["lease"] == lease and before:
            for name, comp in before["components"].items():
                values[name].append(comp["value"])
    return {
        name: (statistics.median(v), (max(v) - min(v)) / statistics.median(v), len(v)) for name, v in values.items()
    }


def per_model(recs: list[dict]) -> dict[tuple[str, str], dict[str, float]]:
    """(model, lease) -> {cpu: epoch s, cuda: epoch s}."""
    out = defaultdict(dict)
    for r in recs:
        if r["key"]["variant"] == "paper":
            out[(r["key"]["model"], r["conditions"]["lease"])][r["key"]["device"]] = epoch_seconds(r)
    return out


def main(folder: Path) -> None:
    recs = load(folder)
    order = leases(recs)
    names = {lease: chr(ord("A") + i) for i, lease in enumerate(order)}
    print("| lease | boot id | records | drifted |")
    print("|---|---|---|---|")
    for lease in order:
        mine = [r for r in recs if r["conditions"]["lease"] == lease]
        drifted = sum(1 for r in mine if r["conditions"]["drifted"])
        print(f"| {names[lease]} | {lease[:8]} | {len(mine)} | {drifted} |")
    print("\n| component | " + " | ".join(f"lease {names[x]} (spread, n)" for x in order) + " |")
    print("|---|" + "---|" * len(order))
    levels = {lease: sentinel_levels(recs, lease) for lease in order}
    for name in ALL:
        cells = []
        for lease in order:
            if name in levels[lease]:
                value, spread, n = levels[lease][name]
                cells.append(f"{conditions.format_value(name, value)} ({100 * spread:.0f}%, {n})")
            else:
                cells.append("-")
        print(f"| {name} | " + " | ".join(cells) + " |")
    pairs = per_model(recs)
    models = sorted({m for m, _ in pairs})
    print("\n| model | " + " | ".join(f"speedup {names[x]} (CPU s / GPU s)" for x in order) + " | lease spread |")
    print("|---|" + "---|" * (len(order) + 1))
    ratios = defaultdict(list)  # device -> epoch ratio second lease / first, per model in both
    for model in models:
        cells, speedups = [], []
        for lease in order:
            pair = pairs.get((model, lease), {})
            if "cpu" in pair and "cuda" in pair:
                speedups.append(pair["cpu"] / pair["cuda"])
                cells.append(f"{speedups[-1]:.1f} ({pair['cpu']:.1f} / {pair['cuda']:.2f})")
            else:
                cells.append("-")
        spread = f"x{max(speedups) / min(speedups):.2f}" if len(speedups) > 1 else "-"
        print(f"| {model} | " + " | ".join(cells) + f" | {spread} |")
        if len(order) > 1:
            first, second = pairs.get((model, order[0]), {}), pairs.get((model, order[1]), {})
            for device in ("cpu", "cuda"):
                if device in first and device in second:
                    ratios[device].append(second[device] / first[device])
    if len(order) < 2:
        return
    tracking(recs, order, names, levels, pairs)


def _rank(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    for rank, i in enumerate(order):
        ranks[i] = float(rank)
    return ranks


def spearman(x: list[float], y: list[float]) -> float | None:
    if len(x) < 4:
        return None
    rx, ry = _rank(x), _rank(y)
    mx, my = statistics.mean(rx), statistics.mean(ry)
    sx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    sy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True)) / (sx * sy) if sx and sy else None


def _slowness(name: str, value: float) -> float:
    """A component's value as a time-like figure: larger = slower machine."""
    return 1 / value if conditions.unit_of(name)[1] == "higher" else value


def tracking(recs, order, names, levels, pairs) -> None:
    """Per pair of leases: the models' median epoch ratio per device beside each component's ratio; then, over
    every record of a model measured in 2+ leases, the rank correlation between the before-sentinel's slowness
    and the record's epoch relative to its model's geometric mean on that device (within and between leases)."""
    print("\n| leases | models | CPU epochs | GPU epochs | " + " | ".join(ALL) + " |")
    print("|---|---|---|---|" + "---|" * len(ALL))
    for i, first in enumerate(order):
        for second in order[i + 1 :]:
            ratio = {}
            for device in ("cpu", "cuda"):
                both = [
                    pairs[(m, second)][device] / pairs[(m, first)][device]
                    for (m, lease) in pairs
                    if lease == first and device in pairs[(m, first)] and device in pairs.get((m, second), {})
                ]
                ratio[device] = (statistics.median(both), len(both)) if both else (None, 0)
            cells = []
            for name in ALL:
                a, b = levels[first].get(name), levels[second].get(name)
                cells.append(f"{_slowness(name, b[0]) / _slowness(name, a[0]):.2f}" if a and b else "-")
            models = max(n for _, n in ratio.values())
            epochs = [f"{r:.2f}" if r else "-" for r, _ in ratio.values()]
            print(
                f"| {names[second]}/{names[first]} | {models} | {epochs[0]} | {epochs[1]} | " + " | ".join(cells) + " |"
            )
    by_model = defaultdict(list)
    for r in recs:
        by_model[(r["key"]["model"], r["key"]["device"])].append(r)
    print("\n| component | device | records | rank correlation with the epoch (before-sentinel) |")
    print("|---|---|---|---|")
    for name in ALL:
        for device in ("cpu", "cuda"):
            xs, ys = [], []
            for (_, dev), runs in by_model.items():
                leases_here = {r["conditions"]["lease"] for r in runs}
                if dev != device or len(leases_here) < 2:
                    continue
                centre = math.exp(statistics.mean(math.log(epoch_seconds(r)) for r in runs))
                for r in runs:
                    comp = ((r["conditions"]["before"] or {}).get("components") or {}).get(name)
                    if comp:
                        xs.append(_slowness(name, comp["value"]))
                        ys.append(epoch_seconds(r) / centre)
            rho = spearman(xs, ys)
            if xs:
                print(f"| {name} | {device} | {len(xs)} | {'-' if rho is None else f'{rho:+.2f}'} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
