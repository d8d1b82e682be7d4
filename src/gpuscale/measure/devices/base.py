"""The base of a device kind's torch side: the defaults every kind has unless its module says otherwise."""

from __future__ import annotations

import time

import torch

from gpuscale import devices as kinds
from gpuscale.measure import energy


class Stamps:
    """Five time stamps around a step's phases; `spans()` once the device was synchronised. perf_counter here."""

    def __init__(self, count: int = 5):
        self.marks = [0.0] * count

    def __call__(self, i: int) -> None:
        self.marks[i] = time.perf_counter()

    def spans(self) -> list[float]:
        """Seconds between consecutive stamps."""
        return [b - a for a, b in zip(self.marks, self.marks[1:], strict=False)]


class Device:
    """What a kind does with torch; each method gets the run's torch.device where it needs one."""

    clock = "perf_counter"  # how an epoch's clock is read (the record's timing.clock)
    phase_clock = "perf_counter"  # how the phase profile's stamps are taken (phase_profile.clock)
    pins_memory = False  # loaders pin host memory for copies to it; the probe times such copies
    graphs = False  # CUDA graphs: compile reduce-overhead runs as asked, else uncompiled
    launch_witness = False  # the sentinel times its kernel launches
    process_group = "gloo"  # the backend of its data-parallel processes

    def __init__(self, facts: kinds.Kind):
        self.facts = facts  # the kind's line in gpuscale.devices

    def torch_device(self, index: int | None) -> torch.device:
        name = self.facts.name
        return torch.device(name) if index is None else torch.device(name, index)

    def unavailable(self, device) -> str | None:
        """Why this host cannot run on `device`, or None."""
        return None

    def unavailable_processes(self, spec: str, world: int) -> str | None:
        """Why this host cannot run `world` data-parallel processes of this kind, or None."""
        return None

    def process_device(self, local_rank: int) -> torch.device:
        """The device one data-parallel process trains on."""
        return torch.device(self.facts.name)

    def join(self, local_rank: int) -> None:
        """Pin a data-parallel process to its device, before the process group forms."""

    def parallel_device_ids(self, device) -> list[int] | None:
        """DistributedDataParallel's device_ids for a process on `device`."""
        return None

    def synchronize(self, device) -> None:
        """Wait for everything queued on `device` (before every clock read)."""

    def stamps(self) -> Stamps:
        return Stamps()

    def autocast_ok(self, dtype: torch.dtype) -> bool:
        return True

    def grad_scaler(self, dtype: torch.dtype):
        """The gradient scaler autocast at `dtype` needs here, or None."""
        return None

    def precision(self, precision: str) -> dict:
        """Set the kind's own precision switches for a variant's `precision`; what is in effect (variant.effective)."""
        return {}

    def environment(self, device) -> dict | None:
        """The record's environment.gpu: the accelerator a run on `device` uses; None on a host device."""
        return None

    def energy_meter(self, device) -> energy.Meter:
        meter = energy.Meter()
        meter.reason = "no GPU in this run"
        return meter
