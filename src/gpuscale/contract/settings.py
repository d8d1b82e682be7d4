"""Typed settings: params validated once (gpuscale.contract.params), then frozen dataclasses.

Device names are gpuscale.devices's (one line per kind; the pattern is built there): `DEVICE_PATTERN` and
`DEVICE_ALLOWED` here are read from it when asked, so a kind registered later is in them. A device spec is parsed
once into a DeviceSpec (kind, index, world size).
Every params section a stage reads is a frozen dataclass here; `Params.from_dict` types the whole validated
file once (gpuscale.contract.params.load_typed, gpuscale.commands.load_typed) and keeps the dict as `.config` for
provenance. Stages read attributes; the record still stores a run's settings as the JSON dict (`to_dict()`).
Torch-free: the Snakefile imports it.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from gpuscale import devices

DATA_PARALLEL_SUFFIX = r"-ddp[0-9]+$"  # strip it for the kind of device one process runs on
_FROM_KINDS = {
    "DEVICE_PATTERN": devices.pattern,  # cpu, cuda, cuda-N, mps, cuda-ddpN / cpu-ddpN with N >= 2
    "PROCESS_DEVICE_PATTERN": lambda: devices.pattern(parallel=False),  # what one process trains on (a probe's)
    "GPU_DEVICE_PATTERN": lambda: devices.pattern(gpu_only=True),  # one GPU (sweeps.gpu_device)
    "DEVICE_ALLOWED": devices.allowed,
}


def __getattr__(name: str):
    if name in _FROM_KINDS:
        return _FROM_KINDS[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class DeviceSpec:
    """A device as params spell it ('cuda-1', 'cpu-ddp4'; no ':' in file names), parsed once."""

    spec: str
    kind: str  # cpu, cuda or mps: a name in gpuscale.devices.KINDS
    index: int | None  # cuda-N's N; None for the default device and for data-parallel specs
    world_size: int  # processes of a data-parallel spec, else 1

    @classmethod
    def parse(cls, spec: str) -> DeviceSpec:
        parsed = devices.parse(spec)
        if parsed is None:
            raise ValueError(f"device {spec!r} is malformed (allowed: {devices.allowed()})")
        kind, index, world = parsed
        return cls(spec, kind.name, index, world)

    @property
    def data_parallel(self) -> bool:
        return self.world_size > 1

    @property
    def gpu(self) -> bool:
        return devices.get(self.kind).gpu

    @property
    def per_process(self) -> str:
        """The device one process of this spec trains on (cpu-ddp2 -> cpu): what a probe measures."""
        return self.kind if self.data_parallel else self.spec

    def __str__(self) -> str:
        return self.spec


def is_device(spec: str) -> bool:
    return devices.parse(spec) is not None


def _plain(value):
    """A dataclass field as JSON-ready data: tuples become lists, nested sections dicts."""
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class _Section:
    """from_dict/to_dict for a params section whose keys are the dataclass's fields."""

    @classmethod
    def from_dict(cls, values: dict[str, Any]):
        return cls(**values)

    @classmethod
    def of(cls, values):
        """The section as it is, or typed from its params-shaped dict (callers without params: tests, benchmarks)."""
        return values if isinstance(values, cls) else cls.from_dict(values)

    def to_dict(self) -> dict:
        return _plain(self)


@dataclass(frozen=True)
class Optimizer(_Section):
    name: str  # adam or sgd
    lr: float
    weight_decay: float


@dataclass(frozen=True)
class Scheduler(_Section):
    name: str  # steplr or none
    step_size: int
    gamma: float


@dataclass(frozen=True)
class Augment(_Section):
    random_crop_padding: int
    horizontal_flip: bool


@dataclass(frozen=True)
class Normalize(_Section):
    mean: tuple[float, ...]
    std: tuple[float, ...]

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Normalize:
        return cls(tuple(values["mean"]), tuple(values["std"]))


@dataclass(frozen=True)
class LoaderSettings(_Section):
    num_workers: int
    pin_memory: bool
    persistent_workers: bool


_TRAIN_SECTIONS = {
    "optimizer": Optimizer,
    "scheduler": Scheduler,
    "augment": Augment,
    "normalize": Normalize,
    "loader": LoaderSettings,
}


@dataclass(frozen=True)
class TrainSettings(_Section):
    """train.* of one model (models.<name>.* replacing whole keys), as params.train_settings gives them."""

    epochs: int
    batch_size: int
    distributed_batch: str
    eval_batch_size: int
    optimizer: Optimizer
    scheduler: Scheduler
    augment: Augment
    normalize: Normalize
    loader: LoaderSettings
    max_steps_per_epoch: int | None
    sample_warmup_steps: int
    phase_profile_steps: int
    cpu_threads: int | None
    deterministic: bool
    log_every_steps: int

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainSettings:
        values = dict(values)
        for key, section in _TRAIN_SECTIONS.items():
            if isinstance(values.get(key), dict):
                values[key] = section.from_dict(values[key])
        return cls(**values)


@dataclass(frozen=True)
class Variant(_Section):
    """One entry of variants.*: how a run uses its device (gpuscale.measure.variants applies it)."""

    precision: str
    memory_format: str
    compile: str
    loader: str  # host or device
    fused_optimizer: bool
    cudnn_benchmark: bool
    compile_cache: str | None = None  # optional in params: None = not given (the record keeps the knobs as given)

    @property
    def cache_policy(self) -> str:
        return self.compile_cache or "cold"

    def to_dict(self) -> dict:
        out = _plain(self)
        if self.compile_cache is None:
            del out["compile_cache"]
        return out


@dataclass(frozen=True)
class Sweep(_Section):
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
    variant_knobs: Variant
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
            variant_knobs=Variant.from_dict(settings["variant_knobs"]),
            train=TrainSettings.from_dict(settings["train"]),
            sweep=Sweep(**sweep) if sweep else None,
        )

    @classmethod
    def of(cls, settings: RunSettings | dict[str, Any]) -> RunSettings:
        """The settings as they are, or typed from params.run_settings' dict (callers without params: tests)."""
        return settings if isinstance(settings, RunSettings) else cls.from_dict(settings)

    def to_dict(self) -> dict:
        out = {
            "model": self.model,
            "device": self.device.spec,
            "variant": self.variant,
            "seed": self.seed,
            "on_missing_device": self.on_missing_device,
            "variant_knobs": self.variant_knobs.to_dict(),
            "train": self.train.to_dict(),
        }
        if self.sweep is not None:
            out["sweep"] = dataclasses.asdict(self.sweep)
        return out


@dataclass(frozen=True)
class Study(_Section):
    models: tuple[str, ...]
    devices: tuple[str, ...]
    variants: tuple[str, ...]
    seeds: tuple[int, ...]
    on_missing_device: str  # record or error
    label: str | None = None
    rounds: int = 1  # the whole interleaved set again (repeats of the same seeds)
    order: str = "interleaved"  # or grouped: the order of the lists
    order_seed: int = 0

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Study:
        lists = {key: tuple(values[key]) for key in ("models", "devices", "variants", "seeds")}
        return cls(**{**values, **lists})


@dataclass(frozen=True)
class DataSettings(_Section):
    source: str  # cifar10, imagefolder or synthetic
    path: str | None
    url: str
    md5: str
    train_size: int | None
    test_size: int | None
    subset_seed: int
    download_timeout_seconds: float
    download_retries: int
    image_mode: str  # strict or convert


@dataclass(frozen=True)
class Sweeps(_Section):
    models: tuple[str, ...]
    variant: str
    cpu_threads: tuple[int, ...]
    gpu_device: str
    gpu_batch_sizes: tuple[int, ...]
    train: dict  # train.* keys replaced for sweep runs only (a partial section)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Sweeps:
        lists = {key: tuple(values[key]) for key in ("models", "cpu_threads", "gpu_batch_sizes")}
        return cls(**{**values, **lists, "train": dict(values.get("train") or {})})


@dataclass(frozen=True)
class ReportSettings(_Section):
    title: str
    accuracy_tolerance: float
    reference: tuple[str, ...]
    skip_bad_records: bool
    pairing: str = "same-lease"  # or any: CPU and GPU of different leases paired too, marked cross-lease

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ReportSettings:
        return cls(**{**values, "reference": tuple(values["reference"])})


@dataclass(frozen=True)
class PredictSettings(_Section):
    only: bool
    probe_seconds: float


@dataclass(frozen=True)
class Runtime(_Section):
    resume: bool


@dataclass(frozen=True)
class Params:
    """The whole validated params (contract.params.load), typed once; `config` keeps the merged dict for provenance."""

    study: Study
    variants: dict[str, Variant]
    data: DataSettings
    train: TrainSettings
    models: dict[str, dict]  # models.<name>: train.* keys replacing whole keys for that model (partial sections)
    sweeps: Sweeps
    report: ReportSettings
    predict: PredictSettings
    runtime: Runtime
    config: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> Params:
        return cls(
            study=Study.from_dict(config["study"]),
            variants={name: Variant.from_dict(knobs) for name, knobs in config["variants"].items()},
            data=DataSettings.from_dict(config["data"]),
            train=TrainSettings.from_dict(config["train"]),
            models={name: dict(over or {}) for name, over in (config.get("models") or {}).items()},
            sweeps=Sweeps.from_dict(config["sweeps"]),
            report=ReportSettings.from_dict(config["report"]),
            predict=PredictSettings.from_dict(config["predict"]),
            runtime=Runtime.from_dict(config["runtime"]),
            config=config,
        )

    @classmethod
    def of(cls, config: Params | dict[str, Any]) -> Params:
        """Params as they are, or typed from a validated config dict (the Snakefile passes its `config`)."""
        return config if isinstance(config, Params) else cls.from_dict(config)

    def train_for(self, model: str, overrides: dict | None = None) -> TrainSettings:
        """train.* of one model: models.<model>.* (then `overrides`) replacing whole keys."""
        merged = {**self.train.to_dict(), **self.models.get(model, {}), **(overrides or {})}
        return TrainSettings.from_dict(copy.deepcopy(merged))


@dataclass(frozen=True)
class TrainStageParams:
    """What one training run reads of params, and nothing else (deps.STAGE_PARAMS['train'] and the sweeps'): a
    run's settings must be a function of these keys alone, so it is typed from them, not from the whole file."""

    on_missing_device: str
    variant: Variant
    train: TrainSettings  # train.* with models.<model>.* replacing whole keys
    sweep_train: dict  # sweeps.train: train.* keys replaced for sweep runs only

    @classmethod
    def of(cls, config: Params | dict[str, Any], model: str, variant: str) -> TrainStageParams:
        if isinstance(config, Params):
            study, sweeps = config.study, config.sweeps
            return cls(study.on_missing_device, config.variants[variant], config.train_for(model), sweeps.train)
        merged = {**config["train"], **((config.get("models") or {}).get(model) or {})}
        return cls(
            on_missing_device=config["study"]["on_missing_device"],
            variant=Variant.from_dict(config["variants"][variant]),
            train=TrainSettings.from_dict(copy.deepcopy(merged)),
            sweep_train=dict((config.get("sweeps") or {}).get("train") or {}),
        )

    def train_with(self, overrides: dict) -> TrainSettings:
        """These train settings with some keys replaced whole (a sweep's)."""
        return TrainSettings.from_dict(copy.deepcopy({**self.train.to_dict(), **overrides}))
