"""The run lists of the paired re-measurement: every registry model's `paper` run on the CPU and the GPU
of one H200 lease (lease A), and the paper's three models with five others again in a second lease as round 2
(lease B), in gpuscale's interleaved order (gpuscale.contract.params.timing_order: RMIT under study.order_seed; each
model's two devices side by side, in a random order). Writes research/leases/h200_pairs_A.txt and _B.txt, one
research/leases/h200_study.sh run spec per line (DEVICE:MODEL:paper:0:ESTIMATE[:round=2]) and the overlay switches.
The estimates (seconds per run, for the budget) come from the reference study's epochs scaled to the overlays.

    python research/leases/h200_pairs_plan.py
"""

from __future__ import annotations

import copy
from pathlib import Path

from gpuscale.contract import params
from gpuscale.models.registry import MODEL_NAMES

HERE = Path(__file__).parent
ORDER_SEED = 26  # the number: any fixed seed will do, recorded here
SECOND_LEASE = [
    "simplecnn",
    "resnet18",
    "resnet50",
    "mobilenet_v2",
    "efficientnet_b0",
    "densenet121",
    "vit_tiny_p4",
    "vgg16_bn",
]
# per-run seconds under the overlays (3 epochs: GPU 60 sampled steps, CPU 10), from the reference's epoch times
SLOW_CPU = {
    "resnet18_cifar": 35,
    "resnet50_cifar": 90,
    "mobilenet_v2_cifar": 60,
    "resnet152": 40,
    "efficientnet_b0": 40,
    "resnet101": 32,
    "vit_small_p8": 32,
    "densenet121": 28,
}
SLOW_GPU = {"densenet121": 35, "regnet_y_400mf": 28, "efficientnet_b0": 28, "resnet101": 28, "resnet152": 30}
OVERLAY = {"cpu": "overlay=research/leases/h200_pairs_cpu.yaml", "cuda": "overlay=research/leases/h200_pairs_gpu.yaml"}


def plan(models: list[str], round_: int) -> list[str]:
    config = copy.deepcopy(params.load([Path("params.yaml")]))
    config["study"].update(
        models=models,
        devices=["cpu", "cuda"],
        variants=["paper"],
        seeds=[0],
        rounds=1,
        order="interleaved",
        order_seed=ORDER_SEED + round_ - 1,
    )
    lines = []
    for key in params.timing_order(config):
        device, model = key["device"], key["model"]
        estimate = SLOW_CPU.get(model, 22) if device == "cpu" else SLOW_GPU.get(model, 24)
        lines += [OVERLAY[device], f"{device}:{model}:paper:0:{estimate}" + (f":round={round_}" if round_ > 1 else "")]
    return lines


if __name__ == "__main__":
    (HERE / "h200_pairs_A.txt").write_text("\n".join(plan(list(MODEL_NAMES), 1)) + "\n")
    (HERE / "h200_pairs_B.txt").write_text("\n".join(plan(SECOND_LEASE, 2)) + "\n")
