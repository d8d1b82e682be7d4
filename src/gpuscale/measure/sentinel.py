"""The sentinel: a fixed micro-measurement of the machine state a study's timings depend on, a witness, never a
correction.

A few seconds before and after every timing job (and around every probe) it measures, on the same inputs each
time, what the epochs lean on: the memory bandwidth of one core, the host input pipeline of the `paper` variant
(images/s through the configured per-sample transforms, in one process and at the configured loader workers) and,
on a GPU, the cost of one small launched op. Each component is the median of a few repeats with its own spread.
Which components it keeps, their units and the drift rule live in gpuscale.contract.conditions (torch-free).

It records a level: two leases of one machine kind are told apart by it, and a job whose after-sentinel moved
beyond its own noise is marked `drifted`. It never rescales a timing (two sentinels taken before rounds of the
same epoch did not predict the epochs that followed: issue 26). Training path: torch, numpy and PIL only.
"""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime

import numpy as np
import torch

from gpuscale.contract.conditions import COMPONENTS
from gpuscale.measure import devices

REPEATS = 3
_IMAGES = 512  # per repeat of the one-process pipeline
_WORKER_BATCHES = 8  # batches per repeat of the worker pipeline (after the workers started)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _summary(name: str, values: list[float]) -> dict:
    unit, faster, _ = COMPONENTS[name]
    median = statistics.median(values)
    spread = (max(values) - min(values)) / median if median else None
    return {"value": median, "unit": unit, "faster": faster, "spread": spread, "repeats": len(values)}


def _fixed_images(count: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, size=(count, 32, 32, 3), dtype=np.uint8)


def _memory_bandwidth() -> list[float]:
    source = np.ones(64 << 20, dtype=np.uint8)
    target = np.empty_like(source)
    np.copyto(target, source)  # first touch of the target's pages
    rates = []
    for _ in range(REPEATS + 2):
        start = time.perf_counter()
        np.copyto(target, source)
        rates.append(2 * source.nbytes / (time.perf_counter() - start))
    return rates


def _pipeline_one_process(train) -> list[float]:
    from PIL import Image

    from gpuscale.measure import loaders

    transform, _ = loaders.paper_transforms(train)
    images = _fixed_images(_IMAGES)
    for image in images[:64]:  # first calls: imports, caches
        transform(Image.fromarray(image))
    rates = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for image in images:
            transform(Image.fromarray(image))
        rates.append(len(images) / (time.perf_counter() - start))
    return rates


def _pipeline_workers(train, device: torch.device) -> list[float]:
    """images/s of the configured DataLoader (workers, pinning), worker start-up excluded; one repeat per chunk
    of batches of one loader. With no workers configured it is the one-process pipeline batched and collated."""
    from gpuscale.measure import loaders

    batch = train.batch_size
    count = batch * (1 + _WORKER_BATCHES * REPEATS)
    loader = loaders.synthetic_host_loader(count, train, device, "sentinel synthetic")
    batches = iter(loader)
    next(batches)  # worker start-up is not the pipeline's rate
    rates = []
    for _ in range(REPEATS):
        start, seen = time.perf_counter(), 0
        for _ in range(_WORKER_BATCHES):
            seen += next(batches)[0].shape[0]
        rates.append(seen / (time.perf_counter() - start))
    del batches  # ends the workers
    return rates


def _gpu_launch(device: torch.device) -> list[float]:
    x = torch.ones(16, device=device)
    ops = 200

    def chain():
        for _ in range(ops):
            x.mul_(1.0)

    chain()
    devices.of(device).synchronize(device)
    out = []
    for _ in range(REPEATS + 2):
        start = time.perf_counter()
        chain()
        devices.of(device).synchronize(device)
        out.append((time.perf_counter() - start) / ops)
    return out


def measure(train, device: torch.device) -> dict:
    """One sentinel on `device` (a torch.device) with the train settings' transforms, loader and batch size.
    About a second on a CPU, a little more on a GPU (the loader's workers start)."""
    wall = time.perf_counter()
    taken_at = _now()
    threads = torch.get_num_threads()
    results = {
        "memory_bandwidth": _memory_bandwidth(),
        "pipeline_one_process": _pipeline_one_process(train),
        "pipeline_workers": _pipeline_workers(train, device),
    }
    if devices.of(device).launch_witness:
        results["gpu_launch"] = _gpu_launch(device)
    return {
        "device": device.type,
        "threads": threads,
        "loader_workers": train.loader.num_workers,
        "taken_at": taken_at,
        "seconds": time.perf_counter() - wall,
        "components": {name: _summary(name, values) for name, values in results.items()},
    }
