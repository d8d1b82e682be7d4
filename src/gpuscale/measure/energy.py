"""Energy counters: NVML's GPU energy counter and the CPU package counters of RAPL (/sys/class/powercap).

Each meter reports joules between two readings, or says why it cannot; never a made-up number. Which meter a run's
device has is its kind's (gpuscale.measure.devices: `energy_meter`).
"""

from __future__ import annotations

import threading
import time
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
    """Sum of the CPU package domains (intel-rapl:N, or AMD's equivalent exposed the same way).

    A RAPL counter wraps at max_energy_range_uj (about 262 kJ on many CPUs: every few minutes under load), and a
    reading can correct one wrap at most. So a sampling thread reads the counters every `poll_seconds`, far
    more often than the counter can wrap at `MAX_WATTS`; should two readings ever lie further apart than the
    shortest wrap period (a starved thread, a suspended process), the figure is marked unavailable with the
    reason rather than silently undercounted. A domain whose wrap range cannot be read is unavailable too.
    """

    name = "rapl package energy"
    POLL_SECONDS = 1.0
    MAX_WATTS = 1000.0  # per package: above any CPU's package power, so its wrap period is a safe lower bound

    def __init__(self, root: Path = RAPL_ROOT, poll_seconds: float | None = POLL_SECONDS, clock=time.monotonic):
        super().__init__()
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = False
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
            except (OSError, ValueError) as err:
                self.reason = f"{energy} is not readable ({getattr(err, 'strerror', err)}); RAPL needs read access"
                return
            try:
                wrap = int(limit.read_text())
            except (OSError, ValueError):
                self.reason = f"{limit} is not readable: the counter's wraps could not be corrected"
                return
            self._domains.append((energy, wrap))
        if not self._domains:
            self.reason = f"no package domain under {root}"
            return
        # the shortest time in which any counter could wrap at MAX_WATTS
        self.max_gap_seconds = min(wrap for _, wrap in self._domains) / 1e6 / self.MAX_WATTS
        self._last = [int(e.read_text()) for e, _ in self._domains]
        self._last_time = self._clock()
        self._total = 0.0
        self.available, self.reason, self._ready = True, None, True
        if poll_seconds:
            poll = min(poll_seconds, self.max_gap_seconds / 4)
            threading.Thread(target=self._sample, args=(poll,), name="gpuscale-rapl", daemon=True).start()

    def _sample(self, poll: float) -> None:
        while not self._stop.wait(poll):
            self.poll()

    def poll(self) -> None:
        """Fold the counters' progress since the last reading into the total (one wrap per domain at most)."""
        with self._lock:
            now_time = self._clock()
            gap = now_time - self._last_time
            if gap > self.max_gap_seconds and self.available:
                self.available = False
                self.reason = (
                    f"RAPL readings {gap:.0f} s apart, longer than the {self.max_gap_seconds:.0f} s in which the "
                    f"counter can wrap at {self.MAX_WATTS:.0f} W: wraps may have been missed"
                )
            for i, (energy, limit) in enumerate(self._domains):
                now = int(energy.read_text())
                delta = now - self._last[i]
                if delta < 0:  # the counter wrapped
                    delta += limit
                self._total += delta / 1e6
                self._last[i] = now
            self._last_time = now_time

    def read(self) -> float | None:
        if not self._ready:
            return None
        self.poll()  # a figure marked unavailable by a long gap still reads: the record says why it is not used
        return self._total

    def close(self) -> None:
        self._stop.set()


def cpu_meter() -> Meter:
    return RaplMeter()
