"""Does a GPU's host charge per dispatched op alike, or per parameterised layer as well? (docs/prediction.md, "The
GPU's dispatch prices every op alike".) The probe prices a GPU step as fixed + ops x op_seconds, op_seconds from a
stack of conv-norm-ReLU blocks (0.14 layers per op as the models' facts count them); densenet121 and vit_small_p8,
at 0.06-0.08, ran 0.71 and 0.83 of that price. This times training steps (forward, backward, Adam, as the probe's)
of stacks that mix the same blocks with k cheap elementwise ops each (x + 0.001 x: no module, no parameter), two
depths, and fits

    seconds per step = c + a * layers + b * ops      (least squares over the stacks; layers: nets.layer_count)

so a is what a parameterised layer costs beyond its ops, b what any op costs. Where a is near 0, the probe's price
per op holds for every mix; where it is not, a model of few layers per op pays less per op than the probe's stack.
Torch only (the device machine's python3 runs it from src/ on PYTHONPATH).

    python research/prediction/dispatch_mix.py [--device cuda] [--seconds 1.5] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import torch
from torch import nn

from gpuscale.measure import probe
from gpuscale.models import nets

DEPTHS = (8, 16)
CHEAP = (0, 2, 6)  # cheap elementwise op pairs per block


class Cheap(nn.Module):
    """k times x + 0.001 x: two dispatched ops each way, no parameter."""

    def __init__(self, k: int):
        super().__init__()
        self.k = k

    def forward(self, x):
        for _ in range(self.k):
            x = x + 0.001 * x
        return x


def mixed_stack(blocks: int, k: int) -> nn.Module:
    """The probe's stacked_model with k cheap op pairs after each block."""
    layers: list[nn.Module] = [nn.Conv2d(3, 8, 3, stride=4, padding=1)]
    for _ in range(blocks):
        layers += [nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), Cheap(k)]
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(8 * 8 * 8, 10))


def measure(device: torch.device, seconds: float, batch: int = 128) -> dict:
    rows = []
    for blocks in DEPTHS:
        for k in CHEAP:
            model = mixed_stack(blocks, k)
            cost = nets.training_cost(model)
            step, _ = probe._timed(probe._train_step(model, device, batch), device, seconds)
            rows.append(
                {
                    "blocks": blocks,
                    "cheap": k,
                    "layers": nets.layer_count(model),
                    "ops": cost["ops_per_step"],
                    "seconds": step,
                }
            )
    tiny = probe.tiny_model()
    fixed, _ = probe._timed(probe._train_step(tiny, device, batch), device, seconds)
    a = np.array([[1.0, r["layers"], r["ops"]] for r in rows])
    y = np.array([r["seconds"] for r in rows])
    (c, per_layer, per_op), *_ = np.linalg.lstsq(a, y, rcond=None)
    plain = next(r for r in rows if r["blocks"] == probe.LAYER_STACK and r["cheap"] == 0)
    tiny_ops = nets.training_cost(tiny)["ops_per_step"]
    op_seconds = max(0.0, plain["seconds"] - fixed) / (plain["ops"] - tiny_ops)  # the probe's way (FLOPs negligible)
    fitted = c + per_layer * a[:, 1] + per_op * a[:, 2]
    return {
        "device": str(device),
        "batch": batch,
        "stacks": rows,
        "fixed_step_seconds": fixed,
        "probe_op_seconds": op_seconds,
        "fit": {
            "constant": c,
            "per_layer": per_layer,
            "per_op": per_op,
            "max_relative_residual": float(np.max(np.abs(fitted - y) / y)),
        },
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seconds", type=float, default=1.5, help="timing window per stack")
    parser.add_argument("--json", help="write the result here")
    args = parser.parse_args(argv)
    got = measure(torch.device(args.device), args.seconds)
    for r in got["stacks"]:
        print(
            f"{r['blocks']:3d} blocks, {r['cheap']} cheap pairs: {r['layers']:3d} layers {r['ops']:4d} ops "
            f"({r['layers'] / r['ops']:.3f} layers per op)  {r['seconds'] * 1e3:8.3f} ms a step"
        )
    fit = got["fit"]
    print(
        f"fixed (tiny model) {got['fixed_step_seconds'] * 1e3:.3f} ms; the probe's op_seconds "
        f"{got['probe_op_seconds'] * 1e6:.2f} us"
    )
    print(
        f"fit: {fit['constant'] * 1e3:.3f} ms + {fit['per_layer'] * 1e6:.2f} us a layer + {fit['per_op'] * 1e6:.2f} "
        f"us an op (worst residual {100 * fit['max_relative_residual']:.1f}%)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(got, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
