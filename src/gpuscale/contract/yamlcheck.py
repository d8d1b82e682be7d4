"""params files mean one thing to their three readers: gpuscale and Snakemake (PyYAML, YAML 1.1) and DVC
(ruamel.yaml, YAML 1.2). Torch-free: the Snakefile imports it, through gpuscale.contract.params."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml

from gpuscale.contract.paramschema import ParamsError, _key_path, _schema_types

# gpuscale and Snakemake (--configfile, through yte) read params with PyYAML, which follows YAML 1.1; DVC reads
# params.yaml with ruamel.yaml, which follows YAML 1.2 (and refuses a repeated key). A plain scalar whose two
# readings differ (`1e-3`, `no`, `017`, `0o17`, `12:30`) is refused with the spelling both read alike, and so is a
# repeated key, an explicit tag, a date and a number that is not finite. What is left means one thing to all three.
# The YAML 1.2 reading below is ruamel.yaml's (0.19: its resolver's patterns and constructor);
# tests/test_faults_params.py checks it against ruamel.yaml itself.

READERS_11 = "YAML 1.1 readers (PyYAML: gpuscale, Snakemake)"
READERS_12 = "YAML 1.2 readers (ruamel.yaml: DVC)"
_TAG = "tag:yaml.org,2002:"
_RESOLVERS_12 = [  # (tag, pattern), tried in this order, as ruamel.yaml's VersionedResolver does for YAML 1.2
    ("bool", r"true|True|TRUE|false|False|FALSE"),
    (
        "float",
        r"[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)"
        r"|[-+]?\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
    ),
    ("int", r"[-+]?0b[0-1_]+|[-+]?0o?[0-7_]+|[-+]?[0-9_]+|[-+]?0x[0-9a-fA-F_]+"),
    ("merge", r"<<"),
    ("value", r"="),  # a YAML 1.1 'value' key: both versions refuse to construct it
    ("null", r"~|null|Null|NULL|"),
    (
        "timestamp",
        r"[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]|[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?"
        r"(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9](?:\.[0-9]*)?"
        r"(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?",
    ),
]


_FIRST_12 = {
    "bool": "tTfF",
    "float": "-+0123456789.",
    "int": "-+0123456789",
    "merge": "<",
    "null": "~nN",
    "timestamp": "0123456789",
    "value": "=",
}


_UNREADABLE = object()


def _reading_12(text: str):
    """What ruamel.yaml (YAML 1.2) makes of a plain scalar: (tag, value); value _UNREADABLE where it raises."""
    for tag, pattern in _RESOLVERS_12:
        if (text[:1] in _FIRST_12[tag] or (tag == "null" and not text)) and re.fullmatch(pattern, text):
            break
    else:
        return "str", text
    try:
        if tag == "bool":
            return tag, text.lower() == "true"
        if tag == "null":
            return tag, None
        if tag == "value":
            return tag, _UNREADABLE
        if tag in ("merge", "timestamp"):
            return tag, text  # the same in both versions: compared by tag only
        value = text.replace("_", "")
        sign = -1 if value[0] == "-" else 1
        value = value[1:] if value[0] in "+-" else value
        if tag == "float":
            value = value.lower()
            return tag, sign * math.inf if value == ".inf" else math.nan if value == ".nan" else sign * float(value)
        bases = {"0b": 2, "0x": 16, "0o": 8}
        return tag, sign * (int(value[2:], bases[value[:2]]) if value[:2] in bases else int(value))
    except (ValueError, IndexError):
        return tag, _UNREADABLE


def _same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


def _words(tag: str, value) -> str:
    if value is _UNREADABLE:
        return "an error"
    return {
        "str": "text",
        "bool": f"the boolean {str(value).lower()}",
        "int": f"the integer {value}",
        "float": f"the number {value!r}",
        "null": "null (no value)",
        "timestamp": "a date",
    }.get(tag, tag)


def _plain_text(tag: str, value, original: str) -> str | None:
    """How to write `value` so that both readers read it alike, or None."""
    if value is _UNREADABLE or tag not in ("bool", "int", "float", "null"):
        return None
    if tag == "bool":
        return "true" if value else "false"
    if tag == "null":
        return "null"
    if tag == "int":
        return str(value)
    match = re.fullmatch(r"([-+]?)([0-9]*)\.?([0-9]*)[eE]([-+]?)([0-9]+)", original.replace("_", ""))
    if match and math.isfinite(value):  # keep the writer's exponent form: 1e-3 -> 1.0e-3
        sign, whole, part, esign, exponent = match.groups()
        text = f"{sign}{whole or '0'}.{part or '0'}e{esign or '+'}{exponent}"
    else:
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:
            mantissa, exponent = text.split("e")
            text = f"{mantissa}.0e{exponent}"
    return text if _same(yaml.safe_load(text), value) and _same(_reading_12(text)[1], value) else None


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _fix(path: tuple, text: str, readings: list[tuple[str, Any]]) -> str:
    """'write 1.0e-3' (the schema wants a number), "write 'no'" (text), or both choices where either fits."""
    types = _schema_types(path) or {"string", "number", "integer", "boolean", "null"}
    wanted = {"str": {"string"}, "bool": {"boolean"}, "int": {"integer", "number"}, "float": {"number"}}
    if readings[0][0] == readings[1][0] == "int" and "integer" in types:  # 017: octal to one, decimal to the other
        (_, first), (_, second) = readings
        return f"write {second} (as YAML 1.2 reads it), or {first} (as YAML 1.1 reads it), without the leading zero"
    choices = []
    for tag, value in readings:
        if tag == "str" and "string" in types:
            choices.append(f"{_quoted(text)} for text")
        elif wanted.get(tag, {tag}) & types or (tag == "int" and "number" in types):
            plain = _plain_text(tag, value, text)
            if plain is not None:
                choices.append(f"{plain} for {_words(tag, value)}")
        elif tag == "float" and "integer" in types and value is not _UNREADABLE and float(value).is_integer():
            choices.append(f"{int(value)} for the integer {int(value)}")  # `epochs: 1e1`: write 10
    choices = list(dict.fromkeys(choices))
    if not choices:
        return f"write it so that both read it alike (quote it for text: {_quoted(text)})"
    if len(choices) == 1:
        return "write " + choices[0].rsplit(" for ", 1)[0]
    return "write " + ", or ".join(choices)


# The line of every key of the params files read in this process: {file: {key path: line}}, so that a schema
# error in a merged config names the file and line that set the key.
_POSITIONS: dict[str, dict[tuple, int]] = {}


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader that remembers which scalars were plain (untagged, unquoted): the ones YAML 1.1 and
    1.2 resolve by pattern."""

    def compose_scalar_node(self, anchor):
        event = self.peek_event()
        node = super().compose_scalar_node(anchor)
        node.plain = event.tag is None and event.implicit[0]
        node.explicit_tag = event.tag not in (None, "!")
        return node


def _check_node(node, path: Path, where: tuple, loader: _Loader, seen: set, ancestors: tuple = ()) -> None:
    """Refuse what PyYAML (gpuscale, Snakemake) and ruamel.yaml (DVC) would read differently, or what a params
    value cannot be (a date, a tag, a number that is not finite), naming the key, file and line."""
    line = f"{path}: line {node.start_mark.line + 1}: {_key_path(where)}"
    if id(node) in seen:
        if any(node is outer for outer in ancestors):
            raise ParamsError(f"{line}: an alias that holds itself (an endless value); write the value out")
        return  # an alias of a node already checked
    seen.add(id(node))
    ancestors = (*ancestors, node)
    if isinstance(node, yaml.ScalarNode):
        _check_scalar(node, line, where, loader)
    elif isinstance(node, yaml.SequenceNode):
        if node.tag != _TAG + "seq":
            raise ParamsError(f"{line}: tag {node.tag.replace(_TAG, '!!')} is not allowed in a params file; remove it")
        for index, item in enumerate(node.value):
            _check_node(item, path, (*where, index), loader, seen, ancestors)
    elif isinstance(node, yaml.MappingNode):
        if node.tag != _TAG + "map":
            raise ParamsError(f"{line}: tag {node.tag.replace(_TAG, '!!')} is not allowed in a params file; remove it")
        keys: dict[str, int] = {}
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag == _TAG + "merge":
                _check_node(value, path, where, loader, seen, ancestors)  # `<<: *defaults`: both read merges alike
                continue
            name = _check_key(key, path, where, loader)
            if name in keys:
                raise ParamsError(
                    f"{path}: line {key.start_mark.line + 1}: {_key_path([*where, name])}: key given twice (lines "
                    f"{keys[name]} and {key.start_mark.line + 1}); PyYAML (gpuscale, Snakemake) keeps the last, "
                    f"ruamel.yaml (DVC) refuses the file: remove one"
                )
            if name is not None:
                keys[name] = key.start_mark.line + 1
                _POSITIONS.setdefault(str(path), {})[(*where, name)] = key.start_mark.line + 1
                _check_node(value, path, (*where, name), loader, seen, ancestors)


def _check_key(key, path: Path, where: tuple, loader: _Loader) -> str | None:
    """A key's text, checked like a value (`no:` is false to one reader, text to the other); None for a key
    that is not text to either reader (the check of read_yaml names it)."""
    line = f"{path}: line {key.start_mark.line + 1}"
    if not isinstance(key, yaml.ScalarNode):
        return None
    if getattr(key, "plain", False):
        tag11, tag12 = key.tag.replace(_TAG, ""), _reading_12(key.value)[0]
        if tag11 != tag12 and "str" in (tag11, tag12):
            reading = "text" if tag11 == "str" else f"{_words(tag11, loader.construct_object(key))}"
            other = "text" if tag12 == "str" else f"{_words(*_reading_12(key.value))}"
            raise ParamsError(
                f"{line}: {_key_path([*where, key.value])}: key `{key.value}` is read as {reading} by {READERS_11} "
                f"but as {other} by {READERS_12}: quote it ({_quoted(key.value)})"
            )
    return key.value if key.tag == _TAG + "str" else None


def _dvc_number(where: tuple, tag11: str, tag12: str, value12) -> bool:
    """`1e-05`, `1E3`, `-.5` where the schema wants a number and never text: YAML 1.2 (DVC) reads a number, YAML 1.1
    text, which no number key can hold. `dvc exp run -S train.optimizer.lr=1e-5` writes `lr: 1e-05`, so gpuscale
    reads such a value as the number, and the Snakefile replaces Snakemake's reading of the params with gpuscale's
    (workflow/rules/common.smk): all three readers then hold the number."""
    if tag11 != "str" or tag12 != "float" or value12 is _UNREADABLE:
        return False
    types = _schema_types(where) or set()
    return "number" in types and "string" not in types


def _check_scalar(node, line: str, where: tuple, loader: _Loader) -> None:
    text = node.value
    if getattr(node, "explicit_tag", False) and node.tag != _TAG + "str":
        raise ParamsError(
            f"{line}: tag {node.tag.replace(_TAG, '!!')} is not allowed in a params file (the readers construct "
            f"tagged values differently); write the plain value, or quote it for text"
        )
    if not getattr(node, "plain", False):
        return
    tag11 = node.tag.replace(_TAG, "")
    try:
        value11 = loader.construct_object(node, deep=True)
    except (ValueError, yaml.YAMLError):
        value11 = _UNREADABLE
    tag12, value12 = _reading_12(text)
    if tag11 == tag12 == "timestamp":
        raise ParamsError(f"{line}: `{text}` is read as a date, which a params value cannot be: write {_quoted(text)}")
    for tag, value in ((tag11, value11), (tag12, value12)):
        if tag == "float" and value is not _UNREADABLE and not math.isfinite(value):
            raise ParamsError(f"{line}: `{text}` is not a finite number; write a number (such as 0.1)")
    if _dvc_number(where, tag11, tag12, value12):
        node.tag = _TAG + "float"  # read as YAML 1.2 reads it; the Snakefile takes gpuscale's reading
        loader.constructed_objects.pop(node, None)  # the text constructed above
        return
    if tag11 != tag12 or not _same(value11, value12) or _UNREADABLE in (value11, value12):
        if value11 is _UNREADABLE and value12 is _UNREADABLE:
            raise ParamsError(
                f"{line}: `{text}` is an error to every YAML reader; write a number, or quote it for text"
            )
        raise ParamsError(
            f"{line}: `{text}` is read as {_words(tag11, value11)} by {READERS_11} but as {_words(tag12, value12)} "
            f"by {READERS_12}: {_fix(where, text, [(tag11, value11), (tag12, value12)])}"
        )


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
