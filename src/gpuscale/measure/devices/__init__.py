"""The torch side of each device kind: one module per kind (cpu.py, cuda.py, mps.py), loaded when a run asks.

A kind's module holds a `base.Device` subclass, `DEVICE`, saying only what differs from the defaults (a host
device's: nothing to wait for, perf_counter stamps, no GPU facts). The rest of measure asks `of(device)` and never
names a kind. The registry is gpuscale.devices (torch-free: one line per kind, naming its module here); the
import below is for the stages' code dependencies (gpuscale.deps follows imports, not names).
"""

from __future__ import annotations

import functools
import importlib

from gpuscale import devices as kinds
from gpuscale.measure import envinfo
from gpuscale.measure.devices import cpu, cuda, mps  # noqa: F401 (loaded by name below; listed for gpuscale.deps)
from gpuscale.measure.devices.base import Device, Stamps  # noqa: F401 (what a kind's module subclasses)


@functools.cache
def _load(kind: kinds.Kind) -> Device:
    return importlib.import_module(kind.module).DEVICE(kind)


def of(device) -> Device:
    """The kind of a device (a torch.device's type, or that of whatever a kind's `torch_device` gave) or of a name."""
    return _load(kinds.get(getattr(device, "type", device)))


def environment(device) -> dict:
    """envinfo.capture's machine and software, with the facts of `device`'s kind (environment.gpu)."""
    return envinfo.capture(of(device).environment(device))
