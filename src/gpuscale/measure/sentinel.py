"""The sentinel: a fixed micro-measurement of the machine state a study's timings depend on, a witness, never a
correction.

A few seconds before and after every timing job (and around every probe) it measures, on the same inputs each
time, what the epochs lean on: the host input pipeline of the `paper` variant (images/s through the configured
per-sample transforms, in one process and at the configured loader workers), dense training arithmetic at the
job's threads and the memory bandwidth of one core; on a GPU also the cost of one small launched op, a large
matrix product and host-to-device copies. Each component is the median of a few repeats with its own spread.

It records a level: two leases of one machine kind are told apart by it, and a job whose after-sentinel moved
beyond its own noise is marked `drifted`. It never rescales a timing (two sentinels taken before rounds of the
same epoch did not predict the epochs that followed: issue 26). Training path: torch, numpy and PIL only.
"""

from __future__ import annotations

import math
import statistics
import time
from datetime import UTC, datetime

import numpy as np
import torch
from torch import nn

# Each component: (unit, what a larger value means). Values are stored in base units (images/s, FLOP/s,
# bytes/s, seconds); `faster` says which direction is a faster machine, so a drift ratio reads the same way.
COMPONENTS = {
    "pipeline_one_process": ("images/s", "higher", "host input pipeline, per-sample transforms in one process"),
    "pipeline_workers": ("images/s", "higher", "host input pipeline at the configured loader workers"),
    "cpu_training": ("FLOP/s", "higher", "dense training step (conv, forward + backward) at the job's threads"),
    "memory_bandwidth": ("bytes/s", "higher", "one core copying 64 MiB (bytes read + written)"),
    "gpu_launch": ("s/op", "lower", "one small launched op (a chain of 200, synchronised)"),
    "gpu_matmul": ("FLOP/s", "higher", "4096 x 4096 float32 matrix product"),
    "host_to_device": ("bytes/s", "higher", "pinned 64 MiB host-to-device copy"),
}
HOST_COMPONENTS = ("pipeline_one_process", "pipeline_workers", "cpu_training", "memory_bandwidth")
GPU_COMPONENTS = ("gpu_launch", "gpu_matmul", "host_to_device")
REPEATS = 3
# A component drifted when after/before moved by more than DRIFT_NOISE_FACTOR times the larger of the two
# sentinels' own spreads, and by at least DRIFT_FLOOR (a sentinel whose repeats agree to 0.1% would else flag
# every ordinary wobble).
DRIFT_NOISE_FACTOR = 2.0
DRIFT_FLOOR = 0.05
_IMAGES = 512  # per repeat of the one-process pipeline
_WORKER_BATCHES = 8  # batches per repeat of the worker pipeline (after the workers started)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _summary(values: list[float], unit: str, faster: str) -> dict:
    median = statistics.median(values)
    spread = (max(values) - min(values)) / median if median else None
    return {"value": median, "unit": unit, "faster": faster, "spread": spread, "repeats": len(values)}


def _fixed_images(count: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, size=(count, 32, 32, 3), dtype=np.uint8)


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
    from gpuscale.inputs import data as data_stage
    from gpuscale.measure import loaders

    batch = train.batch_size
    count = batch * (1 + _WORKER_BATCHES * REPEATS)
    dataset = data_stage.Dataset(
        train_images=_fixed_images(count),
        train_labels=np.arange(count, dtype=np.int64) % 10,
        test_images=np.zeros((1, 32, 32, 3), dtype=np.uint8),
        test_labels=np.zeros(1, dtype=np.int64),
        classes=tuple(str(i) for i in range(10)),
        source={"source": "sentinel synthetic"},
    )
    loader, _ = loaders.host_loaders(dataset, train, device, seed=0)
    batches = iter(loader)
    next(batches)  # worker start-up is not the pipeline's rate
    rates = []
    for _ in range(REPEATS):
        start, seen = time.perf_counter(), 0
        for _ in range(_WORKER_BATCHES):
            seen += next(batches)[0].shape[0]
        rates.append(seen / (time.perf_counter() - start))
    del batches
    return rates


_CONV = (32, 64, 64, 32)  # batch, in channels, out channels, size: one 3x3 convolution trained


def _cpu_training() -> list[float]:
    batch, cin, cout, size = _CONV
    torch.manual_seed(0)
    layer = nn.Conv2d(cin, cout, 3, padding=1)
    x = torch.randn(batch, cin, size, size)
    flops = 3 * 2 * batch * cout * size * size * cin * 9  # forward, input gradient, weight gradient

    def step():
        layer(x).sum().backward()

    step()  # first calls: allocation, thread pool
    step()
    rates = []
    for _ in range(REPEATS + 2):
        start = time.perf_counter()
        for _ in range(2):
            step()
        rates.append(2 * flops / (time.perf_counter() - start))
    return rates


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


def _gpu_timed(step, device: torch.device, repeats: int = REPEATS, inner: int = 1) -> list[float]:
    """Seconds of `inner` calls of step, synchronised, `repeats` times after one warm-up."""
    step()
    torch.cuda.synchronize(device)
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            step()
        torch.cuda.synchronize(device)
        out.append((time.perf_counter() - start) / inner)
    return out


def _gpu_launch(device: torch.device) -> list[float]:
    x = torch.ones(16, device=device)
    ops = 200

    def chain():
        for _ in range(ops):
            x.mul_(1.0)

    return [seconds / ops for seconds in _gpu_timed(chain, device, repeats=REPEATS + 2)]


def _gpu_matmul(device: torch.device) -> list[float]:
    n = 4096
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, generator=generator)  # random, never zeros (METHOD.md)
    b = torch.randn(n, n, device=device, generator=generator)
    return [2 * n**3 / s for s in _gpu_timed(lambda: torch.mm(a, b), device, inner=5)]


def _host_to_device(device: torch.device) -> list[float]:
    source = torch.ones(64 << 20, dtype=torch.uint8).pin_memory()
    target = torch.empty_like(source, device=device)
    return [source.numel() / s for s in _gpu_timed(lambda: target.copy_(source, non_blocking=True), device, inner=3)]


def measure(train, device: torch.device) -> dict:
    """One sentinel on `device` (a torch.device) with the train settings' transforms, loader and batch size; the
    CPU arithmetic runs at torch's current threads (the job's). About 1-3 s."""
    wall = time.perf_counter()
    taken_at = _now()
    results = {
        "pipeline_one_process": _pipeline_one_process(train),
        "pipeline_workers": _pipeline_workers(train, device),
        "cpu_training": _cpu_training(),
        "memory_bandwidth": _memory_bandwidth(),
    }
    if device.type == "cuda":
        results |= {
            "gpu_launch": _gpu_launch(device),
            "gpu_matmul": _gpu_matmul(device),
            "host_to_device": _host_to_device(device),
        }
    components = {name: _summary(values, *COMPONENTS[name][:2]) for name, values in results.items()}
    return {
        "device": device.type,
        "threads": torch.get_num_threads(),
        "loader_workers": train.loader.num_workers,
        "taken_at": taken_at,
        "seconds": time.perf_counter() - wall,
        "components": components,
    }


def drift(before: dict | None, after: dict | None) -> tuple[bool | None, dict]:
    """(drifted, {component: after/before as a speed ratio, >1 = the machine got faster}) for the components both
    sentinels have; drifted is None when either is missing. A component drifted when it moved by more than
    DRIFT_NOISE_FACTOR times the larger of its two spreads and by at least DRIFT_FLOOR."""
    if not before or not after:
        return None, {}
    ratios, drifted = {}, False
    for name, b in before["components"].items():
        a = after["components"].get(name)
        if a is None or not b["value"] or not a["value"]:
            continue
        ratio = a["value"] / b["value"]
        if b.get("faster", COMPONENTS.get(name, ("", "higher"))[1]) == "lower":
            ratio = 1 / ratio
        ratios[name] = ratio
        noise = max(b.get("spread") or 0.0, a.get("spread") or 0.0)
        if abs(ratio - 1) > max(DRIFT_FLOOR, DRIFT_NOISE_FACTOR * noise):
            drifted = True
    return drifted, ratios


def conditions(lease: str | None, before: dict | None, after: dict | None) -> dict:
    """A record's `conditions`: the lease it ran in (the boot id; 'unknown' without one), both sentinels and the
    drift between them."""
    drifted, ratios = drift(before, after)
    return {
        "lease": lease or "unknown",
        "before": before,
        "after": after,
        "drifted": drifted,
        "drift": ratios,
    }


def drift_line(cond: dict) -> str | None:
    """The warning a drifted job ends with, or None."""
    if not cond.get("drifted"):
        return None
    moved = ", ".join(
        f"{name} x{ratio:.2f}"
        for name, ratio in sorted(cond["drift"].items(), key=lambda kv: -abs(math.log(kv[1])))
        if abs(ratio - 1) > DRIFT_FLOOR
    )
    return (
        f"the machine state drifted during this job (sentinel after/before, >1 faster: {moved}); "
        "see the record's conditions"
    )


def format_value(name: str, value: float) -> str:
    unit = COMPONENTS[name][0]
    if unit == "images/s":
        return f"{value:,.0f} images/s"
    if unit == "FLOP/s":
        return f"{value / 1e12:.2f} TFLOP/s" if value >= 1e12 else f"{value / 1e9:.1f} GFLOP/s"
    if unit == "bytes/s":
        return f"{value / 1e9:.1f} GB/s"
    return f"{value * 1e6:.1f} us/op"


def table(doc: dict) -> str:
    """The sentinel as a small text table (`gpuscale sentinel`)."""
    rows = [("component", "median", "spread", "what")]
    for name, comp in doc["components"].items():
        spread = "-" if comp["spread"] is None else f"{100 * comp['spread']:.1f}%"
        rows.append((name, format_value(name, comp["value"]), spread, COMPONENTS[name][2]))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}" for r in rows]
    head = (
        f"sentinel on {doc['device']} ({doc['threads']} threads, {doc['loader_workers']} loader workers, "
        f"{doc['seconds']:.1f} s, median of {REPEATS}+ repeats; spread = (max - min) / median)"
    )
    return "\n".join([head, *lines])
