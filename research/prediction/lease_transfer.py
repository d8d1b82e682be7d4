"""Leave-one-lease-out on the shipped lease folders: each lease's `paper` epochs and speedups predicted
from its own probes and the other leases' records only (gpuscale.predict.transfer), beside the probe alone.

    python research/prediction/lease_transfer.py [--separately] [--rows] [--fresh=ID,...] [FOLDER ...]
        (default: the H200 lease folders, research/prediction/validation.CARDS)

Prints a markdown table per device (cpu, cuda, speedup) and lease, with a row for the leases probed as the tool
probes today (transfer.Lease.probed_as_today) where some were probed before a fix, and the same pools with each
model also left out of the other leases' records ("the model unmeasured too": a model no lease measured, such as a
user's own), then every row with --rows.
--separately: each FOLDER's leases are held out against that folder's other leases only (one card per folder), the
rows pooled.
--fresh=ID,ID: only those leases held out, each against the leases whose first probe started before its own (what a
new user's calibration held when that lease was measured): the fresh-lease check.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpuscale.predict import costmodel as cm
from gpuscale.predict import prediction as predict
from gpuscale.predict import transfer

sys.path.insert(0, str(next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())))
from research.prediction import validation  # noqa: E402  (the leave-one-lease-out check lives in research/)


def main(argv: list[str]) -> int:
    show_rows = "--rows" in argv
    fresh = next((a.split("=", 1)[1].split(",") for a in argv if a.startswith("--fresh=")), None)
    folders = [a for a in argv if not a.startswith("--")]
    if not folders:
        folders = list(validation.CARDS["H200"])  # the H200 leases (once predict.validate_on and report.reference)
    facts = cm.load_facts()
    groups = [transfer.leases_of(f, predict.load_records, predict.load_probes) for f in folders]
    if "--separately" not in argv:
        groups = [[x for g in groups for x in g]]
    leases = [x for g in groups for x in g]
    # each lease held out, then each lease and model: as a model no lease measured (a user's own) is predicted
    rows = [r for unseen in (False, True) for g in groups for r in _held_out(g, facts, unseen, fresh)]
    targets = {r["lease"] for r in rows}
    alone = _probe_alone([x for x in leases if x.name in targets], facts)
    print("| device | lease | models | transfer: median / worst | inside the band | probe alone: median / worst |")
    print("|---|---|---|---|---|---|")
    for s in validation.summarize(rows):
        a = alone.get((s["device"], s["lease"].removesuffix(validation.UNSEEN)))  # the probe alone reads no record
        alone_cell = f"{a[0]:.1f}% / {a[1]:.1f}%" if a else "-"
        print(
            f"| {s['device']} | {Path(s['lease']).name} | {s['models']} | {s['median_abs_error_percent']:.1f}% / "
            f"{s['worst_abs_error_percent']:.1f}% ({s['worst_model']}) | {s['coverage_percent']:.0f}% | {alone_cell} |"
        )
    today = sorted(Path(x.name).name for x in leases if x.name in targets and x.probed_as_today())
    print(f"\n{validation.PROBED_AS_TODAY}: {', '.join(today) or 'none'}")
    if show_rows:
        for r in rows:
            if r["unseen"]:
                continue
            print(
                f"{Path(r['lease']).name:12} {r['model']:20} {r['device']:8} {r['predicted']:8.2f} "
                f"[{r['low']:7.2f}, {r['high']:7.2f}] measured {r['measured']:8.2f} "
                f"{r['error_percent']:+6.1f}% {r['shape']}"
            )
    return 0


def _held_out(group: list[transfer.Lease], facts: dict, unseen: bool, fresh: list[str] | None) -> list[dict]:
    """Each lease of the group held out against the others; with `fresh` lease ids, only those, each against the
    leases whose first probe started before its own."""
    if fresh is None:
        return validation.leave_one_lease_out(group, facts, unseen)
    rows = []
    for target in (x for x in group if Path(x.name).name in fresh):
        before = [x for x in group if _started(x) < _started(target)]
        rows += [
            r for r in validation.leave_one_lease_out([*before, target], facts, unseen) if r["lease"] == target.name
        ]
    return rows


def _started(lease: transfer.Lease) -> str:
    """When the lease's first probe started (ISO 8601 UTC, so the strings sort as the times do)."""
    return min(p["started_at"] for p in lease.probes.values())


def _probe_alone(leases: list[transfer.Lease], facts: dict) -> dict[tuple, tuple[float, float]]:
    """(device, lease or 'all leases') -> median and worst |error| of the probe alone, over the same leases."""
    errors: dict[tuple, list[float]] = {}
    for lease in leases:
        rows = validation.probe_only(lease.observations, facts, lease.probes)
        groups = [lease.name, validation.ALL_LEASES] + ([validation.PROBED_AS_TODAY] if lease.probed_as_today() else [])
        for r in rows:
            for key in ((r["device"], g) for g in groups):
                errors.setdefault(key, []).append(abs(r["error_percent"]))
    import statistics

    return {k: (statistics.median(v), max(v)) for k, v in errors.items()}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
