"""The contract written once: record types against the JSON schema, the device pattern, function size."""

from __future__ import annotations

import ast
import dataclasses
import json

import pytest
import yaml
from conftest import REPO

from gpuscale import devices
from gpuscale.contract import params, record, settings

MAX_FUNCTION_LINES = 60
# Every function in src/ is under the limit; a name here would be a known exception (none are left).
KNOWN_LONG: set[str] = set()


def test_no_function_in_src_is_over_60_lines():
    long = set()
    for path in sorted((REPO / "src/gpuscale").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            function = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            if function and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                long.add(f"{path.relative_to(REPO / 'src/gpuscale').as_posix()}:{node.name}")
    assert long - KNOWN_LONG == set(), "split these into steps"
    assert KNOWN_LONG - long == set(), "cut below the limit now: remove from KNOWN_LONG"


def schema() -> dict:
    return json.loads((REPO / "src/gpuscale/contract/schemas/run-record.schema.json").read_text())


def object_schema(node: dict) -> dict:
    """The object branch of a section (sections are 'an object or null')."""
    for alternative in node.get("oneOf", []) + node.get("anyOf", []):
        if "properties" in alternative:
            return alternative
    return node


@pytest.mark.parametrize("section", sorted(record.SECTIONS))
def test_record_dataclasses_match_the_json_schema(section):
    """Field names are the schema's properties; fields without a default are the schema's required keys."""
    node = object_schema(schema()["properties"][section])
    fields = dataclasses.fields(record.SECTIONS[section])
    names = {f.name for f in fields}
    required = {f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    assert set(node["required"]) == required
    if node.get("additionalProperties") is False:
        assert set(node["properties"]) == names
    else:  # open-ended sections: the dataclass names what every record has
        assert names <= set(node["properties"]) | set(node["required"])


def test_epoch_dataclass_matches_the_schema():
    node = schema()["definitions"]["epoch"]
    fields = dataclasses.fields(record.Epoch)
    assert {f.name for f in fields} == set(node["properties"])
    assert {
        f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    } == set(node["required"])


def test_record_versions_the_schema_accepts_are_the_readable_ones():
    assert schema()["properties"]["schema_version"]["enum"] == list(record.READABLE_VERSIONS)
    assert max(record.READABLE_VERSIONS) == record.SCHEMA_VERSION


def test_a_record_from_a_newer_gpuscale_says_to_upgrade(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema_version": record.SCHEMA_VERSION + 1, "kind": record.KIND}))
    with pytest.raises(
        record.RecordError, match=rf"written by a newer gpuscale \(schema {record.SCHEMA_VERSION + 1}\)"
    ):
        record.load(path)


def test_every_shipped_record_reads_in_the_current_shape():
    paths = sorted((REPO / "reference").rglob("runs/**/*.json"))
    assert paths
    for path in paths:
        rec = record.load(path)
        for epoch in rec["epochs"]:
            record.Epoch(**epoch)
        if rec["timing"] is not None:
            record.Timing(**rec["timing"])
        assert "distributed" in rec and "energy" in rec and "phase_profile" in rec


def test_the_device_pattern_is_written_once():
    """Built from the kinds' lines (gpuscale.devices); the schemas carry it as `python -m gpuscale.devices --write`
    writes it, and the rules constrain their wildcards with it."""
    assert devices.stale_schemas(REPO / "src/gpuscale") == [], "run python -m gpuscale.devices --write"
    text = (REPO / "src/gpuscale/contract/schemas/params.schema.yaml").read_text()
    study = yaml.safe_load(text)["properties"]["study"]["properties"]["devices"]["items"]
    assert study["pattern"] == f"^({settings.DEVICE_PATTERN})$"
    assert schema()["properties"]["key"]["properties"]["device"]["pattern"] == f"^({settings.DEVICE_PATTERN})$"
    rules = {name: (REPO / f"workflow/rules/{name}.smk").read_text() for name in ("train", "predict")}
    assert "device=typed.DEVICE_PATTERN" in rules["train"] and "device=typed.GPU_DEVICE_PATTERN" in rules["train"]
    assert "device=typed.PROCESS_DEVICE_PATTERN" in rules["predict"]
    for text in rules.values():  # no device name spelled out in a wildcard constraint
        assert not [line for line in text.splitlines() if line.strip().startswith("device=r")]


def test_a_stale_schema_pattern_is_found_and_rewritten(tmp_path, monkeypatch):
    for name, _, _ in devices.SCHEMA_PATTERNS:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((REPO / "src/gpuscale" / name).read_text())
    monkeypatch.setitem(devices.KINDS, "xpu", devices.Kind("xpu", gpu=True, words="GPU (XPU)", indexed=True))
    assert devices.stale_schemas(tmp_path) == [
        "contract/schemas/params.schema.yaml: study.devices.items",
        "contract/schemas/params.schema.yaml: sweeps.gpu_device",
        "contract/schemas/run-record.schema.json: key.device",
    ]
    devices.stale_schemas(tmp_path, write=True)
    assert devices.stale_schemas(tmp_path) == []
    rewritten = yaml.safe_load((tmp_path / "contract/schemas/params.schema.yaml").read_text())
    assert (
        rewritten["properties"]["sweeps"]["properties"]["gpu_device"]["pattern"]
        == "^(cuda(-[0-9]+)?|mps|xpu(-[0-9]+)?)$"
    )
    before = (REPO / "src/gpuscale/contract/schemas/run-record.schema.json").read_text().splitlines()
    after = (tmp_path / "contract/schemas/run-record.schema.json").read_text().splitlines()
    assert [a for a, b in zip(before, after, strict=True) if a != b] == [
        line for line in before if '"pattern": "^(cpu|cuda' in line
    ]  # one line changed, the rest of the file as it was


@pytest.mark.parametrize(
    ("spec", "kind", "index", "world"),
    [("cpu", "cpu", None, 1), ("cuda", "cuda", None, 1), ("cuda-3", "cuda", 3, 1), ("mps", "mps", None, 1),
     ("cuda-ddp4", "cuda", None, 4), ("cpu-ddp2", "cpu", None, 2)],
)  # fmt: skip
def test_device_spec_is_parsed_once(spec, kind, index, world):
    parsed = settings.DeviceSpec.parse(spec)
    assert (parsed.kind, parsed.index, parsed.world_size, str(parsed)) == (kind, index, world, spec)
    assert params.data_parallel_size(spec) == world


@pytest.mark.parametrize("spec", ["gpu", "cuda:1", "cuda-ddp1", "cpu-ddp", "CUDA"])
def test_malformed_device_specs_are_refused(spec):
    assert not settings.is_device(spec)
    with pytest.raises(ValueError, match="malformed"):
        settings.DeviceSpec.parse(spec)


def test_typed_run_settings_round_trip_to_what_the_record_keeps(base_params):
    config = params.deep_merge(base_params, {"sweeps": {"train": {"epochs": 1}}})
    for plain in (
        params.run_settings(config, "resnet18", "cuda-ddp2", "paper", 1),
        params.sweep_settings(config, "simplecnn", "cpu", "threads", 4, "paper", 0),
    ):
        typed = settings.RunSettings.from_dict(plain)
        assert typed.to_dict() == plain
        assert typed.train.batch_size == plain["train"]["batch_size"]
    assert params.typed_run_settings(config, "resnet18", "cuda-ddp2", "paper", 1).device.world_size == 2


def test_fits_are_identified_by_the_enum_not_their_label():
    import polars as pl

    from gpuscale.analyze import fits, tables

    speedup = pl.DataFrame(
        {
            "source": ["h"] * 3,
            "variant": ["paper"] * 3,
            "parameters": [1e5, 1e6, 1e7],
            "train_flops_per_image": [1e7, 1e8, 1e9],
            "speedup": [2.0, 5.0, 12.0],
            "cpu_epoch_seconds": [10.0, 50.0, 200.0],
            "gpu_epoch_seconds": [5.0, 10.0, 16.0],
        }
    )
    sweeps = pl.DataFrame(
        {"source": ["h"] * 3, "model": ["m"] * 3, "variant": ["paper"] * 3, "parameter": ["threads"] * 3,
         "value": [1, 2, 4], "epoch_seconds": [10.0, 6.0, 4.0]}
    )  # fmt: skip
    fit_table, _ = fits.fits(speedup, sweeps)
    assert dict(fit_table.schema) == tables.FITS_SCHEMA
    ids = set(fit_table["fit_id"])
    assert ids == {f.value for f in tables.Fit}
    threads = fit_table.filter(pl.col("fit_id") == tables.Fit.THREADS)
    assert threads["model"].to_list() == ["m"] and threads["fit"].to_list() == [
        "CPU threads, m: T = a + b / N (estimate = P)"
    ]


def test_the_workflow_takes_the_aggregation_outputs_from_the_table_contract():
    from gpuscale.analyze import tables

    outs = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["aggregate"]["outs"]
    assert outs == list(tables.outputs().values())
    assert "**AGGREGATE_OUTPUTS" in (REPO / "workflow/rules/report.smk").read_text()


def importlinter_contracts() -> dict[str, dict]:
    import tomllib

    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return {c["type"]: c for c in contracts}


def lint_imports() -> str:
    """import-linter's report on the contracts of pyproject.toml (also run by `make lint`); fails when one breaks."""
    import shutil
    import subprocess

    tool = shutil.which("lint-imports")
    if tool is None:
        pytest.skip("import-linter is not installed (the test extra has it)")
    done = subprocess.run([tool, "--no-cache"], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return done.stdout


def test_no_import_cycles_among_modules():
    contract = importlinter_contracts()["acyclic_siblings"]
    assert contract["ancestors"] == ["gpuscale"] and contract.get("depth", 10) >= 3
    assert f"{contract['name']} KEPT" in " ".join(lint_imports().split())


def test_stage_modules_depend_on_the_table_contract_not_on_each_other():
    contract = importlinter_contracts()["independence"]
    assert set(contract["modules"]) == {
        "gpuscale.analyze.aggregate",
        "gpuscale.present.charts",
        "gpuscale.present.report",
    }
    assert f"{contract['name']} KEPT" in " ".join(lint_imports().split())


def test_make_lint_checks_the_import_contracts():
    makefile = (REPO / "Makefile").read_text()
    lint = makefile[makefile.index("\nlint:") :].split("\n\n")[0]
    assert "lint-imports" in lint
