"""Generated documentation, so that nothing quoting a number or a key can drift from its source.

- README.md's headline block: the reference study's key results and speedup table, from its aggregated tables.
- docs/params.md's reference block: every key of the params schema with its type, allowed values, default
  (params.yaml) and description.

Each block sits between `<!-- BEGIN generated:NAME -->` and `<!-- END generated:NAME -->`; tests check that the
files hold what these functions give. Rebuild both with `reference/report.sh reference/h200-2026-12-04`,
or one of them with `python -m gpuscale.present.docs params` / `python -m gpuscale.present.docs readme TABLES_DIR`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = ROOT / "workflow" / "schemas" / "params.schema.yaml"
PARAMS = ROOT / "params.yaml"
README = ROOT / "README.md"
PARAMS_DOC = ROOT / "docs" / "params.md"
REFERENCE = "reference/h200-2026-12-04"


def block(name: str, text: str) -> str | None:
    """The generated block NAME of a file's text (None when the file has none)."""
    m = re.search(rf"<!-- BEGIN generated:{name} [^>]*-->\n(.*?)<!-- END generated:{name} -->", text, flags=re.S)
    return m.group(1) if m else None


def replace_block(text: str, name: str, content: str) -> str:
    pattern = rf"(<!-- BEGIN generated:{name} [^>]*-->\n)(.*?)(<!-- END generated:{name} -->)"
    if not re.search(pattern, text, flags=re.S):
        raise ValueError(f"no generated:{name} block")
    return re.sub(pattern, lambda m: m.group(1) + content + m.group(3), text, count=1, flags=re.S)


# ---- params reference ----------------------------------------------------------------------------------------------
def _resolve(node: dict, schema: dict) -> dict:
    while "$ref" in node:
        path = node["$ref"].removeprefix("#/").split("/")
        target = schema
        for part in path:
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _kind(node: dict) -> str:
    if "enum" in node:
        return "one of " + ", ".join(f"`{v}`" if v is not None else "`null`" for v in node["enum"])
    kinds = node.get("type", "")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    words = " or ".join(k for k in kinds if k) or "any"
    bounds = []
    for key, sign in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<")):
        if key in node:
            bounds.append(f"{sign} {node[key]}")
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        inner = _kind(node["items"])
        words = f"list of {inner}"
    if "pattern" in node:
        bounds.append(f"matching `{node['pattern']}`")
    return words + (f" ({', '.join(bounds)})" if bounds else "")


def _default(params: dict, path: list[str]):
    node = params
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return "—"
        node = node[part]
    if isinstance(node, dict):
        return "—" if node else "`{}`"
    text = yaml.safe_dump(node, default_flow_style=True, width=10_000).strip()
    text = text.removesuffix("...").strip()
    return f"`{text}`" if len(text) <= 40 else f"`{text[:37]}...`"


TRAIN_KEYS = "#/definitions/train_keys"


def _refs_train_keys(node: dict) -> bool:
    options = [node, *node.get("oneOf", []), *node.get("anyOf", []), *node.get("allOf", [])]
    return any(o.get("$ref") == TRAIN_KEYS for o in options)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _rows(node: dict, schema: dict, params: dict, path: list[str]) -> list[str]:
    if path != ["train"] and _refs_train_keys(node):
        description = " ".join(str(node.get("description", "")).split())
        return [f"| `{'.'.join(path)}` | any key of `train` | {_default(params, path)} | {_cell(description)} |"]
    for part in node.get("allOf", []):
        node = {**{k: v for k, v in node.items() if k != "allOf"}, **_resolve(part, schema)}
    node = _resolve(node, schema)
    rows = []
    props = node.get("properties")
    patterns = node.get("patternProperties") or (
        {"<name>": node["additionalProperties"]} if isinstance(node.get("additionalProperties"), dict) else {}
    )
    if path and (not props or node.get("description")):
        description = " ".join(str(node.get("description", "")).split())
        kind = _kind(node) if not props else "mapping"
        rows.append(f"| `{'.'.join(path)}` | {_cell(kind)} | {_cell(_default(params, path))} | {_cell(description)} |")
    for key, child in (props or {}).items():
        rows += _rows(child, schema, params, [*path, key])
    for _, child in patterns.items():
        rows += _rows(child, schema, {}, [*path, "<name>"])
    return rows


def params_reference(schema_path: Path = SCHEMA, params_path: Path = PARAMS) -> str:
    schema = yaml.safe_load(Path(schema_path).read_text())
    params = yaml.safe_load(Path(params_path).read_text())
    lines = ["| key | type / allowed | default (`params.yaml`) | description (from the schema) |", "|---|---|---|---|"]
    return "\n".join(lines + _rows(schema, schema, params, [])) + "\n"


# ---- the README's headline -----------------------------------------------------------------------------------------
def readme_headline(tables: dict, tolerance: float = 0.02) -> str:
    """The reference study's key results and speedup table in Markdown, from its tables alone; a figure whose CPU and
    GPU crossed machine leases carries †, one whose lease was not recorded ‡ (the key is in the last line)."""
    from gpuscale.present.sections.headline import headline
    from gpuscale.present.sections.key import key_results

    key = key_results(tables)
    head = headline(tables["speedup"], tolerance)
    state = f" {key['conditions']}." if key.get("conditions") else ""
    lines = [
        f"Measured by the reference study (`{REFERENCE}/`, {tables['runs'].height} records).{state} "
        f"{key['definition']}",
        "",
    ]
    for source in key["sources"]:
        lines += [f"- {finding}" for finding in source["findings"]]
    lines += [
        "",
        "| model | parameters | training FLOPs / image | " + " | ".join(head["header"]) + " |",
        "|---|---|---|" + "---|" * len(head["header"]),
    ]
    for row in head["rows"]:
        cells = []
        for cell in row["cells"]:
            detail = [line for line in cell["lines"] if "·" not in line and "accuracy" not in line]
            text = f"**{cell['value']}**" if cell["value"] not in ("not run", "not reported", "—") else cell["value"]
            cells.append(" ".join([text + cell.get("mark", ""), *detail]).replace("|", "/"))
        lines.append(f"| {row['model']} | {row['parameters']} | {row['flops']} | " + " | ".join(cells) + " |")
    notes = [f"- {row['model']}: {note}." for row in head["rows"] for note in row["notes"]]
    if notes:
        lines += ["", *notes]
    marks = "".join(f" {mark}." for mark in head["marks"])
    lines += [
        "",
        "Brackets (where a figure was repeated): an interval holding the spread between epochs, rounds and machine "
        'leases and the 95% bootstrap over seeds ("1 lease": measured in one lease, so no lease-to-lease spread; '
        '"1 run, 1 lease": one run per device, no interval); '
        "steady: the first epoch (compilation, warm-up) left out; sampled*: the time extrapolated from a few timed "
        f"steps per epoch, its error in no interval (checked on full runs in the report).{marks}",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv[:1] == ["params"]:
        PARAMS_DOC.write_text(replace_block(PARAMS_DOC.read_text(), "params", params_reference()))
        return 0
    if argv[:1] == ["readme"] and len(argv) == 2:
        from gpuscale.present.charts import read_tables  # the table contract, via charts

        README.write_text(replace_block(README.read_text(), "headline", readme_headline(read_tables(Path(argv[1])))))
        return 0
    print("usage: python -m gpuscale.present.docs params | readme TABLES_DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
