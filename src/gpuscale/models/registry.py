"""The model registry: names, what each is, and how to build it for 10 classes.

Torch-free at import (the Snakefile and params validation read the names); building imports torch.
Adding a model is one entry in MODELS. Every lookup (`get`, `build`, `description`) also takes a model named by
spec (`torchvision:<builder>`, `timm:<name>`, `package.module:function`, `path/to/file.py:function`;
gpuscale.models.spec): the one door through which training, the probe, the facts and the estimate find a model.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuscale.models import spec as model_spec


@dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    family: str
    build: Callable[[int], object]  # num_classes -> torch.nn.Module


def _torchvision(arch: str, cifar_stem: bool) -> Callable[[int], object]:
    def build(num_classes: int):
        from gpuscale.models import nets

        return nets.torchvision_resnet(arch, num_classes, cifar_stem=cifar_stem)

    return build


def _simplecnn(width: float) -> Callable[[int], object]:
    def build(num_classes: int):
        from gpuscale.models import nets

        return nets.SimpleCNN(
            num_classes, widths=tuple(round(w * width) for w in (32, 64, 128)), hidden=round(224 * width)
        )

    return build


def _vit(num_classes: int):
    from gpuscale.models import nets

    return nets.small_vit(num_classes)


def _net(function: str, *args) -> Callable[[int], object]:
    """nets.<function>(*args, num_classes) or, for a torchvision architecture, nets.torchvision_model."""

    def build(num_classes: int):
        from gpuscale.models import nets

        if function in ("vgg_cifar", "torchvision_model"):
            return getattr(nets, function)(*args, num_classes)
        return getattr(nets, function)(num_classes, *args)

    return build


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
        # the ladder across families (issue 18): torchvision's architectures as they are (ImageNet stems, so
        # 32x32 images shrink to 1x1 maps) unless the name says _cifar; depthwise and grouped convolutions
        ModelSpec(
            "vit_small_p8",
            "vision transformer for 32x32: patch 8 (16 tokens + class token), 12 layers, 6 heads, width 384",
            "vit",
            _net("vit", 8, 12, 6, 384),
        ),
        ModelSpec(
            "mobilenet_v2",
            "torchvision mobilenet_v2 (inverted residuals, depthwise 3x3), ImageNet stem",
            "mobilenet",
            _net("torchvision_model", "mobilenet_v2"),
        ),
        ModelSpec(
            "mobilenet_v2_cifar",
            "mobilenet_v2 with a CIFAR stem (first conv and first stride-2 block at stride 1)",
            "mobilenet",
            _net("mobilenet_v2_cifar"),
        ),
        ModelSpec(
            "mobilenet_v3_small",
            "torchvision mobilenet_v3_small (depthwise, squeeze-excitation, hardswish), ImageNet stem",
            "mobilenet",
            _net("torchvision_model", "mobilenet_v3_small"),
        ),
        ModelSpec(
            "mobilenet_v3_large",
            "torchvision mobilenet_v3_large, ImageNet stem",
            "mobilenet",
            _net("torchvision_model", "mobilenet_v3_large"),
        ),
        ModelSpec(
            "efficientnet_b0",
            "torchvision efficientnet_b0 (MBConv, depthwise, squeeze-excitation, SiLU), ImageNet stem",
            "efficientnet",
            _net("torchvision_model", "efficientnet_b0"),
        ),
        ModelSpec(
            "shufflenet_v2",
            "torchvision shufflenet_v2_x1_0 (channel split and shuffle, depthwise 3x3), ImageNet stem",
            "shufflenet",
            _net("torchvision_model", "shufflenet_v2_x1_0"),
        ),
        ModelSpec(
            "regnet_y_400mf",
            "torchvision regnet_y_400mf (grouped 3x3 convolutions, squeeze-excitation), ImageNet stem",
            "regnet",
            _net("torchvision_model", "regnet_y_400mf"),
        ),
        ModelSpec(
            "convnext_tiny",
            "torchvision convnext_tiny (4x4 patchify stem, depthwise 7x7, layer norm, linear MLPs)",
            "convnext",
            _net("torchvision_model", "convnext_tiny"),
        ),
        ModelSpec(
            "densenet121",
            "torchvision densenet121 (dense blocks, concatenation), ImageNet stem",
            "densenet",
            _net("torchvision_model", "densenet121"),
        ),
        ModelSpec(
            "vgg11_bn",
            "torchvision vgg11_bn convolutions (8 conv, 5 max-pools) and one 512-to-10 linear layer",
            "vgg",
            _net("vgg_cifar", "vgg11_bn"),
        ),
        ModelSpec(
            "vgg16_bn",
            "torchvision vgg16_bn convolutions (13 conv, 5 max-pools) and one 512-to-10 linear layer",
            "vgg",
            _net("vgg_cifar", "vgg16_bn"),
        ),
    ]
}
MODEL_NAMES: tuple[str, ...] = tuple(MODELS)


def is_registered(name: str) -> bool:
    return name in MODELS


def get(name: str) -> ModelSpec:
    """The registry's entry, or for a spec an entry that builds it (family "custom")."""
    if name in MODELS:
        return MODELS[name]
    model_spec.parse(name)  # SpecError: the form is wrong
    return ModelSpec(name, model_spec.description(name), "custom", lambda n: _build_spec(name, n))


def _build_spec(name: str, num_classes: int):
    from gpuscale.models import specbuild

    return specbuild.build(name, num_classes)


def build(name: str, num_classes: int = 10):
    return get(name).build(num_classes)


def description(name: str) -> str:
    return get(name).description


def check(name: str) -> None:
    """Torch-free: a registry name, or a spec whose form, file, module and function are there (SpecError)."""
    if model_spec.is_spec(name):
        model_spec.check(name)
    elif name not in MODELS:
        close = difflib.get_close_matches(name, MODEL_NAMES, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise model_spec.SpecError(
            f"unknown model {name!r} ({hint}allowed: a registry name ({', '.join(MODEL_NAMES)}) or a spec: "
            f"{model_spec.FORMS})"
        )


FACTS_PATH = Path(__file__).with_name("modelfacts.json")


def facts() -> dict:
    """Each registry model's cost without torch: {"schema": 1, "notes": ..., "models": {name: {"family",
    "parameters", "train_flops_per_image", "flops_by_kind": {...}, "layers", ...}}}, as `python -m gpuscale.models.nets
    --facts` wrote it (its "notes" say what each field counts)."""
    return json.loads(FACTS_PATH.read_text())
