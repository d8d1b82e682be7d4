"""Where does gpuscale's loop lose time against the bare loop? Crosses the two loaders with the two loops.

Each (loader, loop) pair trains one epoch after a shared warm-up, in an interleaved order, twice.
    PYTHONPATH=src python benchmarks/overhead_check.py --data data/prepared --device cuda
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torchvision
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
import bare_loop

from gpuscale.contract import params
from gpuscale.inputs import data
from gpuscale.measure import epoch
from gpuscale.measure.loaders import host_loaders, paper_transforms


def bare_epoch(model, loader, device, criterion, optimizer) -> float:
    model.train()
    epoch.synchronize(device)
    start = time.perf_counter()
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        criterion(model(x), y).backward()
        optimizer.step()
    epoch.synchronize(device)
    return time.perf_counter() - start


def gpuscale_epoch(model, loader, device, criterion, optimizer) -> float:
    return epoch.train_epoch(model, loader, device, criterion, optimizer, lambda *a: None)["train_seconds"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--pairs",
        default=None,
        help="comma-separated loader/loop pairs to run, e.g. gpuscale/gpuscale,bare/bare (default all)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dataset, _, _ = data.load_prepared(args.data, verify=False)
    settings = params.train_settings(params.load([Path("params.yaml")]), args.model)
    loaders = {"gpuscale": host_loaders(dataset, settings, device, 0)[0]}
    tf = paper_transforms(settings)[0]
    labels = np.load(f"{args.data}/train_labels.npy")
    images = np.load(f"{args.data}/train_images.npy", mmap_mode="r")
    loaders["bare"] = torch.utils.data.DataLoader(
        bare_loop.Images(images, labels, tf),
        batch_size=128,
        shuffle=True,
        num_workers=2,
        pin_memory=device.type == "cuda",
    )
    loops = {"gpuscale": gpuscale_epoch, "bare": bare_epoch}
    model = getattr(torchvision.models, args.model)(num_classes=10).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()
    bare_epoch(model, loaders["bare"], device, criterion, optimizer)  # warm-up
    pairs = (
        [tuple(pair.split("/")) for pair in args.pairs.split(",")]
        if args.pairs
        else list(itertools.product(loaders, loops))
    )
    for _ in range(args.rounds):
        for loader_name, loop_name in pairs:
            seconds = loops[loop_name](model, loaders[loader_name], device, criterion, optimizer)
            print(
                json.dumps(
                    {
                        "loader": loader_name,
                        "loop": loop_name,
                        "seconds": round(seconds, 3),
                        "images_per_second": round(len(dataset.train_labels) / seconds),
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
