"""Network definitions and their cost (parameters, training FLOPs per image, FLOPs by layer kind).

`python -m gpuscale.models.facts` writes src/gpuscale/models/modelfacts.json, the registry's costs for code that must
not import torch (the cost model); tests/test_models.py fails when that file is stale.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass

import torch
import torchvision
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import conv_flop_count, flop_registry


class SimpleCNN(nn.Module):
    """The paper's small CNN: 3 conv + 2 fully connected layers, about 0.55M parameters."""

    def __init__(self, num_classes: int = 10, widths: tuple[int, int, int] = (32, 64, 128), hidden: int = 224):
        super().__init__()
        layers: list[nn.Module] = []
        in_channels = 3
        for width in widths:
            layers += [nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2)]
            in_channels = width
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(in_channels * 4 * 4, hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def torchvision_resnet(arch: str, num_classes: int, cifar_stem: bool) -> nn.Module:
    model = getattr(torchvision.models, arch)(weights=None, num_classes=num_classes)
    if cifar_stem:
        # 32x32 inputs: a 3x3 stride-1 stem and no max-pool keep 32x32 feature maps in layer1,
        # about 15x the compute per image of the ImageNet stem.
        model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
    return model


def small_vit(num_classes: int) -> nn.Module:
    """A ViT sized for 32x32 inputs: 4x4 patches (64 tokens + class token), 6 layers, 3 heads, width 192."""
    return vit(num_classes, patch_size=4, num_layers=6, num_heads=3, hidden_dim=192)


def torchvision_model(arch: str, num_classes: int, **kwargs) -> nn.Module:
    """A torchvision classifier as torchvision defines it (its ImageNet stem), untrained (weights=None)."""
    return getattr(torchvision.models, arch)(weights=None, num_classes=num_classes, **kwargs)


def vgg_cifar(arch: str, num_classes: int) -> nn.Module:
    """torchvision's VGG with batch norm, its convolutions as they are, sized for 32x32: five max-pools leave a
    1x1x512 map, so the 7x7 adaptive pool and the 25088-4096-4096 classifier (120M parameters) become one
    512-to-classes linear layer (as the common CIFAR VGGs do)."""
    model = torchvision_model(arch, num_classes)
    model.avgpool = nn.Identity()
    model.classifier = nn.Linear(512, num_classes)
    return model


def mobilenet_v2_cifar(num_classes: int) -> nn.Module:
    """MobileNetV2 with a CIFAR stem: the first conv and the first stride-2 block at stride 1, so the depthwise
    convolutions work on 32x32, 16x16, 8x8 and 4x4 maps (ImageNet stem at 32x32: 16x16 down to 1x1)."""
    model = torchvision_model("mobilenet_v2", num_classes)
    model.features[0][0].stride = (1, 1)
    model.features[2].conv[1][0].stride = (1, 1)
    return model


def vit(num_classes: int, patch_size: int, num_layers: int, num_heads: int, hidden_dim: int) -> nn.Module:
    """A ViT for 32x32 inputs (torchvision's VisionTransformer; MLP width 4x the hidden width)."""
    return torchvision.models.VisionTransformer(
        image_size=32,
        patch_size=patch_size,
        num_layers=num_layers,
        num_heads=num_heads,
        hidden_dim=hidden_dim,
        mlp_dim=4 * hidden_dim,
        num_classes=num_classes,
    )


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


FLOP_KINDS = ("conv", "depthwise_conv", "grouped_conv", "linear", "attention", "other")
aten = torch.ops.aten
_CONV_OPS = {
    aten.convolution,
    aten._convolution,
    aten.cudnn_convolution,
    aten.convolution_overrideable,
    aten._slow_conv2d_forward,
    aten.convolution_backward,
}
_LINEAR_OPS = {aten.mm, aten.addmm}


def _conv_backward_flops(grad_out, x, w, _bias_sizes, _stride, _padding, _dilation, transposed, *args, **kwargs):
    """Input and weight gradients cost what the forward convolution costs, each. torch's formula counts the
    weight gradient of a grouped convolution over all input channels, `groups` times too many (a depthwise
    layer's by its channel count)."""
    output_mask = args[2]
    forward = conv_flop_count(list(x.shape), list(w.shape), list(grad_out.shape), transposed=transposed)
    return forward * (int(output_mask[0]) + int(output_mask[1]))


# torch's flop counter has no formula for the CPU's fused attention, so attention went uncounted on the CPU
# (where the registry's FLOPs are counted): the same formulas as for the GPU's flash attention
_FORMULAS = {
    **flop_registry,
    aten.convolution_backward: _conv_backward_flops,
    aten._scaled_dot_product_flash_attention_for_cpu: flop_registry[aten._scaled_dot_product_flash_attention],
    aten._scaled_dot_product_flash_attention_for_cpu_backward: flop_registry[
        aten._scaled_dot_product_flash_attention_backward
    ],
}
# ops that compute nothing: shape and metadata queries, views, allocation
_NO_WORK = {aten.detach, aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty, aten.new_empty_strided}


def _conv_kind(func, args) -> str:
    x, w = (args[1], args[2]) if func is aten.convolution_backward else (args[0], args[1])
    channels_per_group = w.shape[1]
    if channels_per_group == x.shape[1]:
        return "conv"
    return "depthwise_conv" if channels_per_group == 1 else "grouped_conv"


class CostCounter(TorchDispatchMode):
    """Counts, per op dispatched: FLOPs by layer kind (torch's flop formulas: convolutions by their groups,
    mm/addmm as linear, bmm/baddbmm and fused attention as attention), output elements of every other op that
    computes (normalisation, activations, pooling, elementwise: 'other', one per element, an estimate of
    memory-bound work outside train FLOPs) and the number of such ops (a proxy for kernel launches)."""

    def __init__(self):
        super().__init__()
        self.flops: Counter[str] = Counter()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        if packet in _FORMULAS:
            flops = _FORMULAS[packet](*args, **kwargs, out_val=out)
            if packet in _CONV_OPS:
                kind = _conv_kind(packet, args)
            elif packet in _LINEAR_OPS:
                kind = "linear"
            else:
                kind = "attention"
            self.flops[kind] += flops
            self.ops += 1
        elif not func.is_view and packet not in _NO_WORK:
            outputs = out if isinstance(out, (tuple, list)) else (out,)
            elements = sum(o.numel() for o in outputs if isinstance(o, torch.Tensor))
            if elements:
                self.flops["other"] += elements
                self.ops += 1
        return out


def training_cost(model: nn.Module, image_shape: tuple[int, int, int] = (3, 32, 32)) -> dict:
    """What one training image costs `model` (forward + backward, no optimizer), per kind, from a batch of 2
    (batch norm needs more than one value per channel in training mode) on a deep copy on the CPU, so the
    caller's model and its random state are untouched."""
    batch = 2
    with torch.random.fork_rng(devices=[]):
        probe = copy.deepcopy(model).cpu().train()
        x = torch.randn(batch, *image_shape)
        with CostCounter() as forward:
            out = probe(x)
        with CostCounter() as backward:
            out.sum().backward()
    total = forward.flops + backward.flops
    return {
        "forward_flops_per_image": sum(v for k, v in forward.flops.items() if k != "other") // batch,
        "train_flops_per_image": sum(v for k, v in total.items() if k != "other") // batch,
        "flops_by_kind": {kind: int(total[kind]) // batch for kind in FLOP_KINDS},
        "ops_per_step": forward.ops + backward.ops,
    }


def flops_per_image(model: nn.Module, image_shape: tuple[int, int, int] = (3, 32, 32)) -> dict[str, int]:
    """Forward and training (forward + backward) FLOPs for one image (torch's flop formulas, see CostCounter)."""
    cost = training_cost(model, image_shape)
    return {key: int(cost[key]) for key in ("forward_flops_per_image", "train_flops_per_image")}


def layer_count(model: nn.Module) -> int:
    """Weight layers: convolutions, linear layers and attention blocks (an attention block's output projection is
    part of it, not a layer of its own)."""
    attention = [m for m in model.modules() if isinstance(m, nn.MultiheadAttention)]
    inner = {id(m.out_proj) for m in attention}
    weighted = [m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear)) and id(m) not in inner]
    return len(weighted) + len(attention)


# ----------------------------------------------------------------------------- the layers a step calls


def _stride_order(t: torch.Tensor) -> str:
    """The tensor's dimensions from the largest stride to the smallest: '0123' for contiguous NCHW, '0231' for
    channels-last (the memory format picks the CPU's kernel path)."""
    strides = t.stride()
    return "".join(str(i) for i in sorted(range(t.dim()), key=lambda i: (-strides[i], i)))


@dataclass(frozen=True)
class TensorSpec:
    """A layer input as the network passes it: shape without the batch, stride order, whether it needs a
    gradient (every input after the first layer does), dtype."""

    shape: tuple[int, ...]
    order: str
    requires_grad: bool
    dtype: str

    def make(self, batch: int, device: torch.device | str = "cpu") -> torch.Tensor:
        dims = [int(c) for c in self.order]
        full = (batch, *self.shape)
        x = torch.randn([full[i] for i in dims], device=device, dtype=getattr(torch, self.dtype.split(".")[-1]))
        x = x.permute([dims.index(i) for i in range(len(dims))])
        return x.requires_grad_(self.requires_grad)


@dataclass(frozen=True)
class SameAs:
    """An argument that is the same tensor as an earlier one (attention's query, key and value)."""

    index: int


@dataclass
class LayerCall:
    """One distinct call of a leaf module in a training step: the module, its arguments as specs, and how many
    times per step a model makes it."""

    key: str
    module: nn.Module
    args: tuple
    kwargs: dict

    def inputs(self, batch: int, device) -> list:
        made: list = []
        for a in self.args:
            if isinstance(a, SameAs):
                made.append(made[a.index])
            elif isinstance(a, TensorSpec):
                made.append(a.make(batch, device))
            else:
                made.append(a)
        return made


def _leaf_modules(model: nn.Module) -> list[nn.Module]:
    """Modules without children, and attention blocks whole (their out_proj is a parameter holder)."""
    inside = {id(c) for m in model.modules() if isinstance(m, nn.MultiheadAttention) for c in m.modules() if c is not m}
    return [
        m
        for m in model.modules()
        if id(m) not in inside and (isinstance(m, nn.MultiheadAttention) or not list(m.children()))
    ]


def layer_calls(model: nn.Module, image_shape: tuple[int, int, int] = (3, 32, 32)) -> tuple[Counter, dict]:
    """The leaf-module calls of one training step (forward + backward on a batch of 2 images, on a deep copy):
    ({key: calls per step}, {key: LayerCall}). The key names the module, its input shapes (batch excluded), stride
    orders and gradient needs: calls with equal keys cost the same. Operations outside leaf modules (residual
    additions, reshapes, channel shuffles) are not calls."""
    calls: Counter = Counter()
    protos: dict[str, LayerCall] = {}

    def record(module, args, kwargs):
        specs: list = []
        seen: dict[int, int] = {}
        for a in args:
            if isinstance(a, torch.Tensor):
                if id(a) in seen:
                    specs.append(SameAs(seen[id(a)]))
                    continue
                seen[id(a)] = len(specs)
                specs.append(TensorSpec(tuple(a.shape[1:]), _stride_order(a), a.requires_grad, str(a.dtype)))
            else:
                specs.append(a)
        text = ", ".join(
            f"{tuple(s.shape)}:{s.order}{'' if s.requires_grad else ':nograd'}"
            if isinstance(s, TensorSpec)
            else f"same as {s.index}"
            if isinstance(s, SameAs)
            else repr(s)
            for s in specs
        )
        options = "".join(f", {k}={v!r}" for k, v in sorted(kwargs.items()))
        key = f"{type(module).__name__}({module.extra_repr()}) <- {text}{options}"
        calls[key] += 1
        if key not in protos:
            protos[key] = LayerCall(key, module, tuple(specs), dict(kwargs))

    with torch.random.fork_rng(devices=[]):
        probe = copy.deepcopy(model).cpu().train()
        hooks = [m.register_forward_pre_hook(record, with_kwargs=True) for m in _leaf_modules(probe)]
        try:
            probe(torch.randn(2, *image_shape)).sum().backward()
        finally:
            for h in hooks:
                h.remove()
    return calls, protos
