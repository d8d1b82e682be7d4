"""Apple's GPU (Metal Performance Shaders): one device, synchronised through torch.mps, no NVML, no CUDA events."""

from __future__ import annotations

import torch

from gpuscale.measure.devices.base import Device


class Mps(Device):
    def unavailable(self, device) -> str | None:
        if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            return "no Apple MPS device on this host"
        return None

    def synchronize(self, device) -> None:
        torch.mps.synchronize()

    def environment(self, device) -> dict:
        return {
            "index": 0,
            "name": "Apple MPS",
            "memory_bytes": None,
            "multiprocessors": None,
            "compute_capability": None,
            "count_on_host": 1,
            "driver_version": None,
        }


DEVICE = Mps
