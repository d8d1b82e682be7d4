"""How well a probe record alone predicts each model's compute per training step on this machine.

    PYTHONPATH=src python benchmarks/probe_check.py PROBE.json [--threads N] [--models a,b,...] [--steps 3]

For each model: seconds per training step (forward, backward, Adam step; batch 128 of SYNTHETIC random 32x32
images, no input pipeline: compute alone) timed here after one warm-up step, beside the cost model's compute
seconds per step from the probe record alone (costmodel.from_probe). It prints a table and the median and
worst absolute error. A benchmark, not a test: it needs the probe to come from this machine, and it times.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from gpuscale import costmodel as cm
from gpuscale import models, predict

BATCH = 128


def step_seconds(name: str, steps: int) -> float:
    torch.manual_seed(0)
    model = models.MODELS[name].build(10).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(BATCH, 3, 32, 32), torch.randint(0, 10, (BATCH,))
    loss = torch.nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss(model(x), y).backward()
        optimizer.step()

    step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("probe")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--models", default=",".join(models.MODEL_NAMES))
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    probe = predict.load_probes([args.probe])
    (device,) = probe
    cal = cm.from_probe(probe[device])
    facts = cm.load_facts()
    errors = []
    print(f"{'model':20s} {'measured s/step':>16s} {'probe-only s/step':>18s} {'error':>8s}   (synthetic images)")
    for name in args.models.split(","):
        measured = step_seconds(name, args.steps)
        predicted = cm.compute_seconds(cal, facts[name], BATCH, 1)
        error = cm.percent_error(predicted, measured)
        errors.append(abs(error))
        print(f"{name:20s} {measured:16.4f} {predicted:18.4f} {error:+7.1f}%", flush=True)
    print(f"median |error| {statistics.median(errors):.1f}%, worst {max(errors):.1f}% over {len(errors)} models")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
