"""How well a probe record alone predicts each model's compute per training step on this machine.

    PYTHONPATH=src python benchmarks/probe_check.py PROBE.json [--threads N] [--models a,b,...] [--steps 3]
        [--json OUT.json]

For each model: seconds per training step (forward, backward, Adam step; batch 128 of SYNTHETIC random 32x32
images, no input pipeline: compute alone) timed here on the probe's device after one warm-up step, beside the
cost model's compute seconds per step from the probe record alone (costmodel.from_probe: the layer table where
the probe has one, else the rates by kind). It prints a table and the median and worst absolute error, and with
--json writes the rows. A benchmark, not a test: it needs the probe to come from this machine, and it times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from gpuscale.measure import probe
from gpuscale.models import registry as models
from gpuscale.predict import checks
from gpuscale.predict import costmodel as cm

BATCH = 128


def step_seconds(name: str, steps: int, device: str = "cpu") -> float:
    """Seconds per training step of `name` on a random batch (the probe's own step: zero_grad, forward, loss,
    backward, Adam), after one warm-up step."""
    torch.manual_seed(0)
    where = torch.device(device)
    step = probe._train_step(models.MODELS[name].build(10).train(), where, BATCH)
    step()
    probe._sync(where)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    probe._sync(where)
    return (time.perf_counter() - start) / steps


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("probe")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--models", default=",".join(models.MODEL_NAMES))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    doc = probe.load(args.probe)  # checked against its schema where jsonschema is installed (not on a bare GPU host)
    device = doc["device"]
    cal = cm.from_probe(doc)
    facts = cm.load_facts()
    errors, rows = [], []
    print(f"{'model':20s} {'measured s/step':>16s} {'probe-only s/step':>18s} {'error':>8s}   (synthetic images)")
    for name in args.models.split(","):
        measured = step_seconds(name, args.steps, device)
        predicted = cm.compute_seconds(cal, facts[name], BATCH, 1)
        error = checks.percent_error(predicted, measured)
        errors.append(abs(error))
        path = "layer table" if cm.uses_table(cal, name) else "rates by kind"
        rows.append({"model": name, "device": device, "measured": measured, "predicted": predicted, "path": path})
        print(f"{name:20s} {measured:16.4f} {predicted:18.4f} {error:+7.1f}%   {path}", flush=True)
    print(f"median |error| {statistics.median(errors):.1f}%, worst {max(errors):.1f}% over {len(errors)} models")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"probe": args.probe, "threads": torch.get_num_threads(), "rows": rows}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
