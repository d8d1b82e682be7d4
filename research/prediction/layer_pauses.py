"""Where do the CPU layer table's paused passes come from, and does timing a call in more passes price it right?

    PYTHONPATH=src python research/prediction/layer_pauses.py [--threads N] [--models resnet18,resnet50] [--passes 10]
        [--touch-gib 4] [--json OUT.json]

In two H100 leases' probes the resnets' stem convolution (3 -> 64, 7x7/2) ran 28 and 52 ms a call in two
of its three passes against 0.6-0.7 ms in its third and in two other leases, and the median of three priced
resnet18's CPU epoch 1.6-1.9x its measured one. This script, in a fresh process:

1. times each distinct layer call of --models (layertable.LayerStep, batch 64) in --passes interleaved passes of
   one window each (layertable.TABLE_SECONDS_PER_LAYER), as the probe's table does, recording per window its
   seconds per call and the process's minor page faults (getrusage ru_minflt): is a slow window one that touched
   fresh memory?
2. then prices each model from the first 3 passes (the table before 2026-12-06), from those passes with
   layertable.timed_passes' re-timing rule applied (3, then 4 more where they disagree: the table now) and from
   all --passes, and prints how far each is from the all-pass median;
3. times first touch of fresh memory against touching it again (--touch-gib GiB in 256 MiB blocks, kept, then
   freed and allocated again): the cost of a page the machine has not backed yet.

A benchmark, not a test: it times this machine and prints what it saw.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

from gpuscale.measure import layertable
from gpuscale.models import nets
from gpuscale.models import registry as models

BATCH = 64


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def time_calls(names: list[str], passes: int) -> tuple[dict, dict]:
    """Per distinct call: the list of (seconds per call, minor faults) of each pass; per model: its calls' counts."""
    steps: dict = {}
    counts: dict[str, dict] = {}
    for name in names:
        torch.manual_seed(0)
        calls, protos = nets.layer_calls(models.build(name, 10))
        counts[name] = calls
        for key, call in protos.items():
            steps.setdefault(key, layertable.LayerStep(call, torch.device("cpu"), BATCH))
    for step in steps.values():
        step()
    seen: dict[str, list] = {key: [] for key in steps}
    for _ in range(passes):
        for key, step in steps.items():
            step.reset()
            faults = minor_faults()
            seconds = layertable.timed_window(step, torch.device("cpu"), layertable.TABLE_SECONDS_PER_LAYER)[0]
            seen[key].append((seconds, minor_faults() - faults))
    return seen, counts


def rule(times: list[float]) -> float:
    """timed_passes' estimate from a call's passes in order: 3, then 4 more where the first 3 disagree."""
    first = times[: layertable.TABLE_PASSES]
    if max(first) > layertable.RETIME_SPREAD * min(first):
        return statistics.median(times[: layertable.TABLE_PASSES + layertable.RETIME_PASSES])
    return statistics.median(first)


def price(seen: dict, calls: dict, pick) -> float:
    """A model's seconds per image from each of its calls' passes, reduced by `pick`."""
    return sum(n * pick([s for s, _ in seen[key]]) for key, n in calls.items()) / BATCH


def touch(gib: float) -> dict:
    block = 256 << 20
    n = max(1, int(gib * (1 << 30) // block))

    def once() -> tuple[float, int, list]:
        kept, faults, start = [], minor_faults(), time.perf_counter()
        for _ in range(n):
            t = torch.empty(block, dtype=torch.uint8)
            t.fill_(1)
            kept.append(t)
        return time.perf_counter() - start, minor_faults() - faults, kept

    first_s, first_f, kept = once()
    del kept
    again_s, again_f, kept = once()
    del kept
    gb = n * block / (1 << 30)
    return {
        "gib": gb,
        "first_touch_seconds_per_gib": first_s / gb,
        "first_touch_faults": first_f,
        "again_seconds_per_gib": again_s / gb,
        "again_faults": again_f,
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--models", default="resnet18,resnet50")
    ap.add_argument("--passes", type=int, default=10)
    ap.add_argument("--touch-gib", type=float, default=4.0)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    names = args.models.split(",")
    boot_file = Path("/proc/sys/kernel/random/boot_id")
    boot = boot_file.read_text().strip() if boot_file.exists() else ""
    print(f"boot_id {boot} threads {args.threads} batch {BATCH} passes {args.passes}")
    start = time.perf_counter()
    seen, counts = time_calls(names, args.passes)
    print(f"[{len(seen)} calls x {args.passes} passes in {time.perf_counter() - start:.1f}s]")
    slow = []
    for key, passes in seen.items():
        times = [s for s, _ in passes]
        fast = min(times)
        for i, (s, f) in enumerate(passes):
            if s > 2 * statistics.median(times):
                slow.append((key, i, s / fast, f))
    quiet = [f for passes in seen.values() for s, f in passes if s <= 2 * min(x for x, _ in passes)]
    print(
        f"slow windows (over 2x their call's median): {len(slow)} of {len(seen) * args.passes}; minor faults "
        f"in a slow window: median {statistics.median([f for *_, f in slow]) if slow else 0}, in the others: "
        f"median {statistics.median(quiet) if quiet else 0}"
    )
    for key, i, ratio, f in sorted(slow, key=lambda x: -x[2])[:12]:
        print(f"  pass {i}: x{ratio:6.1f} of its fastest, {f:6d} faults  {key[:80]}")
    models_out = {}
    for name, calls in counts.items():
        every = price(seen, calls, statistics.median)
        row = {
            "first_3": price(seen, calls, lambda t: statistics.median(t[: layertable.TABLE_PASSES])),
            "retimed": price(seen, calls, rule),
            f"all_{args.passes}": every,
            "fastest": price(seen, calls, min),
        }
        models_out[name] = row
        cells = ", ".join(f"{k} {v * 1e3:.3f} ms ({v / every:.2f})" for k, v in row.items())
        print(f"{name}: seconds per image {cells}")
    memory = touch(args.touch_gib)
    print(
        f"memory: first touch {memory['first_touch_seconds_per_gib']:.3f} s/GiB ({memory['first_touch_faults']} "
        f"faults), again {memory['again_seconds_per_gib']:.3f} s/GiB ({memory['again_faults']} faults)"
    )
    if args.json:
        doc = {
            "boot_id": boot,
            "threads": args.threads,
            "batch": BATCH,
            "passes": args.passes,
            "models": models_out,
            "memory": memory,
            "calls": {key: [[s, f] for s, f in passes] for key, passes in seen.items()},
        }
        with open(args.json, "w") as fh:
            json.dump(doc, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
