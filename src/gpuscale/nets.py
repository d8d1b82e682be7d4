"""Network definitions and their cost (parameters, training FLOPs per image)."""

from __future__ import annotations

import copy

import torch
import torchvision
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


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
    return torchvision.models.VisionTransformer(
        image_size=32, patch_size=4, num_layers=6, num_heads=3, hidden_dim=192, mlp_dim=768, num_classes=num_classes
    )


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def flops_per_image(model: nn.Module, image_shape: tuple[int, int, int] = (3, 32, 32)) -> dict[str, int]:
    """Forward and training (forward + backward) FLOPs for one image, counted by torch's FlopCounterMode.

    Counted on a batch of 2 (batch norm needs more than one value per channel in training mode) on
    a deep copy, so the caller's model and its random state are untouched.
    """
    batch = 2
    with torch.random.fork_rng(devices=[]):
        probe = copy.deepcopy(model).cpu().train()
        x = torch.randn(batch, *image_shape)
        with FlopCounterMode(display=False) as forward_counter:
            out = probe(x)
        with FlopCounterMode(display=False) as backward_counter:
            out.sum().backward()
    forward = forward_counter.get_total_flops() // batch
    backward = backward_counter.get_total_flops() // batch
    return {"forward_flops_per_image": int(forward), "train_flops_per_image": int(forward + backward)}
