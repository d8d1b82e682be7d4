"""What the line of a device's ratios against the models' layers per op buys (gpuscale.predict.transfer.fit_line),
checked where it could be chance: leave-one-lease-out on each card's leases against its own, the models measured
elsewhere and as no lease measured them, with the line, without it (every model shrunk to the device's median),
with weaker gates on the slope (t >= 2 and t >= 1 for the t test's quantile), and with each model's layers per op
dealt to another model at random (a control: a structure that says nothing of the model must not do as well).

    python research/prediction/structure_line.py [--shuffles N] [FOLDER ...]
        (default: reference/h200-2026-12-04 reference/h100-2026-12-05, 30 shuffles)

Prints each device's and the speedup's median, worst and band coverage over the leases probed as today for each way,
then the shuffles' speedup medians sorted, and how many of them came to the line's median or below.
"""

from __future__ import annotations

import random
import statistics
import sys
from pathlib import Path

from gpuscale.predict import costmodel as cm
from gpuscale.predict import prediction as predict
from gpuscale.predict import transfer

sys.path.insert(0, str(next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())))
from research.prediction import validation  # noqa: E402  (the leave-one-lease-out check lives in research/)

FOLDERS = ["reference/h200-2026-12-04", "reference/h100-2026-12-05"]
DEVICES = ("cpu", "cuda", "speedup")


def table(groups: list[list[transfer.Lease]], facts: dict) -> dict[tuple[str, bool], tuple[float, float, float]]:
    """(device, unseen) -> the median, worst and coverage over the leases probed as today, each card's leases held
    out against its own; device cpu, cuda or speedup."""
    out = {}
    for unseen in (False, True):
        rows = [r for g in groups for r in validation.leave_one_lease_out(g, facts, unseen)]
        for device in DEVICES:
            some = [r for r in rows if r["device"] == device and r["probed_as_today"]]
            errors = [abs(r["error_percent"]) for r in some]
            coverage = 100.0 * sum(r["inside"] for r in some) / len(some)
            out[device, unseen] = (statistics.median(errors), max(errors), coverage)
    return out


def main(argv: list[str]) -> int:
    shuffles = int(argv[argv.index("--shuffles") + 1]) if "--shuffles" in argv else 30
    folders = [a for a in argv if not a.startswith("--") and not a.isdigit()] or FOLDERS
    facts = cm.load_facts()
    groups = [transfer.leases_of(f, predict.load_records, predict.load_probes) for f in folders]
    structure, fit = transfer.layers_per_op, transfer.fit_line
    level = transfer.LINE_TEST_LEVEL
    ways = {f"the line (today: a two-sided t test at {level:g})": table(groups, facts)}
    quantile = transfer.t_quantile
    for gate, name in ((2.0, "t >= 2"), (1.0, "t >= 1 (adjusted R² > 0)")):
        transfer.t_quantile = lambda p, freedom, gate=gate: gate
        ways[f"a weaker gate: {name}"] = table(groups, facts)
    transfer.t_quantile = quantile
    transfer.fit_line = lambda *a: None
    ways["no line: the median"] = table(groups, facts)
    transfer.fit_line = fit
    names = sorted(n for n in facts if structure(facts[n]) is not None)
    rng = random.Random(0)
    dealt: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(shuffles):
        xs = [structure(facts[n]) for n in names]
        rng.shuffle(xs)
        deal = dict(zip(names, xs, strict=True))
        transfer.layers_per_op = lambda f, deal=deal: deal.get(f.name)
        got = table(groups, facts)
        for unseen in (False, True):
            dealt[unseen].append(got["speedup", unseen][0])
    transfer.layers_per_op = structure
    print(f"leases: {', '.join(Path(f).name for f in folders)}, each card's held out against its own; the leases")
    print("probed as today: median / worst error, inside the band")
    print("| way | device | model measured elsewhere | model no lease measured |")
    print("|---|---|---|---|")
    for way, got in ways.items():
        for device in DEVICES:
            cells = [f"{m:.1f}% / {w:.1f}% / {c:.0f}%" for m, w, c in (got[device, False], got[device, True])]
            print(f"| {way} | {device} | {cells[0]} | {cells[1]} |")
    today = next(iter(ways.values()))
    for unseen, medians in dealt.items():
        line = today["speedup", unseen][0]
        at_or_below = sum(m <= line for m in medians)
        label = "no lease measured" if unseen else "measured elsewhere"
        listed = ", ".join(f"{m:.1f}" for m in sorted(medians))
        print(f"\n{shuffles} shuffles of layers per op, model {label}: medians {listed}")
        print(f"  at or below the line's {line:.1f}%: {at_or_below} of {shuffles}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
