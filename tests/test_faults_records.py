"""Records are data from outside (issue 28, family 1): whatever a folder holds, a figure reaches a table only when
it is finite and in range, the record lies where its key says, and one source's runs of a key come from one host.
A bad record of a reference folder is skipped with a line; one of the study's own results stops the stage."""

from __future__ import annotations

import html as html_lib
import json
import re
from pathlib import Path

import pytest
import records
from conftest import REPO

from gpuscale.analyze import aggregate
from gpuscale.contract import record

REAL = REPO / "reference/h200-2026-12-04/leases/c002ce13/runs/simplecnn/cuda/paper-seed0.json"


def place(root: Path, rec: dict, where: str = "runs/simplecnn/cuda/paper-seed0.json") -> Path:
    path = root / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec))
    return path


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_figure_that_is_not_finite_is_one_line(tmp_path, constant):
    text = REAL.read_text().replace('"total_train_seconds": ', f'"total_train_seconds": {constant}, "x": ', 1)
    path = tmp_path / "runs/simplecnn/cuda/paper-seed0.json"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(record.RecordError, match=f"holds {constant}, not a finite number"):
        record.load(path)


@pytest.mark.parametrize(
    "field, value",
    [("total_train_seconds", 0), ("total_train_seconds", -3.0), ("train_images_per_second", 0)],
)
def test_times_that_are_not_positive_are_refused(tmp_path, field, value):
    rec = json.loads(REAL.read_text())
    rec["timing"][field] = value
    with pytest.raises(record.RecordError, match=f"timing.{field}"):
        record.load(place(tmp_path, rec))


@pytest.mark.parametrize("field, value", [("train_seconds", 0.0), ("steps", 0), ("train_images", 0)])
def test_an_epoch_of_nothing_is_refused(tmp_path, field, value):
    rec = json.loads(REAL.read_text())
    rec["epochs"][1][field] = value
    with pytest.raises(record.RecordError, match=f"epochs.1.{field}"):
        record.load(place(tmp_path, rec))


def test_accuracy_out_of_range_is_refused(tmp_path):
    rec = json.loads(REAL.read_text())
    rec["quality"]["final_test_accuracy"] = 1.7
    with pytest.raises(record.RecordError, match="quality"):
        record.load(place(tmp_path, rec))


@pytest.mark.parametrize(
    "where",
    [
        "runs/resnet18/cuda/paper-seed0.json",  # another model's folder
        "runs/simplecnn/cpu/paper-seed0.json",  # another device's
        "runs/simplecnn/cuda/paper-seed1.json",  # another seed's name
        "runs/simplecnn/cuda/copy of paper-seed0.json",  # a copy under another name
    ],
)
def test_a_record_that_lies_elsewhere_than_its_key_is_named(tmp_path, where):
    path = place(tmp_path, json.loads(REAL.read_text()), where)
    with pytest.raises(aggregate.AggregateError, match="its key says runs/simplecnn/cuda/paper-seed0.json"):
        aggregate.load_all({"mine": [path]})
    loaded, skipped = aggregate.load_all({"ref": [path]}, lenient=("ref",))  # a reference folder: skipped, listed
    assert loaded == [] and skipped[0]["path"] == str(path) and "lies at" in skipped[0]["reason"]


def test_one_key_from_two_hosts_in_one_source_is_named(tmp_path):
    rec = json.loads(REAL.read_text())
    first = place(tmp_path / "a", rec)
    other = {
        **rec,
        "environment": {**rec["environment"], "host_fingerprint": "f" * 64, "boot_id": "another-boot"},
        "conditions": {**rec["conditions"], "lease": "another-boot"},
    }
    second = place(tmp_path / "b", other)
    with pytest.raises(aggregate.AggregateError, match="measured on another host than"):
        aggregate.load_all({"mine": [first, second]})
    assert len(aggregate.load_all({"a": [first], "b": [second]})[0]) == 2  # two sources, two hosts: fine


def test_a_record_outside_any_runs_folder_is_not_judged_by_its_place(tmp_path):
    path = tmp_path / "anywhere.json"
    path.write_text(REAL.read_text())
    assert record.misplaced(path, record.load(path)) is None


def test_a_bad_reference_record_is_named_in_the_reports_conditions_section(tmp_path, monkeypatch, capsys):
    """Through the real stages (aggregate, charts, report): each skipped record of a reference folder is one line of
    the Measurement conditions section naming its file and the reason, as its warning did."""
    from conftest import TINY, write_yaml

    from gpuscale import cli

    paths = records.study(tmp_path / "reference" / "small", records.SPEEDUPS, records.CPU_EPOCH)
    good = paths[0].read_text()
    nan = place(tmp_path / "reference" / "small", {}, "runs/simplecnn/cpu/paper-seed7.json")
    nan.write_text(good.replace('"total_train_seconds": ', '"total_train_seconds": NaN, "x": ', 1))
    moved = place(tmp_path / "reference" / "small", json.loads(good), "runs/resnet18/cpu/paper-seed3.json")
    write_yaml(tmp_path / "o.yaml", {**TINY, "report": {"reference": ["reference/small"]}})
    monkeypatch.chdir(tmp_path)
    params = ["--params", str(REPO / "params.yaml"), "--params", "o.yaml"]
    for argv in (
        ["aggregate", "--reference-only", "--out", "tables", "--metrics", "m.json"],
        ["charts", "--tables", "tables", "--out", "charts"],
        ["report", "--tables", "tables", "--charts", "charts", "--out", "index.html"],
    ):
        assert cli.main([argv[0], *params, *argv[1:]]) == 0, capsys.readouterr().err
    html = (tmp_path / "index.html").read_text()
    section = html[html.index('<section id="conditions">') :]
    section = section[: section.index("</section>")]
    items = re.findall(r'<ul class="skipped">(.*?)</ul>', section, re.S)[0]
    lines = [html_lib.unescape(li) for li in re.findall(r"<li>(.*?)</li>", items, re.S)]
    assert len(lines) == 2, lines
    named = {
        str(nan.relative_to(tmp_path)): "holds NaN, not a finite number",
        str(moved.relative_to(tmp_path)): "lies at",
    }
    for path, reason in named.items():
        (line,) = [li for li in lines if path in li]
        assert line.startswith(f"skipped record {path} (small): ") and reason in line and "\n" not in line, line
