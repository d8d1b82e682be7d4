"""params.yaml: loading, overlays, validation and the settings of one run.

One file configures Snakemake and DVC alike. Every stage command calls `load()` first, so a bad
file is refused with one line (the key path, what is allowed) before any work starts, whichever
tool launched the stage. Torch-free: the Snakefile imports this module.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import random
import re
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from gpuscale.contract import settings as typed
from gpuscale.contract.record import record_path, sweep_record_path  # noqa: F401 (where the Snakefile and cli look)
from gpuscale.models.registry import MODEL_NAMES

DATA_FILES = ("contract/schemas/params.schema.yaml",)  # package data this module reads (gpuscale.deps)
DEFAULT_PARAMS = Path("params.yaml")


class ParamsError(ValueError):
    """A params file that cannot be used; str() is the one line shown to the user."""


@functools.cache
def schema() -> dict[str, Any]:
    text = resources.files("gpuscale").joinpath("contract/schemas/params.schema.yaml").read_text()
    return yaml.safe_load(text)


def deep_merge(base: dict, overlay: dict) -> dict:
    """Overlay onto base the way Snakemake merges --configfile: dicts recursively, the rest replaced."""
    merged = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def read_yaml(path: Path) -> dict:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ParamsError(f"{path}: file not found (pass --params with an existing params file)") from None
    except OSError as err:  # a folder, no permission
        raise ParamsError(f"{path}: cannot read ({err.strerror}); pass --params with a readable YAML file") from None
    except UnicodeDecodeError as err:
        raise ParamsError(f"{path}: not UTF-8 text (bad byte at offset {err.start}); save it as UTF-8 YAML") from None
    try:
        data = yaml.safe_load(text)
    except RecursionError:
        raise ParamsError(f"{path}: nested far too deeply to be a params file") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "invalid YAML"
        raise ParamsError(f"{path}:{where}: YAML syntax error: {problem} (fix the YAML syntax)") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ParamsError(f"{path}: top level must be a mapping of keys (study, data, train, models)")
    _check_keys(data, path, ())
    return data


def _check_keys(value, path, where: tuple) -> None:
    """Every mapping key is text (YAML also allows numbers, dates, null as keys)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ParamsError(f"{path}: {_key_path([*where, key])}: key {key!r} is not text (quote it)")
            _check_keys(item, path, (*where, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_keys(item, path, (*where, index))


def load(paths: list[Path] | tuple[Path, ...] = (DEFAULT_PARAMS,)) -> dict:
    """Read params.yaml and any overlays (later files win), validate, return the merged config."""
    config: dict = {}
    for path in paths:
        config = deep_merge(config, read_yaml(path))
    validate(config, source=", ".join(str(p) for p in paths))
    return config


def _key_path(parts) -> str:
    return ".".join(str(p) for p in parts) or "(top level)"


def _describe(error) -> str:
    """Turn a jsonschema error into 'key.path: what is wrong (what is allowed)'."""
    path = list(error.absolute_path)
    validator = error.validator
    sub = error.schema if isinstance(error.schema, dict) else {}
    if validator == "additionalProperties":
        allowed = sorted(sub.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed)) if isinstance(error.instance, dict) else []
        key = extra[0] if extra else "?"
        close = difflib.get_close_matches(str(key), allowed, n=1)
        hint = f"; did you mean {_key_path(path + [close[0]])}?" if close else ""
        return f"{_key_path(path + [key])}: unknown key{hint} (allowed here: {', '.join(allowed)})"
    if validator == "required":
        missing = re.findall(r"'([^']+)' is a required property", error.message)
        name = missing[0] if missing else "?"
        return f"{_key_path(path + [name])}: missing required key (add it; see params.yaml for the default)"
    if validator == "enum":
        return f"{_key_path(path)}: {error.instance!r} is not allowed (allowed: {', '.join(map(str, sub['enum']))})"
    if validator == "type":
        wanted = error.validator_value
        wanted = " or ".join(wanted) if isinstance(wanted, list) else wanted
        return f"{_key_path(path)}: {error.instance!r} has the wrong type (allowed: {wanted})"
    if validator in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        words = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}
        allowed = f"{words[validator]} {error.validator_value}"
        return f"{_key_path(path)}: {error.instance!r} is out of range (allowed: {allowed})"
    if validator == "pattern":
        hint = sub.get("description") or f"matching {error.validator_value}"
        return f"{_key_path(path)}: {error.instance!r} is malformed (allowed: {hint})"
    if validator == "uniqueItems":
        return f"{_key_path(path)}: entries must be unique (remove the repeated entry)"
    if validator in ("minItems", "maxItems"):
        return f"{_key_path(path)}: {error.message} (allowed: {validator} {error.validator_value})"
    if validator in ("oneOf", "anyOf", "allOf") and error.context:
        return _describe(min(error.context, key=lambda e: len(list(e.absolute_path))))
    return f"{_key_path(path)}: {error.message}"


def validate(config: dict, source: str = "params.yaml") -> None:
    """Raise ParamsError naming the first bad key. jsonschema is optional on bare GPU hosts."""
    try:
        import jsonschema
    except ImportError:  # bare GPU host: the workflow host validated the same file already
        errors = []
    else:
        validator_cls = jsonschema.validators.validator_for(schema())
        errors = list(validator_cls(schema()).iter_errors(config))
    if errors:
        # An unknown key first: a misspelt key (epohcs) also leaves the right one (epochs) missing, and the
        # misspelling is the cause to name.
        unknown = [e for e in errors if e.validator == "additionalProperties"]
        error = jsonschema.exceptions.best_match(unknown or errors)
        raise ParamsError(f"{source}: {_describe(error)}")
    for index, name in enumerate(config["study"]["models"]):
        if name not in MODEL_NAMES:
            raise ParamsError(
                f"{source}: study.models.{index}: unknown model {name!r} (allowed: {', '.join(MODEL_NAMES)})"
            )
    for name in config.get("models") or {}:
        if name not in MODEL_NAMES:
            raise ParamsError(f"{source}: models.{name}: unknown model {name!r} (allowed: {', '.join(MODEL_NAMES)})")
    for index, variant in enumerate(config["study"]["variants"]):
        if variant not in config["variants"]:
            raise ParamsError(
                f"{source}: study.variants.{index}: {variant!r} is not defined under variants "
                f"(defined: {', '.join(config['variants'])})"
            )
    for index, name in enumerate(config["sweeps"]["models"]):
        if name not in MODEL_NAMES:
            raise ParamsError(
                f"{source}: sweeps.models.{index}: unknown model {name!r} (allowed: {', '.join(MODEL_NAMES)})"
            )
    if config["sweeps"]["variant"] not in config["variants"]:
        raise ParamsError(
            f"{source}: sweeps.variant: {config['sweeps']['variant']!r} is not defined under variants "
            f"(defined: {', '.join(config['variants'])})"
        )
    for index, device in enumerate(config["study"]["devices"]):
        if not typed.is_device(device):
            raise ParamsError(
                f"{source}: study.devices.{index}: {device!r} is malformed (allowed: {typed.DEVICE_ALLOWED})"
            )


def load_typed(paths: list[Path] | tuple[Path, ...] = (DEFAULT_PARAMS,)) -> typed.Params:
    """load() turned into frozen dataclasses once (settings.Params; `.config` keeps the merged dict)."""
    return typed.Params.from_dict(load(paths))


def train_settings(config: typed.Params | dict, model: str) -> dict:
    """The train.* settings of one model: train.* with models.<model>.* replacing whole keys."""
    return typed.Params.of(config).train_for(model).to_dict()


def typed_run_settings(
    config: typed.Params | dict, model: str, device: str, variant: str, seed: int
) -> typed.RunSettings:
    """Everything that shapes one run's result, typed once (gpuscale.contract.settings.RunSettings)."""
    return _typed_run(typed.TrainStageParams.of(config, model, variant), model, device, variant, seed)


def _typed_run(stage: typed.TrainStageParams, model: str, device: str, variant: str, seed: int) -> typed.RunSettings:
    return typed.RunSettings(
        model, typed.DeviceSpec.parse(device), variant, seed, stage.on_missing_device, stage.variant, stage.train
    )


def run_settings(config: typed.Params | dict, model: str, device: str, variant: str, seed: int) -> dict:
    """Everything that shapes one run's result; the record keeps it, Snakemake reruns on its change."""
    return typed_run_settings(config, model, device, variant, seed).to_dict()


def select(config: dict, keys: list[str], item: dict | None = None) -> dict:
    """The values of dotted params keys ('report.title'; '${item.model}' filled from item), missing ones None.

    What a stage depends on (gpuscale.deps.STAGE_PARAMS): Snakemake rules pass it as params, DVC lists the keys.
    """
    out = {}
    for key in keys:
        for name, value in (item or {}).items():
            key = key.replace(f"${{item.{name}}}", str(value))
        node: Any = config
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        out[key] = copy.deepcopy(node)
    return out


def run_keys(config: typed.Params | dict) -> list[dict]:
    """Every (model, device, variant, seed) the study asks for, and for study.rounds > 1 every round after the
    first too ("round": N; the first round's keys carry none), in the order the timing jobs run (timing_order)."""
    return timing_order(config)


def timing_order(config: typed.Params | dict) -> list[dict]:
    """The study's runs in the order they are timed. `interleaved` (RMIT: randomized multiple interleaved trials):
    in each round, the (model, variant, seed) blocks in a random order and, inside a block, the devices in a random
    order, so a model's CPU and GPU runs are taken side by side and the machine's drift falls on both; the order
    is drawn from study.order_seed and the round, so it is the same on every call. `grouped`: the lists' order."""
    study = typed.Params.of(config).study
    blocks = [(m, v, s) for m in study.models for v in study.variants for s in study.seeds]
    keys = []
    for round_ in range(1, study.rounds + 1):
        rng = random.Random(f"{study.order_seed}:{round_}")
        order = list(blocks)
        if study.order == "interleaved":
            rng.shuffle(order)
        for model, variant, seed in order:
            devices = list(study.devices)
            if study.order == "interleaved":
                rng.shuffle(devices)
            for device in devices:
                key = {"model": model, "device": device, "variant": variant, "seed": seed}
                keys.append(key if round_ == 1 else {**key, "round": round_})
    return keys


SWEEP_PARAMETERS = {"threads": "cpu_threads", "batch": "gpu_batch_sizes"}


def sweep_keys(config: typed.Params | dict) -> list[dict]:
    """Every sweep run: CPU thread counts on `cpu`, GPU batch sizes on sweeps.gpu_device; seed 0."""
    sweeps = typed.Params.of(config).sweeps
    keys = []
    for model in sweeps.models:
        common = {"model": model, "variant": sweeps.variant, "seed": 0}
        keys += [{**common, "device": "cpu", "parameter": "threads", "value": n} for n in sweeps.cpu_threads]
        keys += [
            {**common, "device": sweeps.gpu_device, "parameter": "batch", "value": b} for b in sweeps.gpu_batch_sizes
        ]
    return [{k: key[k] for k in ("model", "device", "parameter", "value", "variant", "seed")} for key in keys]


def sweep_settings(
    config: typed.Params | dict, model: str, device: str, parameter: str, value: int, variant: str, seed: int
) -> dict:
    """A run's settings with the swept setting replaced; the sweep is part of the run's key."""
    return typed_sweep_settings(config, model, device, parameter, value, variant, seed).to_dict()


def typed_sweep_settings(
    config: typed.Params | dict, model: str, device: str, parameter: str, value: int, variant: str, seed: int
) -> typed.RunSettings:
    """sweep_settings, typed once: train.* after models.<m>, then sweeps.train, then the swept value."""
    if parameter not in SWEEP_PARAMETERS:
        raise ParamsError(f"--sweep: unknown parameter {parameter!r} (allowed: {', '.join(SWEEP_PARAMETERS)})")
    stage = typed.TrainStageParams.of(config, model, variant)
    swept = {"batch_size": value} if parameter == "batch" else {"cpu_threads": value}
    return dataclasses.replace(
        _typed_run(stage, model, device, variant, seed),
        train=stage.train_with({**stage.sweep_train, **swept}),
        sweep=typed.Sweep(parameter, value),
    )


def data_parallel_size(device: str) -> int:
    """Processes of a data-parallel device spec (cuda-ddp4 -> 4); 1 for a single device."""
    return typed.DeviceSpec.parse(device).world_size if typed.is_device(device) else 1
