"""What-if: the transfer's band widened by how far the host's cost per dispatched GPU op moves within a
lease, where that dispatch sets a GPU step. Not adopted; docs/prediction.md says why.

    python research/prediction/launch_band.py [--separately] [FOLDER ...]
        (default: reference/h200-2026-12-04 reference/h100-2026-12-05, pooled and each alone)

The band today is exp(±Z e), e = sqrt(shape_sd² + model_sd² + (share * pace_sd)²) (gpuscale.predict.transfer). The
what-if adds ((1 - share) * dispatch * launch_sd)²: launch_sd, the pooled within-lease sd of the log of the calibration
leases' sentinel gpu_launch (before and after every job); dispatch, the chance that the host's part of a GPU step (the
fixed step and each dispatched op) is slower than the device's (each kind's FLOPs at its marginal price) when the host's
pace moves by launch_sd (transfer.pipeline_share, the same arithmetic as the input pipeline against the compute); 0 on a
CPU and where a layer table prices the model. Prints, for each group of leases held out one at a time, each device's and
the speedup's share inside the band and its median half-width (x high/predicted), without and with the term. The
predictions themselves do not move: only the bands.
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

from gpuscale.predict import costmodel as cm
from gpuscale.predict import prediction as predict
from gpuscale.predict import transfer

sys.path.insert(0, str(next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())))
from research.prediction import validation  # noqa: E402  (the leave-one-lease-out check lives in research/)

DEFAULT = ["reference/h200-2026-12-04", "reference/h100-2026-12-05"]


def launch_logs(unit: str) -> list[float]:
    """log seconds per op of the sentinel's gpu_launch before and after each of the lease's jobs."""
    return transfer.sentinel_logs(predict.load_records(Path(unit)), "gpu_launch")


def host_and_device(probe: dict, facts: cm.ModelFacts, images: int, batch_size: int) -> tuple[float, float]:
    """A GPU step's two parts as costmodel.compute_seconds prices them (it takes the larger); 0, 0 elsewhere."""
    cal = cm.from_probe(probe)
    if not (cal.op_seconds and facts.ops_per_step) or cm.uses_table(cal, facts.name):
        return 0.0, 0.0
    return cm.host_and_device_seconds(cal, facts, images, math.ceil(images / batch_size))


def with_launch_band(launch: dict[str, list[float]], plain):
    """`plain` (transfer.predict as shipped) with the dispatch term added to its band."""

    def predict_(probe, shape_, facts, images=50_000, batch_size=128):
        got = plain(probe, shape_, facts, images, batch_size)
        host, device = host_and_device(probe, facts, images, batch_size)
        sd = transfer._pooled_sd([launch[name] for name in shape_.leases])
        dispatch = transfer.pipeline_share(device, host, sd)
        e = math.hypot(got["log_error"], (1.0 - got["pipeline_share"]) * dispatch * sd)
        value = got["epoch_seconds"]
        got.update(low=value * math.exp(-transfer.Z * e), high=value * math.exp(transfer.Z * e), log_error=e)
        return got

    return predict_


def summary(rows: list[dict]) -> str:
    cells = []
    for device in ("cpu", "cuda", "speedup"):
        rs = [r for r in rows if r["device"] == device]
        if rs:
            inside = 100 * sum(bool(r["inside"]) for r in rs) / len(rs)
            half = statistics.median(math.sqrt(r["high"] / r["low"]) for r in rs)
            cells.append(f"{inside:.0f}% inside, x{half:.2f} ({len(rs)})")
        else:
            cells.append("-")
    return " | ".join(cells)


def main(argv: list[str]) -> int:
    folders = [a for a in argv if not a.startswith("--")] or DEFAULT
    facts = cm.load_facts()
    per_folder = {f: transfer.leases_of(f, predict.load_records, predict.load_probes) for f in folders}
    launch = {x.name: launch_logs(x.name) for g in per_folder.values() for x in g}
    groups = {"pooled": [[x for g in per_folder.values() for x in g]]}
    if "--separately" in argv or not argv:
        groups["each folder against its own"] = list(per_folder.values())
    if not argv:
        groups.update({Path(f).name: [g] for f, g in per_folder.items()})
    print("| leases | band | cpu | cuda | speedup |")
    print("|---|---|---|---|---|")
    plain = transfer.predict
    try:
        for name, gs in groups.items():
            for label, fn in (("today", plain), ("+ dispatch spread", with_launch_band(launch, plain))):
                transfer.predict = fn
                rows = [r for g in gs for r in validation.leave_one_lease_out(g, facts)]
                print(f"| {name} | {label} | {summary(rows)} |")
    finally:
        transfer.predict = plain
    spreads = {Path(k).name: statistics.pstdev(v) for k, v in launch.items() if len(v) >= 2}
    print("\nwithin-lease sd of log gpu_launch: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(spreads.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
