"""Typed settings: params validated once (gpuscale.params), then frozen dataclasses.

The device-name pattern lives here and nowhere else: the params schema is checked against it by a
test, gpuscale.params validates with it, the Snakefile's wildcard constraint and the aggregation
derive from it. A device spec is parsed once into a DeviceSpec (kind, index, world size).
Torch-free: the Snakefile imports it.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

# cpu, cuda, cuda-N (the N-th GPU), mps, or data-parallel cuda-ddpN / cpu-ddpN with N >= 2.
DEVICE_PATTERN = r"cpu|cuda(-[0-9]+)?|mps|(cpu|cuda)-ddp([2-9]|[1-9][0-9]+)"
DEVICE_ALLOWED = "cpu, cuda, cuda-N, mps, cuda-ddpN, cpu-ddpN with N >= 2"
DATA_PARALLEL_SUFFIX = r"-ddp[0-9]+$"  # strip it for the kind of device one process runs on
_DEVICE = re.compile(rf"^({DEVICE_PATTERN})$")


@dataclass(frozen=True)
class DeviceSpec:
    """A device as params spell it ('cuda-1', 'cpu-ddp4'; no ':' in file names), parsed once."""

    spec: str
    kind: str  # cpu, cuda or mps
    index: int | None  # cuda-N's N; None for the default device and for data-parallel specs
    world_size: int  # processes of a data-parallel spec, else 1

    @classmethod
    def parse(cls, spec: str) -> DeviceSpec:
        if not _DEVICE.match(spec):
            raise ValueError(f"device {spec!r} is malformed (allowed: {DEVICE_ALLOWED})")
        kind, _, rest = spec.partition("-")
        if rest.startswith("ddp"):
            return cls(spec, kind, None, int(rest[3:]))
        return cls(spec, kind, int(rest) if rest else None, 1)

    @property
    def data_parallel(self) -> bool:
        return self.world_size > 1

    def __str__(self) -> str:
        return self.spec


def is_device(spec: str) -> bool:
    return bool(_DEVICE.match(spec))


@dataclass(frozen=True)
class TrainSettings:
    """train.* of one model (models.<name>.* replacing whole keys), as params.train_settings gives them."""

    epochs: int
    batch_size: int
    distributed_batch: str
    eval_batch_size: int
    optimizer: dict
    scheduler: dict
    augment: dict
    normalize: dict
    loader: dict
    max_steps_per_epoch: int | None
    sample_warmup_steps: int
    phase_profile_steps: int
    cpu_threads: int | None
    deterministic: bool
    log_every_steps: int

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Sweep:
    parameter: str  # threads or batch
    value: int


@dataclass(frozen=True)
class RunSettings:
    """Everything that shapes one run's result (the record keeps `to_dict()`, equal to params.run_settings)."""

    model: str
    device: DeviceSpec
    variant: str
    seed: int
    on_missing_device: str
    variant_knobs: dict
    train: TrainSettings
    sweep: Sweep | None = None

    @classmethod
    def from_dict(cls, settings: dict[str, Any]) -> RunSettings:
        sweep = settings.get("sweep")
        return cls(
            model=settings["model"],
            device=DeviceSpec.parse(settings["device"]),
            variant=settings["variant"],
            seed=settings["seed"],
            on_missing_device=settings["on_missing_device"],
            variant_knobs=dict(settings["variant_knobs"]),
            train=TrainSettings(**settings["train"]),
            sweep=Sweep(**sweep) if sweep else None,
        )

    def to_dict(self) -> dict:
        out = {
            "model": self.model,
            "device": self.device.spec,
            "variant": self.variant,
            "seed": self.seed,
            "on_missing_device": self.on_missing_device,
            "variant_knobs": dict(self.variant_knobs),
            "train": self.train.to_dict(),
        }
        if self.sweep is not None:
            out["sweep"] = dataclasses.asdict(self.sweep)
        return out
