"""A small custom network for 32x32 images, named in config/mymodel.yaml as `examples/mynet.py:build`.

Any file like this one works: a function that returns a torch.nn.Module for 10 classes of 32x32 RGB images
(taking `num_classes` if it likes). gpuscale builds it untrained, counts its parameters and training FLOPs,
probes its layers, predicts its epochs and trains it like a registry model (docs/methodology.md#your-own-model).
"""

from torch import nn


class MyNet(nn.Module):
    """Two conv blocks with batch norm, global average pooling, one linear layer (about 20k parameters)."""

    def __init__(self, num_classes: int = 10, width: int = 32):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1, bias=False),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(2 * width, num_classes))

    def forward(self, x):
        return self.classifier(self.features(x))


def build(num_classes: int = 10) -> nn.Module:
    return MyNet(num_classes)
