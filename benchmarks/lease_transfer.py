"""Leave-one-lease-out on the shipped lease folders (issue 27): each lease's `paper` epochs and speedups predicted
from its own probes and the other leases' records only (gpuscale.predict.transfer), beside the probe alone.

    python benchmarks/lease_transfer.py [--separately] [--rows] [FOLDER ...]
        (default: predict.validate_on and report.reference)

Prints a markdown table per device (cpu, cuda, speedup) and lease, then the speedups of the leases probed as the
tool probes today (both probes' input pipeline timed on the prepared data, the CPU's layer table by the current
harness), then every row with --rows. --separately: each FOLDER's leases are held out against that folder's
other leases only (one card per folder), the rows pooled.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpuscale.contract import params as params_mod
from gpuscale.measure.layertable import HARNESS
from gpuscale.predict import costmodel as cm
from gpuscale.predict import prediction as predict
from gpuscale.predict import transfer


def main(argv: list[str]) -> int:
    show_rows = "--rows" in argv
    folders = [a for a in argv if not a.startswith("--")]
    if not folders:
        doc = params_mod.load([Path("params.yaml")])
        folders = list(dict.fromkeys([*doc["predict"].get("validate_on", []), *doc["report"]["reference"]]))
    facts = cm.load_facts()
    groups = [transfer.leases_of(f, predict.load_records, predict.load_probes) for f in folders]
    if "--separately" not in argv:
        groups = [[x for g in groups for x in g]]
    leases = [x for g in groups for x in g]
    rows = [r for g in groups for r in transfer.leave_one_lease_out(g, facts)]
    targets = {r["lease"] for r in rows}
    alone = _probe_alone([x for x in leases if x.name in targets], facts)
    print("| device | lease | models | transfer: median / worst | inside the band | probe alone: median / worst |")
    print("|---|---|---|---|---|---|")
    for s in transfer.summarize(rows):
        a = alone.get((s["device"], s["lease"]))
        alone_cell = f"{a[0]:.1f}% / {a[1]:.1f}%" if a else "-"
        print(
            f"| {s['device']} | {Path(s['lease']).name} | {s['models']} | {s['median_abs_error_percent']:.1f}% / "
            f"{s['worst_abs_error_percent']:.1f}% ({s['worst_model']}) | {s['coverage_percent']:.0f}% | {alone_cell} |"
        )
    today = [x.name for x in leases if _probed_as_today(x)]
    current = [r for r in rows if r["lease"] in today and r["device"] == "speedup"]
    if current:
        s = transfer.summarize(current)[0]
        print(
            f"\nprobed as today ({', '.join(sorted(Path(n).name for n in today))}): {s['models']} speedups, median "
            f"{s['median_abs_error_percent']:.1f}%, worst {s['worst_abs_error_percent']:.1f}% ({s['worst_model']}), "
            f"{s['coverage_percent']:.0f}% inside the band"
        )
    if show_rows:
        for r in rows:
            print(
                f"{Path(r['lease']).name:12} {r['model']:20} {r['device']:8} {r['predicted']:8.2f} "
                f"[{r['low']:7.2f}, {r['high']:7.2f}] measured {r['measured']:8.2f} "
                f"{r['error_percent']:+6.1f}% {r['shape']}"
            )
    return 0


def _probed_as_today(lease: transfer.Lease) -> bool:
    """Both probes timed the input pipeline on the prepared data, and the CPU's layer table is the current harness's."""
    kinds = {device: lease.probe_kind(device) for device in lease.probes}
    return (
        "cpu" in kinds
        and len(kinds) >= 2
        and all(kind[1] == "prepared data" for kind in kinds.values())
        and kinds["cpu"][2] == HARNESS
    )


def _probe_alone(leases: list[transfer.Lease], facts: dict) -> dict[tuple, tuple[float, float]]:
    """(device, lease or 'all leases') -> median and worst |error| of the probe alone, over the same leases."""
    errors: dict[tuple, list[float]] = {}
    for lease in leases:
        rows = predict.probe_only(lease.observations, facts, lease.probes)
        for r in rows:
            for key in ((r["device"], lease.name), (r["device"], "all leases")):
                errors.setdefault(key, []).append(abs(r["error_percent"]))
    import statistics

    return {k: (statistics.median(v), max(v)) for k, v in errors.items()}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
