"""Epoch checkpoints for `runtime.resume: true`: one safetensors file per run, written atomically after every
completed epoch, removed once the record is written.

Tensors (weights, optimizer state, random-generator states) go in as tensors, everything else (epochs timed so
far, which process timed them, scheduler state) as JSON in the file's metadata: nothing is pickled, so nothing
is unpickled on resume. A checkpoint is only resumed on the host, with the settings and the data it was made
with; otherwise it is set aside with a warning and the run starts over.
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, safe_open, save_file

from gpuscale.contract import fsutil

log = logging.getLogger("gpuscale.checkpoint")

VERSION = 2  # 2: the identity holds everything that changes timing (threads, library versions, GPU)
# What of a run's environment changes its timing: a checkpoint is resumed only where all of it is the same, so
# a record never stitches epochs timed under different conditions while claiming one.
TIMING_ENVIRONMENT = (
    "torch_threads",
    "torch_version",
    "torchvision_version",
    "cuda_version",
    "cudnn_version",
    "cpu_model",
    "cpu_logical_cores",
)


def path_for(record_path: Path | str) -> Path:
    """Hidden, beside the record: never mistaken for a record (aggregation reads *.json only)."""
    record_path = Path(record_path)
    return record_path.with_name(f".{record_path.stem}.ckpt.safetensors")


def identity(*, host_fingerprint: str, settings: dict, manifest_sha256: str, environment: dict) -> dict:
    """A run's checkpoint identity: host, settings, data and every environment figure that changes timing.

    Flat, so a mismatch names the very figure that differs (e.g. torch_threads)."""
    gpu = environment.get("gpu") or {}
    return {
        "host_fingerprint": host_fingerprint,
        "settings_sha256": hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest(),
        "manifest_sha256": manifest_sha256,
        **{key: environment.get(key) for key in TIMING_ENVIRONMENT},
        "gpu_name": gpu.get("name"),
        "gpu_index": gpu.get("index"),
        "gpu_driver_version": gpu.get("driver_version"),
        "python_version": platform.python_version(),
    }


def discard(record_path: Path | str, reason: str) -> None:
    """Remove a run's checkpoint that will never be resumed (resume off, or the run finished)."""
    path = path_for(record_path)
    if path.exists():
        path.unlink(missing_ok=True)
        log.info("removed checkpoint %s (%s)", path, reason)


def _module(model: torch.nn.Module) -> torch.nn.Module:
    return getattr(model, "_orig_mod", model)  # torch.compile wraps the module


def save(
    path: Path,
    *,
    model,
    optimizer,
    scheduler,
    scaler,
    generators: list[torch.Generator],
    identity: dict,
    epochs: list[dict],
    segments: list[dict],
) -> None:
    tensors: dict[str, torch.Tensor] = {
        f"model/{k}": v.detach().cpu().contiguous() for k, v in _module(model).state_dict().items()
    }
    optim = optimizer.state_dict()
    scalars: dict[str, dict] = {}
    for index, state in optim["state"].items():
        for name, value in state.items():
            if torch.is_tensor(value):
                tensors[f"optim/{index}/{name}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(index), {})[name] = value
    tensors["rng/torch"] = torch.get_rng_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        tensors["rng/cuda"] = torch.cuda.get_rng_state()
    for i, generator in enumerate(generators):
        tensors[f"rng/generator{i}"] = generator.get_state()
    meta = {
        "version": VERSION,
        "identity": identity,
        "epochs": epochs,
        "segments": segments,
        "param_groups": optim["param_groups"],
        "optimizer_scalars": scalars,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "scaler": scaler.state_dict() if scaler is not None else None,
    }
    with fsutil.atomic_path(path, suffix=".safetensors") as tmp:
        save_file(tensors, str(tmp), metadata={"gpuscale": json.dumps(meta)})


def read_meta(path: Path) -> dict | None:
    """The checkpoint's JSON part, or None where there is no readable checkpoint."""
    if not path.exists():
        return None
    try:
        with safe_open(str(path), framework="pt") as handle:
            return json.loads(handle.metadata()["gpuscale"])
    except (OSError, KeyError, ValueError, SafetensorError) as err:  # damaged: set aside, never trusted
        log.warning("checkpoint %s is unreadable (%s): starting over", path, err)
        return None


def usable(path: Path, identity: dict) -> dict | None:
    """The checkpoint's metadata if it may be resumed for this run (same version, host, settings and data)."""
    meta = read_meta(path)
    if meta is None:
        return None
    if meta.get("version") != VERSION or meta.get("identity") != identity:
        differs = sorted(k for k in identity if (meta.get("identity") or {}).get(k) != identity[k])
        log.warning("checkpoint %s was made with another %s: starting over", path, ", ".join(differs) or "version")
        return None
    return meta


def restore(path: Path, meta: dict, *, model, optimizer, scheduler, scaler, generators: list[torch.Generator]) -> None:
    tensors = load_file(str(path))
    _module(model).load_state_dict({k[len("model/") :]: v for k, v in tensors.items() if k.startswith("model/")})
    state: dict[int, dict] = {}
    for key, value in tensors.items():
        if key.startswith("optim/"):
            _, index, name = key.split("/", 2)
            state.setdefault(int(index), {})[name] = value
    for index, values in meta["optimizer_scalars"].items():
        state.setdefault(int(index), {}).update(values)
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    if scheduler is not None and meta["scheduler"] is not None:
        scheduler.load_state_dict(meta["scheduler"])
    if scaler is not None and meta["scaler"] is not None:
        scaler.load_state_dict(meta["scaler"])
    torch.set_rng_state(tensors["rng/torch"])
    if "rng/cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["rng/cuda"])
    for i, generator in enumerate(generators):
        generator.set_state(tensors[f"rng/generator{i}"])
