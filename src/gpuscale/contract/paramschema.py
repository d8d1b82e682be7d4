"""The params schema (contract/schemas/params.schema.yaml), what it allows at a key path, and the error a params
file that cannot be used raises. Torch-free: the Snakefile imports it, through gpuscale.contract.params."""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

import yaml

DATA_FILES = ("contract/schemas/params.schema.yaml",)  # package data this module reads (gpuscale.deps)


class ParamsError(ValueError):
    """A params file that cannot be used; str() is the one line shown to the user. key_path: the key it names
    (a tuple), where known; detail: the line without the file it was found in."""

    def __init__(self, message: str, key_path: tuple | None = None, detail: str | None = None):
        super().__init__(message)
        self.key_path = key_path
        self.detail = detail if detail is not None else message


@functools.cache
def schema() -> dict[str, Any]:
    text = resources.files("gpuscale").joinpath("contract/schemas/params.schema.yaml").read_text()
    # libyaml's parser where PyYAML has it: the same document, read in a tenth of the time (the Snakefile reads it).
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _schema_types(path: tuple) -> set[str] | None:
    """The JSON types the schema allows at a key path (None: unknown), to name the one fix that fits."""
    nodes = [schema()]
    for part in path:
        nodes = [n for node in nodes for n in _schema_children(node, part)]
    types: set[str] = set()
    for node in nodes:
        for sub in _schema_alternatives(node):
            kind = sub.get("type")
            types.update([kind] if isinstance(kind, str) else kind or [])
    return types or None


def _schema_alternatives(node: dict) -> list[dict]:
    if "$ref" in node:
        node = {**node, **schema()["definitions"][node["$ref"].rsplit("/", 1)[-1]]}
    out = [node]
    for key in ("allOf", "oneOf", "anyOf"):
        for sub in node.get(key, []):
            out += _schema_alternatives(sub)
    return out


def _schema_children(node: dict, part) -> list[dict]:
    out = []
    for sub in _schema_alternatives(node):
        if isinstance(part, int) and isinstance(sub.get("items"), dict):
            out.append(sub["items"])
        elif part in sub.get("properties", {}):
            out.append(sub["properties"][part])
        elif isinstance(sub.get("additionalProperties"), dict):
            out.append(sub["additionalProperties"])
    return out


def _key_path(parts) -> str:
    return ".".join(str(p) for p in parts) or "(top level)"
