"""The run record: the contract between training and everything after it.

One JSON document per run, versioned by SCHEMA_VERSION and described by contract/schemas/run-record.schema.json;
its typed sections are the frozen dataclasses below (tests/test_record.py checks them against the schema,
so the two cannot drift). `measured()` and `not_measured()` build a record, `write()` validates and writes
atomically, and `load()` is the one reader every consumer uses: it upgrades older schema versions in one
place (`upgrade()`), so readers see the current shape. Torch-free.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from gpuscale.contract import conditions, fsutil, recordcheck
from gpuscale.models import spec as model_spec

DATA_FILES = ("contract/schemas/run-record.schema.json",)  # package data this module reads (gpuscale.deps)
SCHEMA_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
KIND = "gpuscale.run"
MAX_BYTES = 64 << 20  # the largest shipped run record is 17 KiB; a bigger file is no record of a run


# The phases of a training step the phase profile times, in step order.
PHASES = ("data_wait", "host_to_device", "forward", "backward", "optimizer")


class RecordError(ValueError):
    """A record that cannot be used; str() names the file and what is wrong."""


@dataclass(frozen=True)
class Key:
    """Which run: (model, device, variant, seed), its round of the study's interleaved order (study.rounds: the
    same run repeated), and for a sweep run the swept parameter and value."""

    model: str
    device: str
    variant: str
    seed: int
    sweep: dict | None = None
    round: int = 1

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        if self.sweep is None:
            del out["sweep"]
        if self.round == 1:  # the first (often only) round: its key reads as before rounds existed
            del out["round"]
        return out


@dataclass(frozen=True)
class Epoch:
    """One epoch as timed by the process that ran it (schema 1 records lack the last five; upgrade() adds them)."""

    epoch: int
    warmup: bool
    train_seconds: float
    train_images: int
    steps: int
    images_per_second: float
    train_loss: float
    train_accuracy: float
    eval_seconds: float
    test_loss: float
    test_accuracy: float
    learning_rate: float
    measured_steps: int | None = None
    measured_seconds: float | None = None
    extrapolated: bool = False
    step_marks: list = dataclasses.field(default_factory=list)
    energy_joules: dict | None = None


@dataclass(frozen=True)
class Timing:
    clock: str
    total_train_seconds: float
    warmup_epoch_seconds: float
    steady_epoch_seconds_mean: float | None
    steady_epoch_seconds_median: float | None
    total_eval_seconds: float
    train_images_per_second: float
    steady_images_per_second: float | None
    setup_seconds: float
    wall_seconds: float
    extrapolated: bool


@dataclass(frozen=True)
class PhaseProfile:
    """Where a step's time goes (PHASES), from instrumented steps run after the timed epochs."""

    steps: int
    clock: str
    phase_seconds_per_step: dict
    phase_fractions: dict
    phase_sum_seconds_per_step: float
    instrumented_step_seconds: float
    clean_step_seconds: float
    overhead_fraction: float


@dataclass(frozen=True)
class Quality:
    final_test_accuracy: float
    final_test_loss: float
    best_test_accuracy: float

    @classmethod
    def of(cls, epochs: list[dict]) -> Quality:
        return cls(epochs[-1]["test_accuracy"], epochs[-1]["test_loss"], max(e["test_accuracy"] for e in epochs))


@dataclass(frozen=True)
class EnergyMeter:
    """One meter's energy over the timed epochs (gpuscale.measure.energy), or why it has none."""

    available: bool
    source: str
    reason: str | None
    joules_per_epoch: float | None
    images_per_joule: float | None


@dataclass(frozen=True)
class Energy:
    gpu: EnergyMeter
    cpu: EnergyMeter

    @classmethod
    def from_dict(cls, value: dict) -> Energy:
        return cls(gpu=EnergyMeter(**value["gpu"]), cpu=EnergyMeter(**value["cpu"]))


@dataclass(frozen=True)
class Environment:
    """The host and software a run measured on (gpuscale.measure.envinfo.capture); more keys may follow these."""

    host: str
    host_fingerprint: str
    cpu_model: str
    cpu_logical_cores: int
    torch_threads: int
    gpu: dict | None
    torch_version: str
    torchvision_version: str
    cuda_version: str | None
    cudnn_version: int | None
    git: dict


def _checked(cls, value: dict | None, open_ended: bool = False) -> dict | None:
    """value, after checking it has the section's fields (a wrong or missing name fails here, not in a reader)."""
    if value is None:
        return None
    names = [f.name for f in dataclasses.fields(cls)]
    if open_ended:
        cls(**{k: value[k] for k in names})
        return value
    return dataclasses.asdict(cls(**value))


# The sections of a record that are frozen dataclasses (the schema test walks these).
SECTIONS = {
    "key": Key,
    "timing": Timing,
    "phase_profile": PhaseProfile,
    "quality": Quality,
    "environment": Environment,
    "energy": Energy,
}


def key_of(settings: dict, round_: int = 1) -> dict:
    """A run's key from its settings (gpuscale.contract.params.run_settings / sweep_settings) and its round."""
    return Key(
        settings["model"], settings["device"], settings["variant"], settings["seed"], settings.get("sweep"), round_
    ).to_dict()


def not_measured(base: dict, reason: str, environment: dict, started_at: str, finished_at: str) -> dict:
    """The record of a run whose device this host lacks: why, and no timing."""
    return {
        **base,
        "status": "not_measured",
        "not_measured_reason": reason,
        "environment": _checked(Environment, environment, open_ended=True),
        "conditions": {"lease": lease_of(environment), "before": None, "after": None, "drifted": None, "drift": {}},
        "timing": None,
        "epochs": [],
        "phase_profile": None,
        "energy": None,
        "variant": None,
        "quality": None,
        "distributed": None,
        "started_at": started_at,
        "finished_at": finished_at,
    }


def measured(
    base: dict,
    *,
    environment: dict,
    timing: dict,
    epochs: list[dict],
    phase_profile: dict | None,
    energy: dict,
    variant: dict,
    distributed: dict | None,
    segments: list[dict],
    finished_at: str,
    conditions: dict,
) -> dict:
    """The record of a measured run; `segments` are the processes that timed its epochs (resume); `conditions` the
    lease and the sentinels around the job (gpuscale.contract.conditions.conditions)."""
    return {
        **base,
        "status": "measured",
        "not_measured_reason": None,
        "environment": _checked(Environment, environment, open_ended=True),
        "conditions": conditions,
        "timing": _checked(Timing, timing),
        "epochs": [_checked(Epoch, e) for e in epochs],
        "phase_profile": _checked(PhaseProfile, phase_profile),
        "energy": None if energy is None else dataclasses.asdict(Energy.from_dict(energy)),
        "variant": variant,
        "quality": dataclasses.asdict(Quality.of(epochs)),
        "distributed": distributed,
        "started_at": segments[0]["started_at"],
        "finished_at": finished_at,
        "process": {**base["process"], "resumed": len(segments) > 1, "segments": segments},
    }


def lease_of(environment: dict | None) -> str:
    """The lease a record's run was measured in: the machine's boot id, else 'unknown'."""
    return (environment or {}).get("boot_id") or "unknown"


def record_path(
    model: str,
    device: str,
    variant: str,
    seed: int,
    root: str = "results/runs",
    round: int = 1,  # noqa: A002
) -> str:
    """Where a study run's record lies; rounds after the first (study.rounds) get a -roundN suffix. A model named by
    spec lies under its slug (gpuscale.models.spec.slug); the record keeps the spec."""
    return f"{root}/{model_spec.slug(model)}/{device}/{variant}-seed{seed}{round_suffix(round)}.json"


def round_suffix(round_: int) -> str:
    return "" if round_ == 1 else f"-round{round_}"


def sweep_record_path(
    model: str, device: str, parameter: str, value: int, variant: str, seed: int, root: str = "results/runs"
) -> str:
    return f"{root}/{model_spec.slug(model)}/{device}/{parameter}{value}-{variant}-seed{seed}.json"


@functools.cache
def schema() -> dict[str, Any]:
    return json.loads(resources.files("gpuscale").joinpath("contract/schemas/run-record.schema.json").read_text())


def validate(record: dict, source: str = "record") -> None:
    try:
        import jsonschema
    except ImportError:  # bare GPU host; every consumer validates again on load
        if record.get("schema_version") not in READABLE_VERSIONS:
            raise RecordError(
                f"{source}: schema_version is {record.get('schema_version')!r}, expected one of {READABLE_VERSIONS}"
            ) from None
        return
    validator = jsonschema.Draft7Validator(schema())
    error = jsonschema.exceptions.best_match(validator.iter_errors(record))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "(top level)"
        shown = repr(error.instance)  # jsonschema's message quotes the value: a whole section stays one short line
        message = error.message.replace(shown, f"{shown[:60]}...{shown[-1]}") if len(shown) > 80 else error.message
        raise RecordError(f"{source}: {where}: {message}")


def write(path: Path | str, record: dict) -> None:
    validate(record, source=str(path))
    fsutil.write_json(path, record)


def files(folder: Path | str) -> list[Path]:
    """The run records under a results or reference folder: every JSON file but hidden ones and those in a probe/
    folder (a lease's probe records, and its later probes under probe/end/)."""
    folder = Path(folder)
    return sorted(
        p
        for p in folder.rglob("*.json")
        if not p.name.startswith(".") and "probe" not in p.relative_to(folder).parts[:-1]
    )


def load(path: Path | str) -> dict:
    path = Path(path)
    try:
        record = recordcheck.read_json(path, "run record", MAX_BYTES)
    except recordcheck.BadValue as err:
        raise RecordError(str(err)) from None
    if not isinstance(record, dict):
        raise RecordError(f"{path}: not a run record (top level is not an object)")
    version = record.get("schema_version")
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise RecordError(f"{path}: written by a newer gpuscale (schema {version}); upgrade gpuscale to read it")
    try:
        validate(record, source=str(path))
        recordcheck.check_times(record)
        recordcheck.check_identity(record)
    except recordcheck.BadValue as err:
        raise RecordError(f"{path}: {err}") from None
    except RecursionError:
        raise RecordError(f"{path}: JSON nested far too deeply to be a run record") from None
    return upgrade(record)


def upgrade(record: dict) -> dict:
    """A record in the current shape, whatever version wrote it (the one place readers' fallbacks live):
    sections an older schema lacks, or that the schema lets a record leave out, are filled in as absent
    (None) or their neutral value; schema_version is kept as written.

    3 -> 4 added conditions (the lease and the sentinels; an older record's lease is its environment.boot_id where
    it has one, else 'unknown', and it has no sentinel) and key.round (absent: the first round). A record's
    `drifted` and `drift` are derived from its two sentinels, so they are judged again here by the components and
    rule of gpuscale.contract.conditions (the first sentinel had components since dropped).
    2 -> 3 added step marks, process.segments and distributed (a single process: None).
    1 -> 2 added the phase profile, energy, variant details and sampled epochs (never sampled: False).
    """
    record = {**record, "epochs": [dict(e) for e in record["epochs"]]}
    if record.get("conditions"):  # drift is derived: judged again by today's components and rule
        state = record["conditions"]
        record["conditions"] = conditions.conditions(state["lease"], state["before"], state["after"])
    else:
        record["conditions"] = conditions.conditions(lease_of(record.get("environment")), None, None)
    for name in ("phase_profile", "energy", "variant", "distributed"):
        record.setdefault(name, None)
    for epoch in record["epochs"]:
        epoch.setdefault("measured_steps", epoch["steps"])
        epoch.setdefault("measured_seconds", epoch["train_seconds"])
        epoch.setdefault("extrapolated", False)
        epoch.setdefault("step_marks", [])
        epoch.setdefault("energy_joules", None)
    if record["timing"] is not None:
        record["timing"] = {"extrapolated": False, **record["timing"]}
    return record


def expected_name(record: dict) -> str:
    """The file name a record of this key has in a runs folder (record_path, sweep_record_path)."""
    k = record["key"]
    if k.get("sweep"):
        return Path(
            sweep_record_path(
                k["model"], k["device"], k["sweep"]["parameter"], k["sweep"]["value"], k["variant"], k["seed"]
            )
        ).name
    return Path(record_path(k["model"], k["device"], k["variant"], k["seed"], round=k.get("round", 1))).name


def misplaced(path: Path | str, record: dict) -> str | None:
    """Why a record under a `runs/` folder does not lie where its key says (runs/<model>/<device>/<name>.json), or
    None (also for a record outside any runs folder: its place says nothing)."""
    parts = Path(path).parts
    if "runs" not in parts[:-1]:
        return None
    where = parts[len(parts) - 1 - parts[::-1].index("runs") :]
    k = record["key"]
    expected = ("runs", model_spec.slug(k["model"]), k["device"], expected_name(record))
    if tuple(where) != expected:
        return (
            f"{path}: its key says {'/'.join(expected)} but it lies at {'/'.join(where)}; "
            "a renamed or copied record: move it back or remove it"
        )
    return None


def key(record: dict) -> tuple:
    """(model, device, variant, seed), plus ("round", N) for a round after the first and (parameter, value) for a
    sweep run."""
    k = record["key"]
    sweep, round_ = k.get("sweep"), k.get("round", 1)
    return (
        (k["model"], k["device"], k["variant"], k["seed"])
        + (("round", round_) if round_ != 1 else ())
        + ((sweep["parameter"], sweep["value"]) if sweep else ())
    )
