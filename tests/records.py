"""Hand-written run records with known numbers, for aggregation and report tests.

These are test fixtures, not measurements: every one says so in its label.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from gpuscale.contract import record

PARAMS = {"simplecnn": 554_474, "resnet18": 11_181_642, "resnet50": 23_528_522}
FLOPS = {"simplecnn": 62_900_000, "resnet18": 217_300_000, "resnet50": 495_800_000}
# a study's speedups and CPU seconds per epoch, near the paper's
SPEEDUPS = {"simplecnn": 2.0, "resnet18": 7.5, "resnet50": 40.0}
CPU_EPOCH = {"simplecnn": 12.0, "resnet18": 45.0, "resnet50": 500.0}
# a loader-bound GPU: its epochs stay near 8 s whatever the CPU takes, so an Amdahl fit finds s but not k
LOADER_BOUND_GPU_EPOCH = {"simplecnn": 9.6, "resnet18": 6.9, "resnet50": 8.5}


def make(
    model: str,
    device: str,
    epoch_seconds: list[float],
    accuracy: float = 0.5,
    seed: int = 0,
    variant: str = "paper",
    host: str = "testhost",
    started: str = "2026-01-01T00:00:00+00:00",
    finished: str = "2026-01-01T00:01:00+00:00",
    synthetic: bool = False,
    label: str = "hand-written test record",
    status: str = "measured",
    lease: str | None = None,
    round_: int = 1,
) -> dict:
    """A record; `lease` sets its boot id and conditions (without one, a record read as made before schema 4:
    lease unknown), `round_` its round of the study."""
    images = 1000
    epochs = (
        [
            {
                "epoch": i + 1,
                "warmup": i == 0,
                "train_seconds": s,
                "eval_seconds": 0.1,
                "train_images": images,
                "steps": 8,
                "images_per_second": images / s,
                "train_loss": 1.0,
                "train_accuracy": 0.5,
                "test_loss": 1.0,
                "test_accuracy": accuracy,
                "learning_rate": 0.001,
            }
            for i, s in enumerate(epoch_seconds)
        ]
        if status == "measured"
        else []
    )
    total = sum(epoch_seconds)
    steady = epoch_seconds[1:]
    gpu = {"index": 0, "name": "Test GPU", "driver_version": "1.0"} if device != "cpu" else None
    rec = {
        "schema_version": record.SCHEMA_VERSION,
        "kind": record.KIND,
        "status": status,
        "not_measured_reason": None if status == "measured" else "no CUDA GPU on this host (test)",
        "key": {"model": model, "device": device, "variant": variant, "seed": seed},
        "label": label,
        "settings": {"train": {"epochs": len(epoch_seconds), "batch_size": 128}},
        "model": {
            "name": model,
            "description": "test",
            "parameters": PARAMS[model],
            "forward_flops_per_image": FLOPS[model] // 3,
            "train_flops_per_image": FLOPS[model],
        },
        "data": {
            "source": "synthetic" if synthetic else "cifar10",
            "synthetic": synthetic,
            "manifest_sha256": "a" * 64,
            "train_images": images,
            "test_images": 100,
            "classes": [str(i) for i in range(10)],
        },
        "environment": {
            "host": host,
            "host_fingerprint": "f" * 16,
            "cpu_model": "Test CPU",
            "cpu_logical_cores": 8,
            "torch_threads": 8,
            "gpu": gpu,
            "torch_version": "2.14.1",
            "torchvision_version": "0.29.1",
            "cuda_version": None,
            "cudnn_version": None,
            "git": {"commit": "0" * 40},
        },
        "timing": {
            "clock": "test",
            "total_train_seconds": total,
            "warmup_epoch_seconds": epoch_seconds[0],
            "steady_epoch_seconds_mean": sum(steady) / len(steady) if steady else None,
            "steady_epoch_seconds_median": sorted(steady)[len(steady) // 2] if steady else None,
            "total_eval_seconds": 0.1 * len(epoch_seconds),
            "train_images_per_second": images * len(epoch_seconds) / total,
            "steady_images_per_second": images * len(steady) / sum(steady) if steady else None,
            "setup_seconds": 1.0,
            "wall_seconds": total + 2,
            "extrapolated": False,
        }
        if status == "measured"
        else None,
        "epochs": epochs,
        "quality": {"final_test_accuracy": accuracy, "final_test_loss": 1.0, "best_test_accuracy": accuracy}
        if status == "measured"
        else None,
        "started_at": started,
        "finished_at": finished,
        "process": {"pid": 1, "argv": ["test"], "resumed": False},
    }
    if round_ != 1:
        rec["key"]["round"] = round_
    return in_lease(rec, lease) if lease is not None else rec


def sentinel(values: dict[str, float], device: str = "cpu", spread: float = 0.01) -> dict:
    """A hand-made sentinel (gpuscale.measure.sentinel's shape) with the given component values."""
    units = {
        "gpu_launch": ("s/op", "lower"),
        "memory_bandwidth": ("bytes/s", "higher"),
        "cpu_training": ("FLOP/s", "higher"),
    }
    return {
        "device": device,
        "threads": 8,
        "loader_workers": 2,
        "taken_at": "2026-01-01T00:00:00+00:00",
        "seconds": 2.0,
        "components": {
            name: {
                "value": value,
                "unit": units.get(name, ("images/s", "higher"))[0],
                "faster": units.get(name, ("images/s", "higher"))[1],
                "spread": spread,
                "repeats": 3,
            }
            for name, value in values.items()
        },
    }


def in_lease(rec: dict, lease: str, before: dict | None = None, after: dict | None = None, drifted=None) -> dict:
    """The record measured in `lease` (its boot id), with the sentinels given."""
    rec["environment"]["boot_id"] = lease
    rec["conditions"] = {"lease": lease, "before": before, "after": after, "drifted": drifted, "drift": {}}
    return rec


def write(root: Path, rec: dict) -> Path:
    k = rec["key"]
    sweep = f"{k['sweep']['parameter']}{k['sweep']['value']}-" if k.get("sweep") else ""
    name = f"{sweep}{k['variant']}-seed{k['seed']}{record.round_suffix(k.get('round', 1))}.json"
    path = Path(root) / k["model"] / k["device"] / name
    path.parent.mkdir(parents=True, exist_ok=True)
    record.validate(rec, str(path))
    path.write_text(json.dumps(rec))
    return path


def study(
    root: Path, speedups: dict[str, float], cpu_epoch: dict[str, float], accuracy_gap: float = 0.0, **kwargs
) -> list[Path]:
    """CPU and GPU records per model, two epochs each, with the given speedups (CPU/GPU seconds per epoch)."""
    paths = []
    for model, speedup in speedups.items():
        cpu = cpu_epoch[model]
        paths.append(write(root, make(model, "cpu", [cpu, cpu], accuracy=0.6, **kwargs)))
        gpu_kwargs = dict(kwargs)
        if "started" not in kwargs:
            gpu_kwargs.update(started="2026-01-01T00:02:00+00:00", finished="2026-01-01T00:03:00+00:00")
        paths.append(write(root, make(model, "cuda", [cpu / speedup] * 2, accuracy=0.6 + accuracy_gap, **gpu_kwargs)))
    return paths


def loader_bound_study(root: Path) -> list[Path]:
    """`study` with the GPU epochs of LOADER_BOUND_GPU_EPOCH."""
    return study(root, {m: CPU_EPOCH[m] / gpu for m, gpu in LOADER_BOUND_GPU_EPOCH.items()}, CPU_EPOCH)


def clone(rec: dict, **changes) -> dict:
    out = copy.deepcopy(rec)
    out.update(changes)
    return out
