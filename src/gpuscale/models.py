"""The model registry: names, what each is, and how to build it for 10 classes.

Torch-free at import (the Snakefile and params validation read the names); building imports torch.
Adding a model is one entry in MODELS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    family: str
    build: Callable[[int], object]  # num_classes -> torch.nn.Module


def _torchvision(arch: str, cifar_stem: bool) -> Callable[[int], object]:
    def build(num_classes: int):
        from gpuscale import nets

        return nets.torchvision_resnet(arch, num_classes, cifar_stem=cifar_stem)

    return build


def _simplecnn(width: float) -> Callable[[int], object]:
    def build(num_classes: int):
        from gpuscale import nets

        return nets.SimpleCNN(
            num_classes, widths=tuple(round(w * width) for w in (32, 64, 128)), hidden=round(224 * width)
        )

    return build


def _vit(num_classes: int):
    from gpuscale import nets

    return nets.small_vit(num_classes)


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        ModelSpec("simplecnn", "3 conv + 2 fully connected layers (the paper's small CNN)", "cnn", _simplecnn(1.0)),
        ModelSpec("simplecnn_half", "simplecnn at half width (16/32/64 channels, 112 hidden)", "cnn", _simplecnn(0.5)),
        ModelSpec(
            "simplecnn_double", "simplecnn at double width (64/128/256 channels, 448 hidden)", "cnn", _simplecnn(2.0)
        ),
        ModelSpec(
            "resnet18",
            "torchvision resnet18, ImageNet stem (7x7/2 conv + max-pool)",
            "resnet",
            _torchvision("resnet18", False),
        ),
        ModelSpec("resnet34", "torchvision resnet34, ImageNet stem", "resnet", _torchvision("resnet34", False)),
        ModelSpec(
            "resnet50",
            "torchvision resnet50, ImageNet stem (7x7/2 conv + max-pool)",
            "resnet",
            _torchvision("resnet50", False),
        ),
        ModelSpec("resnet101", "torchvision resnet101, ImageNet stem", "resnet", _torchvision("resnet101", False)),
        ModelSpec("resnet152", "torchvision resnet152, ImageNet stem", "resnet", _torchvision("resnet152", False)),
        ModelSpec(
            "resnet18_cifar",
            "resnet18 with a CIFAR stem (3x3/1 conv, no max-pool)",
            "resnet",
            _torchvision("resnet18", True),
        ),
        ModelSpec(
            "resnet50_cifar",
            "resnet50 with a CIFAR stem (3x3/1 conv, no max-pool)",
            "resnet",
            _torchvision("resnet50", True),
        ),
        ModelSpec("vit_tiny_p4", "vision transformer for 32x32: patch 4, 6 layers, 3 heads, width 192", "vit", _vit),
    ]
}
MODEL_NAMES: tuple[str, ...] = tuple(MODELS)


def build(name: str, num_classes: int = 10):
    return MODELS[name].build(num_classes)
