"""What machine and software a timing came from.

`host_fingerprint()` is torch-free and fast (the Snakefile calls it at parse time);
`capture()` imports torch and is called by the training stage only.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path


def _run(argv: list[str], timeout: float = 10.0) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@functools.cache
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        brand = _run(["sysctl", "-n", "machdep.cpu.brand_string"])
        if brand:
            return brand
    return platform.processor() or platform.machine()


def memory_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


@functools.cache
def gpu_names() -> tuple[str, ...]:
    """Names of the NVIDIA GPUs this host shows (nvidia-smi), in index order; () when none."""
    out = _run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
    return tuple(line.strip() for line in out.splitlines() if line.strip()) if out else ()


def hardware() -> dict:
    return {
        "cpu_model": cpu_model(),
        "cpu_logical_cores": os.cpu_count(),
        "machine": platform.machine(),
        "system": platform.system(),
        "gpus": list(gpu_names()),
    }


def host_fingerprint() -> str:
    """A short hash of the hardware that decides a timing: CPU model and cores, GPU models.

    Part of every training stage's inputs, so records made on one machine are never taken as
    up to date on a machine with other hardware.
    """
    text = json.dumps(hardware(), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def git_commit(cwd: Path | None = None) -> dict:
    """The project's commit; GPUSCALE_GIT_COMMIT wins where the tree travelled without .git."""
    env_commit = os.environ.get("GPUSCALE_GIT_COMMIT")
    if env_commit:
        return {"commit": env_commit, "dirty": None, "source": "GPUSCALE_GIT_COMMIT"}
    here = cwd or Path(__file__).resolve().parent
    commit = _run(["git", "-C", str(here), "rev-parse", "HEAD"])
    if commit is None:
        return {"commit": None, "dirty": None, "source": "no git checkout"}
    status = _run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"])
    return {"commit": commit, "dirty": bool(status), "source": "git"}


def _nvml_driver() -> str | None:
    try:
        import pynvml
    except ImportError:
        return _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    try:
        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else version
        finally:
            pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        return None


def capture(device) -> dict:
    """The environment of a run on `device` (a torch.device)."""
    import numpy
    import torch
    import torchvision

    try:
        import psutil

        physical = psutil.cpu_count(logical=False)
    except ImportError:
        physical = None
    gpu = None
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        gpu = {
            "index": index,
            "name": props.name,
            "memory_bytes": int(props.total_memory),
            "multiprocessors": int(props.multi_processor_count),
            "compute_capability": f"{props.major}.{props.minor}",
            "count_on_host": torch.cuda.device_count(),
            "driver_version": _nvml_driver(),
        }
    elif device.type == "mps":
        gpu = {
            "index": 0,
            "name": "Apple MPS",
            "memory_bytes": None,
            "multiprocessors": None,
            "compute_capability": None,
            "count_on_host": 1,
            "driver_version": None,
        }
    return {
        "host": socket.gethostname(),
        "host_fingerprint": host_fingerprint(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_logical_cores": os.cpu_count(),
        "cpu_physical_cores": physical,
        "memory_bytes": memory_bytes(),
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "gpu": gpu,
        "torch_version": torch.__version__,
        "torchvision_version": torchvision.__version__,
        "numpy_version": numpy.__version__,
        "cuda_version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "git": git_commit(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
    }
