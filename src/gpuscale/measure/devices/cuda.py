"""NVIDIA GPUs through CUDA: CUDA events time a step's phases, TF32 follows the variant's precision, fp16 needs a
gradient scaler, NVML counts energy and names the card, NCCL joins data-parallel processes."""

from __future__ import annotations

import torch

from gpuscale.measure import energy, envinfo
from gpuscale.measure.devices.base import Device, Stamps


class Events(Stamps):
    """The stamps as CUDA events: recorded in the stream, read after a synchronise (no host sync per stamp)."""

    def __init__(self, count: int = 5):
        self.marks = [torch.cuda.Event(enable_timing=True) for _ in range(count)]

    def __call__(self, i: int) -> None:
        self.marks[i].record()

    def spans(self) -> list[float]:
        return [a.elapsed_time(b) / 1000.0 for a, b in zip(self.marks, self.marks[1:], strict=False)]


class Cuda(Device):
    clock = "perf_counter after torch.cuda.synchronize"
    phase_clock = "cuda events (data wait: perf_counter)"
    pins_memory = True
    graphs = True
    launch_witness = True
    process_group = "nccl"

    def unavailable(self, device) -> str | None:
        if not torch.cuda.is_available():
            # a GPU this torch cannot use (driver too old for the build, or a CPU build) is named, with the fix
            return envinfo.cuda_mismatch() or "no CUDA GPU on this host (torch.cuda.is_available() is False)"
        index = device.index or 0
        if index >= torch.cuda.device_count():
            return f"this host has {torch.cuda.device_count()} CUDA GPU(s); cuda-{index} does not exist"
        return None

    def unavailable_processes(self, spec: str, world: int) -> str | None:
        reason = self.unavailable(torch.device("cuda", 0))
        if reason is None and torch.cuda.device_count() < world:
            reason = f"{spec} needs {world} CUDA GPUs; this host has {torch.cuda.device_count()}"
        return reason

    def process_device(self, local_rank: int) -> torch.device:
        return torch.device("cuda", local_rank)

    def join(self, local_rank: int) -> None:
        torch.cuda.set_device(local_rank)

    def parallel_device_ids(self, device) -> list[int]:
        return [device.index]

    def synchronize(self, device) -> None:
        torch.cuda.synchronize(device)

    def stamps(self) -> Stamps:
        return Events()

    def grad_scaler(self, dtype: torch.dtype):
        return torch.amp.GradScaler("cuda") if dtype == torch.float16 else None

    def precision(self, precision: str) -> dict:
        if precision == "fp32":  # strict fp32: no TF32 anywhere
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        elif precision in ("tf32", "bf16", "fp16"):
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        # "default": PyTorch's own (TF32 convolutions, fp32 matmuls)
        return {"matmul_tf32": torch.backends.cuda.matmul.allow_tf32, "cudnn_tf32": torch.backends.cudnn.allow_tf32}

    def environment(self, device) -> dict:
        index = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        driver = envinfo.nvidia_driver() or {}
        return {
            "index": index,
            "name": props.name,
            "memory_bytes": int(props.total_memory),
            "multiprocessors": int(props.multi_processor_count),
            "compute_capability": f"{props.major}.{props.minor}",
            "count_on_host": torch.cuda.device_count(),
            "driver_version": driver.get("driver_version"),
            "cuda_driver_version": driver.get("cuda_driver_version"),
            "nvml": envinfo.nvml_gpu(index),
        }

    def energy_meter(self, device) -> energy.Meter:
        return energy.NvmlMeter(device.index or 0)


DEVICE = Cuda
