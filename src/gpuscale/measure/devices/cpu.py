"""The CPU: the host itself. All defaults but autocast, which a CPU may lack for a dtype."""

from __future__ import annotations

import torch

from gpuscale.measure.devices.base import Device


class Cpu(Device):
    def autocast_ok(self, dtype: torch.dtype) -> bool:
        try:
            with torch.autocast("cpu", dtype=dtype):
                torch.nn.functional.linear(torch.ones(2, 2), torch.ones(2, 2))
            return True
        except (RuntimeError, AssertionError):
            return False


DEVICE = Cpu
