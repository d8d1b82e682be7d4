"""Leave-one-lease-out on the shipped lease folders (issue 27): each lease's `paper` epochs and speedups predicted
from its own probes and the other leases' records only (gpuscale.predict.transfer), beside the probe alone.

    python benchmarks/lease_transfer.py [FOLDER ...]   (default: predict.validate_on and report.reference)

Prints a markdown table per device (cpu, cuda, speedup) and lease, then every row with --rows.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpuscale.contract import params as params_mod
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
    leases = [x for f in folders for x in transfer.leases_of(f, predict.load_records, predict.load_probes)]
    rows = transfer.leave_one_lease_out(leases, facts)
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
    if show_rows:
        for r in rows:
            print(
                f"{Path(r['lease']).name:12} {r['model']:20} {r['device']:8} {r['predicted']:8.2f} "
                f"[{r['low']:7.2f}, {r['high']:7.2f}] measured {r['measured']:8.2f} "
                f"{r['error_percent']:+6.1f}% {r['shape']}"
            )
    return 0


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
