"""What a record says of the machine state it was measured in (its `conditions`), torch-free: the sentinel's
components and units, the drift between the sentinels before and after a job, and how they read.

gpuscale.measure.sentinel measures (torch, on the training path); this module judges and formats, so the training stage,
the record reader and the analysis share one rule. Which components the sentinel keeps was decided by what moved
with the epochs between three H200 leases (docs/conditions.md): `pipeline_one_process`, `pipeline_workers`,
`memory_bandwidth` and `gpu_launch` moved in step with the CPU and GPU epochs (lease to lease and record to record);
`cpu_training`, `gpu_matmul` and `host_to_device` tracked nothing (the GPU's arithmetic and copy link held within 2%
while the epochs moved 13-32%; the CPU arithmetic moved against them) and were dropped. Records made with them keep
them; they are shown, and left out of the drift.
"""

from __future__ import annotations

import math

# Each component: (unit, which direction is a faster machine, what it times). Values are stored in base units
# (images/s, bytes/s, seconds per op); `faster` makes a drift ratio read the same way for all (>1 = faster).
COMPONENTS = {
    "pipeline_one_process": ("images/s", "higher", "host input pipeline, per-sample transforms in one process"),
    "pipeline_workers": ("images/s", "higher", "host input pipeline at the configured loader workers"),
    "memory_bandwidth": ("bytes/s", "higher", "one core copying 64 MiB (bytes read + written)"),
    "gpu_launch": ("s/op", "lower", "one small launched op (a chain of 200, synchronised)"),
}
HOST_COMPONENTS = ("pipeline_one_process", "pipeline_workers", "memory_bandwidth")
GPU_COMPONENTS = ("gpu_launch",)
# Measured by the first sentinel (records of 2026-12-04) and dropped: they tracked nothing (docs/conditions.md).
DROPPED = {
    "cpu_training": ("FLOP/s", "higher", "dense training step (conv, forward + backward) at the job's threads"),
    "gpu_matmul": ("FLOP/s", "higher", "4096 x 4096 float32 matrix product"),
    "host_to_device": ("bytes/s", "higher", "pinned 64 MiB host-to-device copy"),
}
# A component drifted when after/before moved by more than DRIFT_NOISE_FACTOR times the larger of the two
# sentinels' own spreads, and by at least DRIFT_FLOOR (a sentinel whose repeats agree to 0.1% would else flag
# every ordinary wobble).
DRIFT_NOISE_FACTOR = 2.0
DRIFT_FLOOR = 0.05


def drift(before: dict | None, after: dict | None) -> tuple[bool | None, dict]:
    """(drifted, {component: after/before as a speed ratio, >1 = the machine got faster}) for the components both
    sentinels have; drifted is None when either is missing. A component drifted when it moved by more than
    DRIFT_NOISE_FACTOR times the larger of its two spreads and by at least DRIFT_FLOOR."""
    if not before or not after:
        return None, {}
    ratios, drifted = {}, False
    for name, b in before["components"].items():
        a = after["components"].get(name)
        if name not in COMPONENTS or a is None or not b["value"] or not a["value"]:
            continue  # a dropped component is no witness
        ratio = a["value"] / b["value"]
        if COMPONENTS[name][1] == "lower":
            ratio = 1 / ratio
        ratios[name] = ratio
        noise = max(b.get("spread") or 0.0, a.get("spread") or 0.0)
        if abs(ratio - 1) > max(DRIFT_FLOOR, DRIFT_NOISE_FACTOR * noise):
            drifted = True
    return drifted, ratios


def conditions(lease: str | None, before: dict | None, after: dict | None) -> dict:
    """A record's `conditions`: the lease it ran in (the boot id; 'unknown' without one), both sentinels and the
    drift between them."""
    drifted, ratios = drift(before, after)
    return {
        "lease": lease or "unknown",
        "before": before,
        "after": after,
        "drifted": drifted,
        "drift": ratios,
    }


def drift_line(cond: dict) -> str | None:
    """The warning a drifted job ends with, or None."""
    if not cond.get("drifted"):
        return None
    moved = ", ".join(
        f"{name} x{ratio:.2f}"
        for name, ratio in sorted(cond["drift"].items(), key=lambda kv: -abs(math.log(kv[1])))
        if abs(ratio - 1) > DRIFT_FLOOR
    )
    return (
        f"the machine state drifted during this job (sentinel after/before, >1 faster: {moved}); "
        "see the record's conditions"
    )


def unit_of(name: str) -> tuple[str, str, str]:
    """(unit, faster, what) of a component, kept or dropped."""
    return COMPONENTS.get(name) or DROPPED[name]


def format_value(name: str, value: float) -> str:
    unit = unit_of(name)[0]
    if unit == "images/s":
        return f"{value:,.0f} images/s"
    if unit == "FLOP/s":
        return f"{value / 1e12:.2f} TFLOP/s" if value >= 1e12 else f"{value / 1e9:.1f} GFLOP/s"
    if unit == "bytes/s":
        return f"{value / 1e9:.1f} GB/s"
    return f"{value * 1e6:.1f} us/op"


def table(doc: dict) -> str:
    """The sentinel as a small text table (`gpuscale sentinel`)."""
    rows = [("component", "median", "spread", "what")]
    for name, comp in doc["components"].items():
        spread = "-" if comp["spread"] is None else f"{100 * comp['spread']:.1f}%"
        rows.append((name, format_value(name, comp["value"]), spread, unit_of(name)[2]))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}" for r in rows]
    head = (
        f"sentinel on {doc['device']} ({doc['threads']} threads, {doc['loader_workers']} loader workers, "
        f"{doc['seconds']:.1f} s; each the median of its repeats, spread = (max - min) / median)"
    )
    return "\n".join([head, *lines])
