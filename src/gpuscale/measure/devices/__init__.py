"""The torch side of each device kind: one module per kind (cpu.py, cuda.py, mps.py), loaded when a run asks.

A kind's module holds a `Device` subclass, `DEVICE`, saying only what differs from the defaults below (a host
device's: nothing to wait for, perf_counter stamps, no GPU facts). The rest of measure asks `of(device)` and never
names a kind. The registry is gpuscale.devices (torch-free: one line per kind, naming this module).
"""

from __future__ import annotations

import functools
import importlib
import time

import torch

from gpuscale import devices as kinds
from gpuscale.measure import energy, envinfo


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


@functools.cache
def _load(kind: kinds.Kind) -> Device:
    return importlib.import_module(kind.module).DEVICE(kind)


def of(device) -> Device:
    """The kind of a device (a torch.device's type, or that of whatever a kind's `torch_device` gave) or of a name."""
    return _load(kinds.get(getattr(device, "type", device)))


def environment(device) -> dict:
    """envinfo.capture's machine and software, with the facts of `device`'s kind (environment.gpu)."""
    return envinfo.capture(of(device).environment(device))
