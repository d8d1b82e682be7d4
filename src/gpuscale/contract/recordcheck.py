"""What a run record's text and values must be beyond its schema (issue 28, family 1), torch-free: every key once,
every number finite and within what any run can hold, every text real Unicode, every time a real date-time with
its UTC offset, and a run that ends after it starts. gpuscale.contract.record.load() applies it to every record,
so a figure out of range never reaches a table (where 1e400 was infinity, 1e-320 s a speedup of infinity, and
a seed of 2**70 a Polars overflow)."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from pathlib import Path

from gpuscale.contract import paths

# No figure of a run reaches it (the largest in the shipped records: 5e13 FLOP/s); below it every integer fits a
# table's Int64 and a product or ratio of two figures stays finite.
LARGEST = 10**18
PROBE_MAX_BYTES = 64 << 20  # the largest shipped probe record is 170 KiB; a bigger file is no probe record
TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})")


class BadValue(ValueError):
    """A value no record can hold; str() names where it lies and what is wrong."""


def read_json(path: Path, what: str, limit: int):
    """The JSON document of a record file from outside (a run or probe record), read only when it is a regular file
    of at most `limit` bytes (gpuscale.contract.paths.read_regular) and holds UTF-8 text, finite numbers and each
    key once; check_values is applied to it. BadValue otherwise, one line naming the file."""
    try:
        text = paths.read_regular(path, limit, what).decode("utf-8")
    except paths.PathError as err:
        raise BadValue(str(err)) from None
    except UnicodeDecodeError as err:
        raise BadValue(f"{path}: not UTF-8 text (bad byte at offset {err.start}), so not a {what}") from None
    try:
        doc = json.loads(text, parse_constant=_not_finite, parse_float=finite_float, object_pairs_hook=unique_keys)
        check_values(doc)
    except BadValue as err:
        raise BadValue(f"{path}: {err}") from None
    except json.JSONDecodeError as err:
        raise BadValue(f"{path}: not valid JSON (line {err.lineno}: {err.msg}); truncated or hand-edited?") from None
    except RecursionError:
        raise BadValue(f"{path}: JSON nested far too deeply to be a {what}") from None
    return doc


def _not_finite(constant: str):
    """json's hook for NaN, Infinity and -Infinity, which Python reads but no timing can be."""
    raise BadValue(f"holds {constant}, not a finite number; a record's figures are finite")


def finite_float(text: str) -> float:
    """json's hook for a number with a fraction or exponent: 1e400 reads as infinity, which no figure can be."""
    value = float(text)
    if not math.isfinite(value):
        raise BadValue(f"holds {text}, beyond any finite number; a record's figures are finite")
    return value


def unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """json's hook for an object: a key given twice is refused (Python keeps the last, other readers the first)."""
    value = dict(pairs)
    if len(value) != len(pairs):
        names = [k for k, _ in pairs]
        twice = next(k for k in names if names.count(k) > 1)
        raise BadValue(f"key {twice!r} is given twice in one object; remove one")
    return value


def check_values(value, where: str = "") -> None:
    """Raise BadValue naming the first number beyond LARGEST or text that is not Unicode (a lone surrogate, which
    JSON's \\ud800 escape makes and no table can store)."""
    if isinstance(value, dict):
        for key, item in value.items():
            _check_text(key, where or "(top level)")
            check_values(item, f"{where}.{key}" if where else key)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_values(item, f"{where}.{i}" if where else str(i))
    elif isinstance(value, str):
        _check_text(value, where)
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) >= LARGEST:
        shown = f"a number of {len(str(abs(value)))} digits" if isinstance(value, int) else f"{value:.3g}"
        raise BadValue(f"{where}: {shown} is beyond any figure a run holds (at most 1e18)")


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadValue(f"{where}: holds text that is not Unicode (a lone surrogate, \\ud800-\\udfff)") from None


def check_times(record: dict) -> None:
    """started_at and finished_at (and a sentinel's taken_at) as gpuscale writes them: ISO 8601 date-times with
    their UTC offset; a run finishes no earlier than it starts."""
    times = {name: _timestamp(record.get(name), name) for name in ("started_at", "finished_at")}
    for side in ("before", "after"):
        sentinel = (record.get("conditions") or {}).get(side)
        if sentinel:
            _timestamp(sentinel.get("taken_at"), f"conditions.{side}.taken_at")
    if times["finished_at"] < times["started_at"]:
        raise BadValue(
            f"finished_at {record['finished_at']} is before started_at {record['started_at']}; a run ends after it "
            "starts"
        )


def _timestamp(text, where: str) -> dt.datetime:
    if not isinstance(text, str) or not TIMESTAMP.fullmatch(text):
        raise BadValue(
            f"{where}: {str(text)[:40]!r} is not a date-time with its UTC offset (2026-01-01T00:00:00+00:00)"
        )
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as err:
        raise BadValue(f"{where}: {text!r} is not a date-time ({err})") from None


def check_identity(record: dict) -> None:
    """A record says which model it ran in two places (key.model, model.name) and numbers its epochs 1, 2, ...: a
    hand edit that changed one of a pair, or copied an epoch, is refused."""
    named = (record.get("model") or {}).get("name")
    if named is not None and named != record["key"]["model"]:
        raise BadValue(f"key.model is {record['key']['model']!r} but model.name is {named!r}; one run is one model")
    numbers = [epoch["epoch"] for epoch in record["epochs"]]
    if numbers != list(range(1, len(numbers) + 1)):
        raise BadValue(f"epochs are numbered {_shown(numbers)}, not 1 to {len(numbers)} in order")


def _shown(numbers: list[int]) -> str:
    return ", ".join(map(str, numbers[:8])) + (", ..." if len(numbers) > 8 else "")
