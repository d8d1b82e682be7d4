"""What machine and software a timing came from.

`host_fingerprint()` and `cuda_mismatch()` are torch-free and fast (the Snakefile calls them at parse time);
`capture()` imports torch and is called by the training stage only (with its device kind's facts:
gpuscale.measure.devices.environment). Every source has a fallback: psutil, then
/proc or sysctl; NVML (nvidia-ml-py, the `energy` extra), then nvidia-smi; so the module works with the core alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import json
import os
import platform
import re
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
    """Total physical memory: psutil, else /proc/meminfo, else sysctl (macOS)."""
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except (ImportError, OSError):
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    size = _run(["sysctl", "-n", "hw.memsize"]) if sys.platform == "darwin" else None
    return int(size) if size and size.isdigit() else None


# The instruction-set extensions that decide which CPU kernels torch, oneDNN and MKL dispatch to.
SIMD_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "asimdhp",
    "sve",
    "sve2",
    "bf16",
    "i8mm",
)


@functools.cache
def cpu_flags() -> tuple[str, ...]:
    """The SIMD_FLAGS this CPU has (Linux /proc/cpuinfo, macOS sysctl); () where neither says."""
    have: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("flags", "features")):
                have.update(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    if not have and sys.platform == "darwin":
        for key in ("machdep.cpu.features", "machdep.cpu.leaf7_features"):
            have.update(word.lower().replace(".", "_") for word in (_run(["sysctl", "-n", key]) or "").split())
        if platform.machine() == "arm64":
            have.add("asimd")
    return tuple(flag for flag in SIMD_FLAGS if flag in have)


def _nvml():
    """pynvml, initialised, or None (not installed, no driver); callers shut it down with _nvml_done."""
    if not sys.platform.startswith("win"):
        try:  # the library pynvml loads there: without it, nvmlInit fails, and importing pynvml (8,000 lines,
            # in every Snakefile parse through host_fingerprint) is not worth it
            ctypes.CDLL("libnvidia-ml.so.1")
        except OSError:
            return None
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    return pynvml


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_call(function, *args):
    try:
        return function(*args)
    except Exception:  # NVMLError_NotSupported and kin: a fact this GPU or driver does not give
        return None


@functools.cache
def nvidia_driver() -> dict | None:
    """{driver_version, cuda_driver_version, gpus: [names]} of this host's NVIDIA driver (NVML, else
    nvidia-smi); None where there is none. cuda_driver_version is the newest CUDA the driver runs ("12.2")."""
    pynvml = _nvml()
    if pynvml is not None:
        try:
            count = pynvml.nvmlDeviceGetCount()
            cuda = _nvml_call(pynvml.nvmlSystemGetCudaDriverVersion)
            return {
                "driver_version": _text(pynvml.nvmlSystemGetDriverVersion()),
                "cuda_driver_version": f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None,
                "gpus": [_text(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)],
                "source": "nvml",
            }
        except pynvml.NVMLError:
            pass
        finally:
            _nvml_call(pynvml.nvmlShutdown)
    out = _run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    if not out:
        return None
    rows = [[cell.strip() for cell in line.split(",")] for line in out.splitlines() if line.strip()]
    header = _run(["nvidia-smi"]) or ""
    match = re.search(r"CUDA Version:\s*([0-9]+\.[0-9]+)", header)
    return {
        "driver_version": rows[0][-1] if rows else None,
        "cuda_driver_version": match.group(1) if match else None,
        "gpus": [row[0] for row in rows],
        "source": "nvidia-smi",
    }


def gpu_names() -> tuple[str, ...]:
    """Names of the NVIDIA GPUs this host shows (NVML, else nvidia-smi), in index order; () when none."""
    driver = nvidia_driver()
    return tuple(driver["gpus"]) if driver else ()


# The oldest Linux driver each CUDA major release runs on (NVIDIA's CUDA toolkit release notes, table 3).
MIN_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


def torch_cuda_build() -> tuple[str | None, str | None]:
    """(torch version, the CUDA it was built for or None for a CPU build), read without importing torch."""
    if "torch" in sys.modules:
        import torch

        return torch.__version__, torch.version.cuda
    import importlib.util

    found = importlib.util.find_spec("torch")
    if found is None or not found.submodule_search_locations:
        return None, None
    try:
        text = (Path(next(iter(found.submodule_search_locations))) / "version.py").read_text()
    except OSError:
        return None, None
    version = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", text, re.M)
    cuda = re.search(r"^cuda(?:\s*:[^=]+)?\s*=\s*['\"]([^'\"]+)", text, re.M)
    return (version.group(1) if version else None), (cuda.group(1) if cuda else None)


def cuda_mismatch() -> str | None:
    """One line naming the driver, the torch build and the fix, when this host has an NVIDIA GPU that this
    torch cannot use (a CPU build, or a CUDA build newer than the driver runs); None when they fit or no GPU."""
    driver = nvidia_driver()
    if not driver or not driver["gpus"]:
        return None
    torch_version, build = torch_cuda_build()
    if torch_version is None:
        return None
    gpu = f"{driver['gpus'][0]} (NVIDIA driver {driver['driver_version']})"
    if build is None:
        return (
            f"this host has an {gpu} but torch {torch_version} is a CPU-only build, so no GPU run can be measured;"
            " fix: reinstall torch's CUDA build (rm -r .venv && make install, or TORCH=cu126 etc.: docs/install.md)"
        )
    runs = driver.get("cuda_driver_version")
    if not runs:
        return None
    driver_major, build_major = int(runs.split(".")[0]), int(build.split(".")[0])
    if driver_major >= build_major:
        return None
    needs = MIN_DRIVER.get(build_major)
    return (
        f"this host's {gpu} runs CUDA up to {runs}, but torch {torch_version} is built for CUDA {build}"
        + (f" (needs driver >= {needs})" if needs else "")
        + f", so torch cannot use the GPU; fix: update the NVIDIA driver, or install a CUDA {driver_major} build of"
        f" torch (rm -r .venv && make install TORCH=cu{driver_major}x, e.g. cu126: docs/install.md)"
    )


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


def nvml_gpu(index: int) -> dict | None:
    """NVML's facts about GPU `index` (torch's index; CUDA_VISIBLE_DEVICES may renumber): None without NVML."""
    pynvml = _nvml()
    if pynvml is None:
        return None
    try:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        ids = [part.strip() for part in visible.split(",") if part.strip()]
        handle = None
        if ids and index < len(ids):
            which = ids[index]
            handle = (
                pynvml.nvmlDeviceGetHandleByIndex(int(which))
                if which.isdigit()
                else pynvml.nvmlDeviceGetHandleByUUID(which)
            )
        else:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        memory = _nvml_call(pynvml.nvmlDeviceGetMemoryInfo, handle)
        power = _nvml_call(pynvml.nvmlDeviceGetPowerManagementLimit, handle)
        return {
            "name": _text(pynvml.nvmlDeviceGetName(handle)),
            "memory_bytes": int(memory.total) if memory else None,
            "power_limit_watts": power / 1000 if power else None,
            "max_sm_clock_mhz": _nvml_call(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM),
            "max_memory_clock_mhz": _nvml_call(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_MEM),
            "pcie_generation": _nvml_call(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
            "pcie_width": _nvml_call(pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
            "persistence_mode": _nvml_call(pynvml.nvmlDeviceGetPersistenceMode, handle),
        }
    except (pynvml.NVMLError, ValueError):
        return None
    finally:
        _nvml_call(pynvml.nvmlShutdown)


def _config_value(text: str, key: str) -> str | None:
    match = re.search(rf"\b{re.escape(key)}=([^,\s]+)", text)
    return match.group(1) if match else None


def _line(text: str, pattern: str) -> str | None:
    match = re.search(pattern, text, re.M)
    return match.group(1).strip() if match else None


def torch_build(torch) -> dict:
    """How this torch computes on the CPU: BLAS/LAPACK, oneDNN, OpenMP, the dispatched SIMD level, threading.

    Parsed from torch.__config__.show() and parallel_info(), whose full text is kept too (the parse may
    miss a build that words it differently)."""
    show = _call_text(torch.__config__.show)
    parallel = _call_text(torch.__config__.parallel_info)
    capability = None
    with contextlib.suppress(Exception):
        capability = torch.backends.cpu.get_cpu_capability()
    env_threads = {
        name: os.environ.get(name) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
    }
    return {
        "blas": _config_value(show, "BLAS_INFO"),
        "lapack": _config_value(show, "LAPACK_INFO"),
        "mkl": _line(show, r"(Intel\(R\) (?:oneAPI )?Math Kernel Library Version [^\n]*?)(?: for |$)"),
        "onednn": _line(show, r"(?:MKL-DNN|oneDNN) (v[0-9.]+)"),
        "openmp": _line(show, r"- (OpenMP [0-9]+[^\n]*)"),
        "cpu_capability": capability,
        "mkldnn_enabled": bool(torch.backends.mkldnn.is_available()),
        "openmp_enabled": bool(torch.backends.openmp.is_available()),
        "parallel_backend": _line(parallel, r"ATen parallel backend:\s*(.+)$"),
        "omp_max_threads": _int(_line(parallel, r"omp_get_max_threads\(\)\s*:\s*(\d+)")),
        "mkl_max_threads": _int(_line(parallel, r"mkl_get_max_threads\(\)\s*:\s*(\d+)")),
        "thread_environment": env_threads,
        "config": show,
        "parallel_info": parallel,
    }


def _call_text(function) -> str:
    try:
        return str(function())
    except Exception:  # an unusual build without the call: the parsed fields stay None
        return ""


def _int(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None


BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boot_id() -> str | None:
    """This boot of the machine (Linux), or None: runs that share it ran in one boot, e.g. one lease of a rented
    GPU machine, whose host speed can differ from the next lease's while its fingerprint stays the same."""
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def capture(gpu: dict | None = None) -> dict:
    """The environment of a run: this machine and its software, and `gpu`, the accelerator it uses as its device
    kind describes it (gpuscale.measure.devices.environment gives it; None on a CPU)."""
    import numpy
    import torch
    import torchvision

    try:
        import psutil

        physical = psutil.cpu_count(logical=False)
    except ImportError:
        physical = None
    return {
        "host": socket.gethostname(),
        "host_fingerprint": host_fingerprint(),
        "boot_id": boot_id(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_logical_cores": os.cpu_count(),
        "cpu_physical_cores": physical,
        "memory_bytes": memory_bytes(),
        "cpu_flags": list(cpu_flags()),
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
        "torch_build": torch_build(torch),
    }
