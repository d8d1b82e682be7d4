"""Does the probe's layer table price a model's CPU training step as the step itself costs, and at which batch?

    PYTHONPATH=src python research/prediction/layer_table_batch.py [--threads N] [--models a,b] [--batches 64,128]
        [--rounds 2] [--harness 1,2]

For each model and batch: the layer table's seconds per image (layertable.layer_table for that model alone: each
leaf call timed forward + backward in interleaved passes, summed) beside a real training step's (forward, backward,
Adam; SYNTHETIC random 32x32 images, compute alone), for --rounds rounds; prints each round's ratio table/step.
With --harness 1,2 each round times the table with both harnesses, each right after a real step of its own, the
order alternating from round to round (harness 1: the timed step before the fix, kept here as it was:
outputs summed, backward into the leaves' .grad, an in-place module's input cloned each call). The
probe priced mobilenet_v2_cifar's CPU step ~2x on the H200 host's 16 threads, at the table's batch of 64, where
the measured epochs ran at 128. A benchmark, not a test: it times this machine.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time
from unittest import mock

import torch

from gpuscale.measure import layertable, probe
from gpuscale.models import registry as models


def step_seconds_per_image(name: str, batch: int, repeats: int = 3) -> float:
    torch.manual_seed(0)
    step = probe._train_step(models.build(name, 10), torch.device("cpu"), batch)
    step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times) / batch


def harness1_step(call, device: torch.device, batch: int):
    """The layer table's timed step as harness 1 made it (probe._layer_step before the fix)."""
    module = copy.deepcopy(call.module).to(device).train()
    inputs = call.inputs(batch, device)
    inplace = bool(getattr(module, "inplace", False))

    def step():
        args = [a.clone() if inplace and isinstance(a, torch.Tensor) else a for a in inputs]
        out = module(*args, **call.kwargs)
        outputs = out if isinstance(out, (tuple, list)) else (out,)
        grads = [o.sum() for o in outputs if isinstance(o, torch.Tensor) and o.requires_grad]
        if grads:
            sum(grads).backward()

    return step


def table_seconds_per_image(name: str, batch: int, harness: int) -> float:
    table = layertable.layer_table
    if harness == 1:
        with mock.patch.object(layertable, "LayerStep", harness1_step):
            return table(torch.device("cpu"), batch, 600.0, [name])["models"][name]["seconds_per_image"]
    if harness != layertable.HARNESS:
        raise SystemExit(f"--harness: {harness}: this tree times harness 1 and {layertable.HARNESS}")
    return table(torch.device("cpu"), batch, 600.0, [name])["models"][name]["seconds_per_image"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--models", default="mobilenet_v2_cifar,resnet18,mobilenet_v2,efficientnet_b0")
    parser.add_argument("--batches", default="64,128")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--harness", default=str(layertable.HARNESS), help="harness versions to time, e.g. 1,2")
    args = parser.parse_args()
    harnesses = [int(h) for h in args.harness.split(",")]
    torch.set_num_threads(args.threads)
    print(f"threads {torch.get_num_threads()}; ms per image; ratio = layer table / real step")
    print(f"{'model':22s} {'batch':>5s} {'round':>5s} {'harness':>7s} {'table':>8s} {'step':>8s} {'ratio':>6s}")
    for name in args.models.split(","):
        for batch in map(int, args.batches.split(",")):
            for round_ in range(1, args.rounds + 1):
                order = harnesses if round_ % 2 else harnesses[::-1]
                for harness in order:
                    real = step_seconds_per_image(name, batch)
                    table = table_seconds_per_image(name, batch, harness)
                    print(
                        f"{name:22s} {batch:5d} {round_:5d} {harness:7d} {table * 1e3:8.2f} {real * 1e3:8.2f} "
                        f"{table / real:6.2f}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
