"""Records are data from outside (issue 28, family 1): whatever a folder holds, a figure reaches a table only when
it is finite and in range, the record lies where its key says, and one source's runs of a key come from one host.
A bad record of a reference folder is skipped with a line; one of the study's own results stops the stage."""

from __future__ import annotations

import html as html_lib
import json
import os
import re
import sys
from pathlib import Path

import pytest
import records
from conftest import REPO, TINY, run
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

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


def test_the_aggregate_and_predict_stages_skip_the_same_records_of_a_reference_folder(tmp_path):
    """One loader (gpuscale.contract.recordset) for both stages: a record that does not read, lies elsewhere than its
    key, repeats a run of its lease (here across two lease folders) or comes from another host is skipped by both,
    and nothing else is; the predict stage reads the folder as a whole, as the aggregate stage does."""
    from gpuscale.predict import prediction

    rec = json.loads(REAL.read_text())
    lease = rec["conditions"]["lease"]
    folder = tmp_path / "ref"
    good = place(folder / "leases/a", rec)
    other = {**rec, "environment": {**rec["environment"], "host_fingerprint": "f" * 64, "boot_id": "b"}}
    bad = {
        place(folder / "leases/b", {**other, "conditions": {**rec["conditions"], "lease": "b"}}),  # another host
        place(folder / "leases/c", rec),  # the run of lease a again
        place(folder / "leases/a", rec, "runs/resnet18/cuda/paper-seed0.json"),  # elsewhere than its key
        place(folder / "leases/a", {"schema_version": 4}, "runs/simplecnn/cpu/paper-seed0.json"),  # does not read
    }
    for unit in ("a", "b", "c"):
        (folder / "leases" / unit / "probe").mkdir()
    assert lease != "b"
    _, agg = aggregate.load_all(
        {prediction.source_of(folder): record.files(folder)}, lenient=(prediction.source_of(folder),)
    )
    by_records, by_leases = [], []
    kept = prediction.reference_records(folder, by_records)
    prediction.reference_leases(folder, by_leases)
    assert {Path(s["path"]) for s in agg} == bad, agg
    assert [s["path"] for s in by_records] == [s["path"] for s in agg] == [s["path"] for s in by_leases]
    assert [s["reason"] for s in by_records] == [s["reason"] for s in agg]
    assert len(kept) == 1 and record.misplaced(good, kept[0]) is None


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


def _set(rec: dict, where: str, value) -> dict:
    *head, last = where.split(".")
    node = rec
    for part in head:
        node = node[int(part)] if part.isdigit() else node[part]
    node[int(last) if last.isdigit() else last] = value
    return rec


# Each one reached a table before: infinity (1e400 reads as inf), a speedup of infinity (1e-320 s), a Polars overflow
# traceback (2**63, 1e300 at an integer field, a seed of 2**70), a surrogate traceback, a date traceback in the
# overlap check, or a value read silently (a key given twice, a negative loss, a steady epoch of 0 s, two models).
BEYOND_RANGE = [
    ("literal", ('"total_train_seconds": 12.0', '"total_train_seconds": 1e400'), "holds 1e400, beyond any finite"),
    ("literal", ('"total_train_seconds": 12.0', '"total_train_seconds": 12.0, "total_train_seconds": 9.0'), "twice"),
    ("literal", ('"label": "hand-written test record"', '"label": "\\ud800"'), "label: holds text that is not Unicode"),
    ("set", ("timing.total_train_seconds", 1e-320), "timing.total_train_seconds: 1e-320 is less than the minimum"),
    ("set", ("model.parameters", 2**63), "model.parameters: a number of 19 digits is beyond any figure"),
    ("set", ("model.train_flops_per_image", 1e300), "model.train_flops_per_image: 1e+300 is beyond any figure"),
    ("set", ("key.seed", 2**70), "key.seed: a number of 22 digits"),
    ("set", ("schema_version", 10**400), "schema_version: a number of 401 digits"),
    ("set", ("started_at", "yesterday"), "started_at: 'yesterday' is not a date-time with its UTC offset"),
    ("set", ("started_at", "2026-01-01T00:02:00"), "is not a date-time with its UTC offset"),
    ("set", ("finished_at", "2026-13-01T00:02:00+00:00"), "finished_at: '2026-13-01T00:02:00+00:00' is not a"),
    ("set", ("started_at", "2027-01-01T00:00:00+00:00"), "is before started_at 2027-01-01T00:00:00+00:00"),
    ("set", ("epochs.0.train_loss", -5.0), "epochs.0.train_loss: -5.0 is less than the minimum of 0"),
    ("set", ("timing.steady_epoch_seconds_mean", 0.0), "timing.steady_epoch_seconds_mean: 0.0 is less than"),
    ("set", ("epochs.1.energy_joules", {"gpu": -3.0, "cpu": None}), "epochs.1.energy_joules.gpu: -3.0 is less"),
    ("set", ("environment.cpu_logical_cores", 0), "environment.cpu_logical_cores: 0 is less than the minimum"),
    ("set", ("model.name", "resnet18"), "key.model is 'simplecnn' but model.name is 'resnet18'"),
    ("set", ("key.variant", "../x"), "key.variant: '../x' does not match"),
    ("set", ("epochs.1.epoch", 1), "epochs are numbered 1, 1, not 1 to 2 in order"),
]


def _bad_record(root: Path, how: str, change) -> Path:
    rec = records.make("simplecnn", "cuda", [6.0, 6.0])
    path = place(root, rec, "runs/simplecnn/cuda/paper-seed0.json")
    if how == "literal":
        old, new = change
        assert old in path.read_text()
        path.write_text(path.read_text().replace(old, new, 1))
    else:
        path.write_text(json.dumps(_set(rec, *change)))
    return path


@pytest.mark.parametrize("how, change, said", BEYOND_RANGE, ids=[c[2][:32] for c in BEYOND_RANGE])
def test_a_figure_beyond_range_or_a_broken_text_is_one_line_naming_the_file(tmp_path, how, change, said):
    path = _bad_record(tmp_path, how, change)
    with pytest.raises(record.RecordError) as err:
        record.load(path)
    assert str(err.value).startswith(f"{path}: ") and said in str(err.value) and "\n" not in str(err.value)
    assert len(str(err.value)) < 300, str(err.value)


def test_bad_figures_in_a_reference_folder_leave_every_table_finite(tmp_path, monkeypatch, capsys):
    """Through the real aggregate: every record of BEYOND_RANGE in a reference folder beside a good study is
    skipped with its line, and no table holds a NaN or an infinity."""
    import polars as pl
    from conftest import TINY, write_yaml

    from gpuscale import cli

    records.study(tmp_path / "reference" / "small", records.SPEEDUPS, records.CPU_EPOCH)
    for i, (how, change, _) in enumerate(BEYOND_RANGE):
        _bad_record(tmp_path / "reference" / "small" / f"bad{i}", how, change)
    write_yaml(tmp_path / "o.yaml", {**TINY, "report": {"reference": ["reference/small"]}})
    monkeypatch.chdir(tmp_path)
    argv = ["aggregate", "--params", str(REPO / "params.yaml"), "--params", "o.yaml", "--reference-only"]
    assert cli.main([*argv, "--out", "tables", "--metrics", "m.json"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and "RuntimeWarning" not in err, err
    notes = json.loads((tmp_path / "tables/notes.json").read_text())
    assert len(notes["skipped_records"]) == len(BEYOND_RANGE)
    for name in ("runs", "epochs", "speedup", "fits"):
        frame = pl.read_parquet(tmp_path / f"tables/{name}.parquet")
        for column in frame.columns:
            if frame[column].dtype == pl.Float64:
                assert not (frame[column].is_nan().any() or frame[column].is_infinite().any()), (name, column)


@pytest.mark.parametrize("kind", ["fifo", "device", "folder", "too large"])
def test_a_record_that_is_no_regular_file_is_named_and_never_read(tmp_path, monkeypatch, kind):
    """A FIFO named x.json blocked the stage forever; a link to /dev/zero filled the memory until the kernel killed
    the stage; a folder named x.json was a traceback."""
    path = tmp_path / "reference/small/simplecnn/cuda/x.json"
    path.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        os.symlink("/dev/zero", path)
    elif kind == "folder":
        path.mkdir()
    else:
        path.write_text(json.dumps(records.make("simplecnn", "cuda", [6.0, 6.0])))
        monkeypatch.setattr(record, "MAX_BYTES", 100)
    said = {"fifo": "a FIFO", "device": "a device", "folder": "a folder", "too large": ""}
    loaded, skipped = aggregate.load_all({"ref": [path]}, lenient=("ref",))
    assert loaded == [] and skipped[0]["reason"].startswith(f"{path}: {said[kind]}"), skipped
    assert kind != "too large" or "bytes, larger than any run record (at most 100 bytes)" in skipped[0]["reason"]


def test_a_linked_folder_in_a_reference_folder_is_named(tmp_path, monkeypatch):
    """rglob does not follow a link to a folder: its records were left out without a word."""
    records.study(tmp_path / "reference" / "small", records.SPEEDUPS, records.CPU_EPOCH)
    records.study(tmp_path / "elsewhere", records.SPEEDUPS, records.CPU_EPOCH)
    os.symlink(tmp_path / "elsewhere", tmp_path / "reference/small/more")
    monkeypatch.chdir(tmp_path)
    result = aggregate.run([], ["reference/small"], tmp_path / "tables", tmp_path / "m.json", 0.02)
    (entry,) = result["skipped_records"]
    assert entry["path"] == "reference/small/more" and "a link to a folder, not followed" in entry["reason"]


@pytest.mark.parametrize("where", ["--probes", "a reference folder"])
@pytest.mark.parametrize("change", ["NaN", "1e400", "fifo"])
def test_a_probe_record_from_outside_is_held_to_the_same_rule(tmp_path, monkeypatch, capsys, where, change):
    """A NaN in a probe record gave NaN predictions in results/predict/host.csv, with exit 0."""
    from conftest import TINY, write_yaml

    from gpuscale import cli

    records.study(tmp_path / "reference" / "small", records.SPEEDUPS, records.CPU_EPOCH)
    for folder in ("probes", "reference/small/probe"):
        (tmp_path / folder).mkdir(parents=True)
        for src in (REPO / "research/reference-archive/h200-2026-12-03-lease/probe").glob("*.json"):
            (tmp_path / folder / src.name).write_text(src.read_text())
    bad = tmp_path / ("probes" if where == "--probes" else "reference/small/probe") / "cuda.json"
    if change == "fifo":
        bad.unlink()
        os.mkfifo(bad)
    else:
        text = bad.read_text()
        bad.write_text(re.sub(r'("flops_per_second": )[0-9.e+]+', rf"\g<1>{change}", text, count=1))
        assert bad.read_text() != text
    study = {**TINY["study"], "devices": ["cpu", "cuda"]}
    reference = {"reference": ["reference/small"]}
    overlay = {**TINY, "study": study, "report": reference}
    write_yaml(tmp_path / "o.yaml", overlay)
    monkeypatch.chdir(tmp_path)
    params = ["--params", str(REPO / "params.yaml"), "--params", "o.yaml"]
    code = cli.main(["predict", *params, "--probes", "probes", "--out", "predicted"])
    err = capsys.readouterr().err.strip().splitlines()
    named = f"{bad.relative_to(tmp_path)}: "
    if where == "--probes":  # the user's own probe: the stage stops, one line, nothing written
        assert code == 2 and len(err) == 1 and named in err[0], err
        assert not (tmp_path / "predicted").exists()
        return
    # a reference folder's probe is data from outside: skipped with a warning and listed for the report
    assert code == 0 and any("skipped a bad record of reference: small" in e and named in e for e in err), err
    (entry,) = json.loads((tmp_path / "predicted/skipped.json").read_text())
    assert entry["path"] == str(bad.relative_to(tmp_path)) and entry["source"] == "reference: small", entry
    host = (tmp_path / "predicted/host.csv").read_text()
    assert "nan" not in host.lower() and "inf" not in host.lower()


def test_a_bad_run_record_of_a_reference_folder_is_skipped_by_predict_and_reaches_the_report(
    tmp_path, monkeypatch, capsys
):
    """predict skips a bad record of a reference folder, as the aggregate stage does, and lists it once."""
    from conftest import TINY, write_yaml

    from gpuscale import cli
    from gpuscale.present import report

    records.study(tmp_path / "reference" / "small", records.SPEEDUPS, records.CPU_EPOCH)
    (tmp_path / "probes").mkdir()
    for src in (REPO / "research/reference-archive/h200-2026-12-03-lease/probe").glob("*.json"):
        (tmp_path / "probes" / src.name).write_text(src.read_text())
    bad = sorted((tmp_path / "reference/small").rglob("*.json"))[0]
    bad.write_text(bad.read_text().replace('"schema_version"', '"schema_version": 1, "x"', 1))
    study = {**TINY["study"], "devices": ["cpu", "cuda"]}
    write_yaml(
        tmp_path / "o.yaml",
        {**TINY, "study": study, "report": {"reference": ["reference/small"]}},
    )
    monkeypatch.chdir(tmp_path)
    params = ["--params", str(REPO / "params.yaml"), "--params", "o.yaml"]
    code = cli.main(["predict", *params, "--probes", "probes", "--out", "predicted"])
    err = capsys.readouterr().err
    assert code == 0 and f"{bad.relative_to(tmp_path)}: " in err, err
    pred = {"skipped": json.loads((tmp_path / "predicted/skipped.json").read_text())}
    tables = report.with_predict_skips({"skipped_records": []}, pred)
    assert [s["path"] for s in tables["skipped_records"]] == [str(bad.relative_to(tmp_path))]
    again = report.with_predict_skips(tables, pred)  # read by both stages: listed once
    assert again["skipped_records"] == tables["skipped_records"]


# ----------------------------------------------------------------------------- generated: a figure or a text mutated

LITERALS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1e-320", "5e-324", "0", "-0.0", "-1", str(2**63),
            str(10**30), "1e300", "1e18", "3.5", "true", "null", '"12"', '"\\ud800"', "[]", "{}"]  # fmt: skip


def _leaves(tree, where=()) -> list[tuple]:
    if isinstance(tree, dict):
        return [leaf for key, value in tree.items() for leaf in _leaves(value, (*where, key))]
    if isinstance(tree, list):
        return [leaf for i, value in enumerate(tree) for leaf in _leaves(value, (*where, i))]
    return [(where, tree)]


@st.composite
def mutated_record(draw) -> bytes:
    """A good record's text with one leaf replaced: by an extreme or broken literal, by any JSON number, by a lone
    surrogate in a text; or one of its keys given twice."""
    rec = records.make("simplecnn", "cuda", draw(st.lists(st.floats(0.01, 1e4), min_size=2, max_size=4)))
    leaves = _leaves(rec)
    figures = [leaf for leaf in leaves if type(leaf[1]) in (int, float)]
    where, _ = draw(st.sampled_from(figures) if draw(st.integers(0, 4)) else st.sampled_from(leaves))  # mostly figures
    if draw(st.integers(0, 9)) == 0:  # a key given twice: the second copy keeps or changes the value
        text = json.dumps(rec)
        key = json.dumps(where[-1]) if isinstance(where[-1], str) else '"label"'
        return text.replace(f"{key}: ", f"{key}: 1, {key}: ", 1).encode()
    literal = draw(
        st.sampled_from(LITERALS)
        if draw(st.booleans())
        else st.integers(-(2**70), 2**70).map(str) | st.floats(allow_nan=False, allow_infinity=False).map(repr)
    )
    return mutate(rec, where, literal)


def mutate(rec: dict, where: tuple, literal: str) -> bytes:
    node = rec
    for part in where[:-1]:
        node = node[part]
    node[where[-1]] = "\0MUTATED\0"
    return json.dumps(rec).replace(json.dumps("\0MUTATED\0"), literal, 1).encode()


def _known(where: tuple, literal: str) -> bytes:
    return mutate(records.make("simplecnn", "cuda", [6.0, 6.0]), where, literal)


@settings(max_examples=60, deadline=None, derandomize=True, database=None, phases=[Phase.explicit, Phase.generate])
@given(blob=mutated_record())
@example(blob=_known(("timing", "total_train_seconds"), "1e400"))  # inf in runs and speedup, NaN fits
@example(blob=_known(("timing", "total_train_seconds"), "1e-320"))  # a speedup of infinity
@example(blob=_known(("model", "parameters"), str(2**63)))  # a Polars overflow traceback
@example(blob=_known(("label",), '"\\ud800"'))  # a UnicodeEncodeError traceback
@example(blob=_known(("started_at",), '"yesterday"'))  # a date-parsing traceback
def test_a_mutated_figure_never_reaches_a_table_unless_it_is_finite_and_in_range(tmp_path_factory, blob):
    """Through the real aggregate, a reference folder holding a good study and one mutated record: exit 0, the
    mutated record read or skipped in one warning line, and no table holding a NaN or an infinity; never a
    traceback, a RuntimeWarning or a Polars overflow (each of which 1e400, 1e-320, 2**63 or a surrogate gave)."""
    import polars as pl

    root = tmp_path_factory.mktemp("mutated")
    records.study(root / "reference/small", records.SPEEDUPS, records.CPU_EPOCH)
    mutated = root / "reference/small/extra/runs/simplecnn/cuda/paper-seed5.json"
    mutated.parent.mkdir(parents=True)
    mutated.write_bytes(blob.replace(b'"seed": 0', b'"seed": 5', 1))
    overlay = {**TINY, "report": {"reference": ["reference/small"]}}
    (root / "o.yaml").write_text(json.dumps(overlay))
    argv = [sys.executable, "-m", "gpuscale", "aggregate", "--params", str(REPO / "params.yaml"), "--params", "o.yaml"]
    done = run([*argv, "--reference-only", "--out", "tables", "--metrics", "m.json"], root, check=False)
    err = [line for line in done.stderr.splitlines() if " INFO " not in line]
    assert done.returncode == 0 and "Traceback" not in done.stderr and "Warning" not in done.stderr, done.stderr
    assert len(err) <= 1 and all("skipped a bad record" in line for line in err), err
    for name in ("runs", "epochs", "speedup", "fits", "conditions"):
        frame = pl.read_parquet(root / f"tables/{name}.parquet")
        for column in frame.columns:
            if frame[column].dtype in (pl.Float64, pl.Float32):
                assert not (frame[column].is_nan().any() or frame[column].is_infinite().any()), (name, column)
