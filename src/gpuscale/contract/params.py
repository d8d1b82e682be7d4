"""params.yaml: loading, overlays, validation and the settings of one run.

One file configures Snakemake and DVC alike. Every stage command calls `load()` first, so a bad
file is refused with one line (the key path, what is allowed) before any work starts, whichever
tool launched the stage. Torch-free: the Snakefile imports this module.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import random
import re
from pathlib import Path
from typing import Any

import yaml

from gpuscale.contract import paths as path_checks
from gpuscale.contract import settings as typed
from gpuscale.contract.paramschema import ParamsError, _key_path, _schema_alternatives, _schema_types, schema
from gpuscale.contract.record import record_path, sweep_record_path  # noqa: F401 (where the Snakefile and cli look)
from gpuscale.contract.yamlcheck import _POSITIONS, _check_keys, _check_node, _Loader
from gpuscale.models import registry
from gpuscale.models import spec as model_spec
from gpuscale.models.registry import MODEL_NAMES

DEFAULT_PARAMS = Path("params.yaml")
MAX_INTEGER = 2**32 - 1  # numpy's largest seed; no count a run takes comes near it


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
    if Path(path).exists():  # a folder, a FIFO (the read would wait forever), a device: named (contract.paths)
        from gpuscale.contract import paths

        try:
            paths.resolve_input(path, "params file", kind="file", fix="pass --params with a YAML params file")
        except paths.PathError as err:
            raise ParamsError(str(err)) from None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ParamsError(f"{path}: file not found (pass --params with an existing params file)") from None
    except OSError as err:  # a folder, no permission
        raise ParamsError(f"{path}: cannot read ({err.strerror}); pass --params with a readable YAML file") from None
    except UnicodeDecodeError as err:
        raise ParamsError(f"{path}: not UTF-8 text (bad byte at offset {err.start}); save it as UTF-8 YAML") from None
    loader = _Loader(text)
    _POSITIONS[str(path)] = {}
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_node(node, path, (), loader, set())
        data = loader.construct_document(node) if node is not None else None
    except ParamsError:
        raise
    except RecursionError:
        raise ParamsError(f"{path}: nested far too deeply to be a params file") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "invalid YAML"
        raise ParamsError(f"{path}:{where}: YAML syntax error: {problem} (fix the YAML syntax)") from None
    except ValueError as err:  # PyYAML's int() of a key such as `0b_:`
        raise ParamsError(f"{path}: a key or value no YAML reader can read ({err}); quote it") from None
    finally:
        loader.dispose()
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ParamsError(f"{path}: top level must be a mapping of keys (study, data, train, models)")
    if "__use_yte__" in data:
        raise ParamsError(
            f"{path}: __use_yte__: Snakemake would read this file as a YTE template, gpuscale and DVC as plain YAML; "
            f"remove the key"
        )
    _check_keys(data, path, ())
    return data


def load(paths: list[Path] | tuple[Path, ...] = (DEFAULT_PARAMS,)) -> dict:
    """Read params.yaml and any overlays (later files win), validate, return the merged config."""
    config: dict = {}
    for path in paths:
        config = deep_merge(config, read_yaml(path))
    try:
        validate(config, source=", ".join(str(p) for p in paths))
    except ParamsError as err:
        where = _where(paths, err.key_path) if err.key_path is not None else None
        if where:
            raise ParamsError(f"{where}: {err.detail}", err.key_path) from None
        raise
    return config


def _where(paths, key_path: tuple) -> str | None:
    """'overlay.yaml: line 3' of the last file that sets key_path (or the nearest key above it), or None."""
    for length in range(len(key_path), 0, -1):
        for path in reversed(list(paths)):
            line = _POSITIONS.get(str(path), {}).get(tuple(key_path[:length]))
            if line:
                return f"{path}: line {line}"
    return None


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
        hint = f"; did you mean {_key_path(path + [close[0]])}?" if close else _elsewhere(path, str(key))
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
        text = error.instance if isinstance(error.instance, str) else ""
        odd = "a space" if any(c.isspace() for c in text) else "a brace" if {"{", "}"} & set(text) else None
        if odd and ":" in text:  # a model spec's path
            return (
                f"{_key_path(path)}: {text!r} holds {odd}, which a model's jobs cannot carry (Snakemake's job names "
                f"and wildcards): rename the file or folder without one"
            )
        hint = sub.get("description") or f"matching {error.validator_value}"
        return f"{_key_path(path)}: {error.instance!r} is malformed (allowed: {hint})"
    if validator == "uniqueItems":
        return f"{_key_path(path)}: entries must be unique (remove the repeated entry)"
    if validator in ("minItems", "maxItems"):
        return f"{_key_path(path)}: {error.message} (allowed: {validator} {error.validator_value})"
    if validator in ("oneOf", "anyOf", "allOf") and error.context:
        return _describe(min(error.context, key=lambda e: len(list(e.absolute_path))))
    return f"{_key_path(path)}: {error.message}"


def _schema_keys(node: dict, prefix: tuple = ()) -> list[tuple]:
    """Every key path the schema names (train.optimizer.lr), models.<name> and variants.<name> as '<name>'."""
    out = []
    for sub in _schema_alternatives(node):
        for name, child in sub.get("properties", {}).items():
            out += [(*prefix, name), *_schema_keys(child, (*prefix, name))]
        if isinstance(sub.get("additionalProperties"), dict):
            out += _schema_keys(sub["additionalProperties"], (*prefix, "<name>"))
    return list(dict.fromkeys(out))


def _elsewhere(path: list, key: str) -> str:
    """'; write it nested: train: {epochs: ...}' for a dotted key, '; did you mean train.epochs?' for a key of
    another section, or ''."""
    known = _schema_keys(schema())
    dotted = tuple(path) + tuple(key.split("."))
    if "." in key and any(k == dotted for k in known):
        head, *rest = key.split(".")
        nested = "{".join(f"{part}: " for part in rest) + "..." + "}" * (len(rest) - 1)
        return f"; write it nested ({head}: {{{nested}}}), a dot is part of a key's name in YAML"
    same = [k for k in known if k[-1] == key and "<name>" not in k and len(k) > 1]
    if same:
        return "; did you mean " + " or ".join(_key_path(k) for k in same[:2]) + "?"
    return ""


def validate(config: dict, source: str = "params.yaml") -> None:
    """Raise ParamsError naming the first bad key. jsonschema is optional on bare GPU hosts."""

    def refuse(key_path: tuple, detail: str):
        raise ParamsError(f"{source}: {detail}", tuple(key_path), detail)

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
        refuse(_error_path(error), _describe(error))
    _integers(config, (), refuse)
    models = ("models", "unknown model", MODEL_NAMES)
    variants = ("variants", "is not defined under variants", tuple(config["variants"]))
    named = [(("study", "models", i), name, models) for i, name in enumerate(config["study"]["models"])]
    named += [(("models", name), name, models) for name in config.get("models") or {}]
    named += [(("study", "variants", i), name, variants) for i, name in enumerate(config["study"]["variants"])]
    named += [(("sweeps", "models", i), name, models) for i, name in enumerate(config["sweeps"]["models"])]
    named += [(("sweeps", "variant"), config["sweeps"]["variant"], variants)]
    for key_path, name, (kind, problem, allowed) in named:
        if kind == "models" and model_spec.is_spec(name):  # a model named by spec: its form, file, function
            try:
                if model_spec.parse(name).kind == "file":  # code that runs: a .py file inside the project
                    path_checks.model_file(name, _key_path(key_path))
                registry.check(name)
            except model_spec.SpecError as err:
                refuse(key_path, f"{_key_path(key_path)}: {err}")
            except path_checks.PathError as err:
                refuse(key_path, str(err))
            continue
        if name not in allowed:
            close = difflib.get_close_matches(name, allowed, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            words = "allowed" if kind == "models" else "defined"
            what = f"unknown model {name!r}" if kind == "models" else f"{name!r} {problem}"
            refuse(key_path, f"{_key_path(key_path)}: {what}{hint} ({words}: {', '.join(allowed)})")
    _one_folder_name_each(config["study"]["models"], config["sweeps"]["models"], refuse)
    for index, device in enumerate(config["study"]["devices"]):
        if not typed.is_device(device):
            refuse(
                ("study", "devices", index),
                f"study.devices.{index}: {device!r} is malformed (allowed: {typed.DEVICE_ALLOWED})",
            )


def _one_folder_name_each(study_models: list, sweeps_models: list, refuse) -> None:
    """Every model a run can name (study.models and sweeps.models) has one folder name (results/runs/<slug>/): two
    names sharing one would write each other's records, and the rules would run one model for the other."""
    slugs: dict[str, str] = {}
    listed = [(("study", "models", i), name) for i, name in enumerate(study_models)]
    listed += [(("sweeps", "models", i), name) for i, name in enumerate(sweeps_models)]
    for key_path, name in listed:
        other = slugs.setdefault(model_spec.slug(name), name)
        if other != name:
            refuse(
                key_path,
                f"{_key_path(key_path)}: {name!r} and {other!r} share the folder name {model_spec.slug(name)!r}; "
                f"rename one file or function",
            )


def _integers(value, where: tuple, refuse) -> None:
    """An integer beyond MAX_INTEGER (train.cpu_threads: 10**20 reached torch.set_num_threads as a traceback), and a
    whole number written with a fraction (`epochs: 3.0`, `batch_size: 32.0`) where the schema wants an integer: the
    schema takes 3.0 for an integer (JSON Schema does), every YAML reader reads the float 3.0, and training ended
    in torch's traceback (batch_size should be a positive integer value, but got batch_size=32.0)."""
    if isinstance(value, dict):
        for key, item in value.items():
            _integers(item, (*where, key), refuse)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _integers(item, (*where, index), refuse)
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INTEGER:
        refuse(where, f"{_key_path(where)}: {value} is beyond any count or seed gpuscale takes (at most {MAX_INTEGER})")
    elif isinstance(value, float) and value.is_integer() and "number" not in (_schema_types(where) or {"number"}):
        refuse(
            where,
            f"{_key_path(where)}: {value!r} is a whole number written with a fraction; write {int(value)}",
        )


def _error_path(error) -> tuple:
    """The key a jsonschema error is about (an unknown key's own path, not its parent's)."""
    path = tuple(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {})) if isinstance(error.schema, dict) else set()
        extra = sorted(set(error.instance) - allowed)
        return (*path, extra[0]) if extra else path
    if error.validator in ("oneOf", "anyOf", "allOf") and error.context:
        return _error_path(min(error.context, key=lambda e: len(list(e.absolute_path))))
    return path


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
