"""The paper's own table, as data (from ../shared/PAPER.md), so every comparison shows it beside ours."""

from __future__ import annotations

CITATION = (
    'Li, Qin, Yuling (2026), "GPU Acceleration in Deep Learning Training: A Comparative Study on '
    'Model Scale and Performance", CC BY 4.0'
)
HARDWARE = {
    "gpu": "NVIDIA GeForce RTX 3050",
    "cpu": "Intel Core i9-14900K",
    "software": "PyTorch 2.11.0, CUDA 12.1",
    "gpu_short": "RTX 3050",
    "cpu_short": "i9-14900K",
}
EPOCHS = 10
PROTOCOL = "10 epochs, batch 128, Adam, StepLR, CIFAR-10"

# model: our registry name for the paper's model; parameters as the paper states them (ImageNet heads).
ROWS = [
    {
        "model": "simplecnn",
        "paper_model": "Simple CNN",
        "parameters": 500_000,
        "cpu_seconds": 114.94,
        "gpu_seconds": 57.99,
        "speedup": 2.0,
        "cpu_accuracy": None,
        "gpu_accuracy": None,
    },
    {
        "model": "resnet18",
        "paper_model": "ResNet18",
        "parameters": 11_700_000,
        "cpu_seconds": 463.63,
        "gpu_seconds": 63.77,
        "speedup": 7.3,
        "cpu_accuracy": None,
        "gpu_accuracy": None,
    },
    {
        "model": "resnet50",
        "paper_model": "ResNet50",
        "parameters": 25_600_000,
        "cpu_seconds": 5443.67,
        "gpu_seconds": 134.08,
        "speedup": 40.6,
        "cpu_accuracy": 0.8412,
        "gpu_accuracy": 0.8436,
    },
]
