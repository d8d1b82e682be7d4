"""How well a probe record alone predicts each model's compute per training step on this machine.

    PYTHONPATH=src python research/prediction/probe_check.py PROBE.json [--threads N] [--models a,b,...] [--steps 3]
        [--json OUT.json]
    PYTHONPATH=src python research/prediction/probe_check.py PROBE.json --rescore CHECK.json

--rescore times nothing: it prices the step times a check once measured (its --json file, made with PROBE on that
machine) with this code's cost model, beside what the check's own code priced them at.

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
from pathlib import Path

import torch

from gpuscale.measure import probe
from gpuscale.models import registry as models
from gpuscale.predict import costmodel as cm

sys.path.insert(0, str(next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())))
from research.prediction import validation  # noqa: E402  (the leave-one-lease-out check lives in research/)

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
    parser.add_argument("--rescore", default=None, help="a check's --json file: price its measured steps again")
    args = parser.parse_args(argv)
    if args.rescore:
        return rescore(args.probe, args.rescore)
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
        error = validation.checks.percent_error(predicted, measured)
        errors.append(abs(error))
        path = "layer table" if cm.uses_table(cal, name) else "rates by kind"
        rows.append({"model": name, "device": device, "measured": measured, "predicted": predicted, "path": path})
        print(f"{name:20s} {measured:16.4f} {predicted:18.4f} {error:+7.1f}%   {path}", flush=True)
    print(f"median |error| {statistics.median(errors):.1f}%, worst {max(errors):.1f}% over {len(errors)} models")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"probe": args.probe, "threads": torch.get_num_threads(), "rows": rows}, out, indent=1)
    return 0


def rescore(probe_path: str, check_path: str) -> int:
    """The measured step times of an earlier check against this code's probe-alone compute per step."""
    cal = cm.from_probe(probe.load(probe_path))
    facts = cm.load_facts()
    with open(check_path) as f:
        rows = json.load(f)["rows"]
    then, now = [], []
    print(f"{'model':20s} {'measured s/step':>16s} {'then':>8s} {'now':>8s}   (error of the probe alone)")
    for row in rows:
        predicted = cm.compute_seconds(cal, facts[row["model"]], BATCH, 1)
        then.append(validation.checks.percent_error(row["predicted"], row["measured"]))
        now.append(validation.checks.percent_error(predicted, row["measured"]))
        print(f"{row['model']:20s} {row['measured']:16.4f} {then[-1]:+7.1f}% {now[-1]:+7.1f}%")
    for label, errors in (("then", then), ("now", now)):
        errors = [abs(e) for e in errors]
        print(f"{label}: median |error| {statistics.median(errors):.1f}%, worst {max(errors):.1f}% over {len(errors)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
