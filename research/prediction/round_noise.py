"""How far one lease's `paper` speedup moves between rounds of the same lease, and what that allows a prediction
checked against single draws (the leave-one-lease-out targets: median 15%, worst 35%).

    python research/prediction/round_noise.py [--draws N] [FOLDER ...]
        (default: reference/h200-2026-12-04 reference/h100-2026-12-05; N: the held-out speedups of
        research/prediction/lease_transfer.py's default table, counted here)

For each lease and model with two or more rounds on both devices: the steady-epoch speedup of each round. The log
speedup's spread about its lease mean, pooled (one degree of freedom less per lease and model), is the sd of one
draw. Then a predictor that knew every lease's mean speedup exactly is scored against N single draws (N: the
leave-one-lease-out table's targets; 4,000 repeats, fixed seed): its median and worst error, and how often its
worst is within 35%.
"""

from __future__ import annotations

import math
import random
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from gpuscale.contract import record

sys.path.insert(0, str(next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())))
from research.prediction import validation  # noqa: E402  (the leave-one-lease-out check lives in research/)

DEFAULT = ["reference/h200-2026-12-04", "reference/h100-2026-12-05"]


def default_draws() -> int:
    """The held-out speedups of the default leave-one-lease-out table (research/prediction/lease_transfer.py without
    arguments: the H200 lease folders of research/prediction/validation.CARDS)."""
    from gpuscale.predict import costmodel as cm
    from gpuscale.predict import prediction as predict
    from gpuscale.predict import transfer

    folders = list(validation.CARDS["H200"])  # the H200 leases (once predict.validate_on and report.reference)
    leases = [x for f in folders for x in transfer.leases_of(f, predict.load_records, predict.load_probes)]
    rows = validation.leave_one_lease_out(leases, cm.load_facts())
    return sum(r["device"] == "speedup" for r in rows)


def rounds(folder: Path) -> dict[tuple[str, str], dict[int, float]]:
    """(lease, model) -> round -> steady speedup (CPU s / GPU s), `paper` seed 0, both devices in the round."""
    seconds: dict[tuple, dict] = defaultdict(dict)
    for path in record.files(folder):
        rec = record.load(path)
        k = rec["key"]
        if rec["status"] != "measured" or k["variant"] != "paper" or k["seed"] != 0 or k.get("sweep"):
            continue
        lease = rec["conditions"]["lease"]
        seconds[(lease, k["model"], k.get("round", 1))][k["device"]] = rec["timing"]["steady_epoch_seconds_median"]
    out: dict[tuple, dict] = defaultdict(dict)
    for (lease, model, round_), by_device in seconds.items():
        if by_device.get("cpu") and by_device.get("cuda"):
            out[(lease, model)][round_] = by_device["cpu"] / by_device["cuda"]
    return {key: value for key, value in out.items() if len(value) >= 2}


def main(argv: list[str]) -> int:
    draws = None
    if "--draws" in argv:
        i = argv.index("--draws")
        draws = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2 :]
    folders = [Path(a) for a in argv] or [Path(f) for f in DEFAULT]
    groups = {}
    for folder in folders:
        groups.update({(folder.name, *key): value for key, value in rounds(folder).items()})
    squares, freedom = 0.0, 0
    print("| folder | lease | model | speedup per round |")
    print("|---|---|---|---|")
    for (name, lease, model), by_round in sorted(groups.items()):
        logs = [math.log(v) for v in by_round.values()]
        mean = statistics.fmean(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        freedom += len(logs) - 1
        cells = ", ".join(f"{by_round[r]:.1f}" for r in sorted(by_round))
        print(f"| {name} | {lease[:8]} | {model} | {cells} |")
    if not freedom:
        print("no model has two rounds in one lease")
        return 1
    sd = math.sqrt(squares / freedom)
    draws = draws or default_draws()
    median, worst, within = floor(sd, draws)
    print(
        f"\nround-to-round sd of one draw's log speedup: {sd:.3f} ({freedom} degrees of freedom); a predictor exact "
        f"for every lease's mean, scored against {draws} single draws: median error "
        f"{median:.1f}%, worst {worst:.1f}% (median of 4,000 "
        f"repeats); worst within 35% in {100 * within:.0f}% of repeats"
    )
    return 0


def floor(sd: float, draws: int) -> tuple[float, float, float]:
    """A prediction whose log error is normal with `sd`, scored against `draws` single draws, 4,000 times (fixed
    seed): the median over repeats of its median and of its worst |error| (percent), and the share of repeats
    whose worst is within 35% (the worst target)."""
    rng = random.Random(0)
    medians, worsts = [], []
    for _ in range(4000):
        errors = [abs(math.exp(rng.gauss(0.0, sd)) - 1.0) for _ in range(draws)]
        medians.append(statistics.median(errors))
        worsts.append(max(errors))
    within = sum(w <= 0.35 for w in worsts) / len(worsts)
    return 100 * statistics.median(medians), 100 * statistics.median(worsts), within


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
