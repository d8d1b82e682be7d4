"""Which stored CPU layer tables kept a paused pass, and what leave-one-lease-out gives without the pauses (a what-if).

    PYTHONPATH=src python research/prediction/paused_tables.py [--ratio 5] [--spread 5] FOLDER [FOLDER ...]

A probe's layer table keeps each call's median pass. Before 2026-12-06 a call was timed in three passes,
and where two of them were paused the median kept the pause (H100 leases 7f382d70 and ed130a0b: the ImageNet-stem
resnets' first convolution at 28 and 52 ms a call against 0.6-0.7 ms in the other leases of the card). Since then a
call whose passes disagree is timed in more (gpuscale.measure.layertable.RETIME_*), which old probes cannot be.

For each CPU probe (`probe/cpu.json`) of the FOLDERs' leases, this lists the calls that look paused: a median over
--ratio times the same call's median in the other probes of the same FOLDER (one card, one host kind) and passes
that disagreed by over --spread. Then, for each model whose table holds such a call, the table with that call at
the other probes' median instead (the what-if), and the leave-one-lease-out summary (validation.leave_one_lease_out,
each FOLDER's leases against their own, as lease_transfer.py --separately) on the probes as stored and as
repaired. The repaired figures are a what-if on stored data, not what the tool predicts: the tool never edits a
probe. Needs torch (a model's layer calls, gpuscale.models.nets); a layer's key carries its module's repr, which
differs between torch versions (BatchNorm's `bias=True`), so keys are matched with and without it.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path

import torch

from gpuscale.models import nets
from gpuscale.models import registry as models
from gpuscale.predict import costmodel as cm
from gpuscale.predict import prediction as predict
from gpuscale.predict import transfer

sys.path.insert(0, str(next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())))
from research.prediction import validation  # noqa: E402  (the leave-one-lease-out check lives in research/)


def _lookup(rows: dict, key: str) -> dict | None:
    return rows.get(key) or rows.get(key.replace(", bias=True", ""))


def model_calls() -> dict[str, dict[str, int]]:
    out = {}
    for name in models.MODEL_NAMES:
        torch.manual_seed(0)
        out[name] = nets.layer_calls(models.build(name, 10))[0]
    return out


def paused(leases: list[transfer.Lease], ratio: float, spread: float) -> dict[str, dict[str, float]]:
    """lease name -> {layer key: the other probes' median seconds per call} for the calls that look paused."""
    tables = {
        x.name: {r["layer"]: r for r in (x.probes["cpu"].get("layer_table") or {}).get("layers", [])}
        for x in leases
        if "cpu" in x.probes
    }
    out: dict[str, dict[str, float]] = {}
    for name, rows in tables.items():
        for key, row in rows.items():
            others = [t[key]["seconds_per_call"] for n, t in tables.items() if n != name and key in t]
            if len(others) < 2:
                continue
            typical = statistics.median(others)
            if row["seconds_per_call"] > ratio * typical and row.get("spread", 1.0) > spread:
                out.setdefault(name, {})[key] = typical
    return out


def repaired(lease: transfer.Lease, fixes: dict[str, float], calls: dict[str, dict[str, int]]) -> transfer.Lease:
    probe = copy.deepcopy(lease.probes["cpu"])
    table = probe["layer_table"]
    rows = {r["layer"]: r for r in table["layers"]}
    for name, entry in table["models"].items():
        excess = 0.0
        for key, n in calls.get(name, {}).items():
            row = _lookup(rows, key)
            if row is not None and row["layer"] in fixes:
                excess += n * (row["seconds_per_call"] - fixes[row["layer"]])
        entry["seconds_per_image"] -= excess / table["batch_size"]
    return transfer.Lease(lease.name, {**lease.probes, "cpu": probe}, lease.observations, lease.pipeline_logs)


def summary(rows: list[dict]) -> list[str]:
    out = []
    for s in validation.summarize(rows):
        if s["lease"] == validation.ALL_LEASES or s["device"] == "speedup":
            out.append(
                f"| {s['device']} | {Path(s['lease']).name} | {s['models']} | {s['median_abs_error_percent']:.1f}% / "
                f"{s['worst_abs_error_percent']:.1f}% ({s['worst_model']}) | {s['coverage_percent']:.0f}% |"
            )
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ratio", type=float, default=5.0)
    ap.add_argument("--spread", type=float, default=5.0)
    ap.add_argument("folders", nargs="+")
    args = ap.parse_args(argv)
    facts = cm.load_facts()
    calls = model_calls()
    groups = [transfer.leases_of(f, predict.load_records, predict.load_probes) for f in args.folders]
    fixed_groups = []
    for group in groups:
        found = paused(group, args.ratio, args.spread)
        for lease in group:
            for key, typical in found.get(lease.name, {}).items():
                row = {r["layer"]: r for r in lease.probes["cpu"]["layer_table"]["layers"]}[key]
                print(
                    f"{Path(lease.name).name}: {row['seconds_per_call'] * 1e3:.2f} ms a call (spread "
                    f"{row['spread']:.1f}) against {typical * 1e3:.2f} ms in the other probes: {key[:90]}"
                )
        fixed = [repaired(x, found[x.name], calls) if x.name in found else x for x in group]
        for before, after in zip(group, fixed, strict=True):
            if before is after:
                continue
            a = before.probes["cpu"]["layer_table"]["models"]
            b = after.probes["cpu"]["layer_table"]["models"]
            moved = {m: b[m]["seconds_per_image"] / a[m]["seconds_per_image"] for m in a}
            moved = {m: r for m, r in moved.items() if r < 0.98}
            cells = ", ".join(f"{m} x{r:.2f}" for m, r in sorted(moved.items(), key=lambda kv: kv[1]))
            print(f"{Path(before.name).name}: tables repaired: {cells}")
        fixed_groups.append(fixed)
    for label, gs in (("as stored", groups), ("paused calls at the other probes' median (what-if)", fixed_groups)):
        rows = [r for g in gs for r in validation.leave_one_lease_out(g, facts)]
        print(f"\nleave one lease out, probes {label}:")
        print("| device | lease | models | median / worst | inside the band |\n|---|---|---|---|---|")
        print("\n".join(summary(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
