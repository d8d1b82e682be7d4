"""The run record: the contract between training and everything after it.

One JSON document per run, versioned by SCHEMA_VERSION and described by schemas/run-record.schema.json.
`load()` is the one reader every consumer uses; `write()` validates and writes atomically.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path
from typing import Any

from gpuscale import fsutil

DATA_FILES = ("schemas/run-record.schema.json",)  # package data this module reads (gpuscale.deps)
SCHEMA_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
KIND = "gpuscale.run"


class RecordError(ValueError):
    """A record that cannot be used; str() names the file and what is wrong."""


@functools.cache
def schema() -> dict[str, Any]:
    return json.loads(resources.files("gpuscale").joinpath("schemas/run-record.schema.json").read_text())


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
        raise RecordError(f"{source}: {where}: {error.message}")


def write(path: Path | str, record: dict) -> None:
    validate(record, source=str(path))
    fsutil.write_json(path, record)


def load(path: Path | str) -> dict:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise RecordError(f"{path}: cannot read ({err.strerror})") from None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as err:
        raise RecordError(f"{path}: not valid JSON (line {err.lineno}: {err.msg}); truncated or hand-edited?") from None
    if not isinstance(record, dict):
        raise RecordError(f"{path}: not a run record (top level is not an object)")
    validate(record, source=str(path))
    return record


def key(record: dict) -> tuple:
    """(model, device, variant, seed), plus (parameter, value) for a sweep run."""
    k = record["key"]
    sweep = k.get("sweep")
    return (k["model"], k["device"], k["variant"], k["seed"]) + ((sweep["parameter"], sweep["value"]) if sweep else ())
