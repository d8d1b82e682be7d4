"""Energy counters: NVML's GPU energy counter and the CPU package counters of RAPL (/sys/class/powercap).

Each meter reports joules between two readings, or says why it cannot; never a made-up number.
"""

from __future__ import annotations

from pathlib import Path

RAPL_ROOT = Path("/sys/class/powercap")


class Meter:
    """Cumulative energy of one device; `read()` returns joules since an arbitrary origin."""

    name = "none"

    def __init__(self):
        self.available = False
        self.reason: str | None = "not probed"

    def read(self) -> float | None:
        return None

    def describe(self) -> dict:
        return {"available": self.available, "source": self.name, "reason": None if self.available else self.reason}


class NvmlMeter(Meter):
    name = "nvml total energy consumption"

    def __init__(self, index: int):
        super().__init__()
        try:
            import pynvml
        except ImportError:
            self.reason = "nvidia-ml-py (pynvml) is not installed"
            return
        try:
            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
        except pynvml.NVMLError as err:
            self.reason = f"NVML energy counter unavailable: {err}"
            return
        self._pynvml = pynvml
        self.available, self.reason = True, None

    def read(self) -> float | None:
        if not self.available:
            return None
        return self._pynvml.nvmlDeviceGetTotalEnergyConsumption(self._handle) / 1000.0  # mJ -> J


class RaplMeter(Meter):
    """Sum of the CPU package domains (intel-rapl:N, or AMD's equivalent exposed the same way)."""

    name = "rapl package energy"

    def __init__(self, root: Path = RAPL_ROOT):
        super().__init__()
        if not root.exists():
            self.reason = f"{root} does not exist (no RAPL powercap interface on this host)"
            return
        self._domains = []
        for domain in sorted(root.glob("intel-rapl:*")):
            if domain.name.count(":") != 1:
                continue  # sub-domains (core, uncore, dram) are inside the package figure
            energy, limit = domain / "energy_uj", domain / "max_energy_range_uj"
            try:
                int(energy.read_text())
                self._domains.append((energy, int(limit.read_text()) if limit.exists() else None))
            except (OSError, ValueError) as err:
                self.reason = f"{energy} is not readable ({getattr(err, 'strerror', err)}); RAPL needs read access"
                return
        if not self._domains:
            self.reason = f"no package domain under {root}"
            return
        self._last = [int(e.read_text()) for e, _ in self._domains]
        self._total = 0.0
        self.available, self.reason = True, None

    def read(self) -> float | None:
        if not self.available:
            return None
        for i, (energy, limit) in enumerate(self._domains):
            now = int(energy.read_text())
            delta = now - self._last[i]
            if delta < 0 and limit:  # the counter wrapped
                delta += limit
            self._total += delta / 1e6
            self._last[i] = now
        return self._total


def gpu_meter(device) -> Meter:
    if getattr(device, "type", None) != "cuda":
        meter = Meter()
        meter.reason = "no GPU in this run"
        return meter
    return NvmlMeter(device.index or 0)


def cpu_meter() -> Meter:
    return RaplMeter()
