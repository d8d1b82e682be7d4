"""The plainest PyTorch training loop, no workflow: the baseline gpuscale's own overhead is measured against.

Same data (a prepared dataset folder), same per-sample transforms and DataLoader settings, same model
definitions as torchvision builds them, Adam, one clock read per epoch after synchronising the device.
Imports nothing from gpuscale, on purpose.

    python benchmarks/bare_loop.py --data data/prepared --model resnet18 --device cuda --epochs 2
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
import torchvision
from PIL import Image
from torch import nn
from torchvision import transforms as T

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


class Images(torch.utils.data.Dataset):
    def __init__(self, images, labels, transform):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.transform(Image.fromarray(np.asarray(self.images[i]))), int(self.labels[i])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--model", default="resnet18", choices=["resnet18", "resnet50"])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    images = np.load(f"{args.data}/train_images.npy", mmap_mode="r")
    labels = np.load(f"{args.data}/train_labels.npy")
    transform = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    loader = torch.utils.data.DataLoader(
        Images(images, labels, transform),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        pin_memory=device.type == "cuda",
    )
    model = getattr(torchvision.models, args.model)(num_classes=10).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()
    results = []
    for epoch in range(args.epochs):
        model.train()
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        results.append({"epoch": epoch + 1, "seconds": seconds, "images_per_second": len(labels) / seconds})
        print(json.dumps({"bare_loop": args.model, "device": args.device, **results[-1]}), flush=True)


if __name__ == "__main__":
    main()
