"""Every argument of every command is checked before any work, in one line naming what is allowed (issue 16)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from conftest import REPO, TINY, write_yaml

from gpuscale import cli

PARAMS = ["--params", str(REPO / "params.yaml")]


@pytest.fixture(autouse=True)
def _logging_reset():
    yield
    logging.getLogger().handlers.clear()  # cli.main logs to the captured stream of the test that ran it


def fails(capsys, argv, *expected) -> str:
    """Exit 2 and exactly one line on stderr holding every `expected` text, no traceback."""
    try:
        code = cli.main(argv)
    except SystemExit as done:  # argparse's own usage errors
        code = done.code
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for text in expected:
        assert text in err, err
    return err


@pytest.fixture
def readonly(tmp_path) -> Path:
    """A folder nothing can be written under (root ignores permissions, so root gets /proc)."""
    if os.geteuid() == 0:
        return Path("/proc/gpuscale-readonly")
    folder = tmp_path / "readonly"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


TRAIN_CASES = {
    "variant fast": (["--variant", "fast"], "--variant: 'fast' is not allowed", "allowed: paper, tuned"),
    "device tpu": (["--device", "tpu"], "--device: 'tpu' is malformed", "allowed: cpu, cuda, cuda-N"),
    "device cuda:7": (["--device", "cuda:7"], "did you mean cuda-7?", "allowed: cpu"),
    "seed -1": (["--seed", "-1"], "--seed: -1 is out of range", "allowed: 0 to"),
    "seed text": (["--seed", "x"], "--seed", "invalid int value"),
    "sweep batch=0": (["--sweep", "batch=0"], "--sweep: 'batch=0' is malformed", "threads=N or batch=N"),
    "sweep threads=0": (["--sweep", "threads=0"], "--sweep: 'threads=0'", "N >= 1"),
    "sweep other": (["--sweep", "lr=3"], "--sweep: 'lr=3' is malformed", "threads=N or batch=N"),
    "threads -2": (["--threads", "-2"], "--threads: -2 is out of range", "allowed: 1 to 4096"),
    "threads 0": (["--threads", "0"], "--threads: 0 is out of range", "1 to 4096"),
    # torch.set_num_threads(10**20): a traceback after the lock and the data
    "threads 10**20": (["--threads", str(10**20)], f"--threads: {10**20} is out of range", "1 to 4096"),
    "sweep threads=10**20": (["--sweep", f"threads={10**20}"], "is out of range", "N from 1 to 4096"),
    "model typo": (["--model", "resnet19"], "--model: 'resnet19' is not allowed; did you mean resnet18?", "simplecnn"),
}


@pytest.mark.parametrize("case", list(TRAIN_CASES))
def test_bad_train_arguments_are_refused_before_any_work(case, tmp_path, capsys):
    extra, *expected = TRAIN_CASES[case]
    args = {"--model": "simplecnn", "--device": "cpu"}
    for flag, value in zip(extra[::2], extra[1::2], strict=True):
        args[flag] = value
    out = tmp_path / "runs" / "r.json"
    argv = ["train", *PARAMS, *[w for kv in args.items() for w in kv], "--data", str(tmp_path / "nodata")]
    fails(capsys, [*argv, "--out", str(out)], *expected)
    assert not (tmp_path / "runs").exists()


def test_train_without_prepared_data_says_to_run_the_data_stage(tmp_path, capsys):
    argv = ["train", *PARAMS, "--model", "simplecnn", "--device", "cpu", "--data", str(tmp_path / "none")]
    fails(capsys, [*argv, "--out", str(tmp_path / "r.json")], "no prepared dataset", "run the data stage first")


@pytest.mark.parametrize("command", ["host", "data", "train", "aggregate"])
def test_an_unwritable_output_or_log_is_refused_before_any_work(command, readonly, prepared, tmp_path, capsys):
    overlay = str(write_yaml(tmp_path / "o.yaml", TINY))
    base = [command, *PARAMS, "--params", overlay]
    if command == "train":
        base += ["--model", "simplecnn", "--device", "cpu", "--data", str(prepared)]
    if command == "aggregate":
        base += ["--reference-only", "--metrics", str(tmp_path / "m.json")]
    fails(capsys, [*base, "--out", str(readonly / "out")], "--out", "cannot write under")
    fails(capsys, [*base, "--out", str(tmp_path / "ok"), "--log", str(readonly / "x.log")], "--log", "cannot write")
    assert not (tmp_path / "ok").exists()


def test_aggregate_metrics_unwritable_is_refused(readonly, tmp_path, capsys):
    argv = ["aggregate", *PARAMS, "--reference-only", "--out", str(tmp_path / "t")]
    fails(capsys, [*argv, "--metrics", str(readonly / "m.json")], "--metrics", "cannot write")
    assert not (tmp_path / "t").exists()


def test_aggregate_before_training_says_not_trained_yet(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    overlay = str(write_yaml(tmp_path / "o.yaml", {**TINY, "report": {"reference": []}}))
    err = fails(capsys, ["aggregate", *PARAMS, "--params", overlay], "not trained yet", "run the train stage first")
    assert "fix or remove" not in err and not (tmp_path / "results").exists()


@pytest.mark.parametrize("command", ["charts", "report"])
def test_charts_and_report_without_tables_say_which_stage_to_run_first(command, tmp_path, capsys):
    argv = [command, *PARAMS, "--tables", str(tmp_path / "tables"), "--out", str(tmp_path / "out")]
    fails(capsys, argv, "no aggregated tables", "run the aggregate stage first")
    assert not (tmp_path / "out").exists()


def test_report_without_charts_says_to_run_the_charts_stage(tmp_path, capsys):
    from gpuscale.analyze.aggregate import TABLES

    tables = tmp_path / "tables"
    tables.mkdir()
    for name in TABLES:
        (tables / f"{name}.parquet").write_bytes(b"")
    (tables / "notes.json").write_text("{}")
    argv = ["report", *PARAMS, "--tables", str(tables), "--charts", str(tmp_path / "c"), "--out", str(tmp_path / "r")]
    fails(capsys, argv, "no charts there", "run the charts stage first")


@pytest.mark.parametrize(
    "content",
    [b"\xff\xfe not utf-8 \x80", b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 50_000 + b"1" + b"}" * 50_000],
    ids=["not UTF-8", "nested 100000 deep list", "nested 50000 deep object"],
)
@pytest.mark.parametrize("skip_bad", [False, True])
def test_unreadable_records_are_one_line_or_skipped(content, skip_bad, tmp_path, capsys, monkeypatch):
    """In the study's own results a bad record stops the stage in one line (unless skip_bad_records); in a reference
    folder, data from elsewhere, it is skipped with a warning and listed (issue 28: records are data from outside)."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "reference" / "bad"
    folder.mkdir(parents=True)
    (folder / "r.json").write_bytes(content)
    overlay = write_yaml(
        tmp_path / "o.yaml", {**TINY, "report": {"reference": ["reference/bad"], "skip_bad_records": skip_bad}}
    )
    argv = ["aggregate", *PARAMS, "--params", str(overlay), "--reference-only"]
    argv += ["--out", str(tmp_path / "t"), "--metrics", str(tmp_path / "m.json")]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert "skipped a bad record of reference: bad: reference/bad/r.json" in capsys.readouterr().err
    notes = json.loads((tmp_path / "t" / "notes.json").read_text())
    assert [s["path"] for s in notes["skipped_records"]] == ["reference/bad/r.json"]
    own = tmp_path / "results/runs/simplecnn/cpu/paper-seed0.json"
    own.parent.mkdir(parents=True)
    own.write_bytes(content)
    argv = [
        "aggregate",
        *PARAMS,
        "--params",
        str(overlay),
        "--out",
        str(tmp_path / "t2"),
        "--metrics",
        str(tmp_path / "m2.json"),
    ]
    if not skip_bad:
        fails(capsys, argv, "results/runs/simplecnn/cpu/paper-seed0.json: ", "run record")
        assert not (tmp_path / "t2").exists()
        return
    assert cli.main(argv) == 0, capsys.readouterr().err
    notes = json.loads((tmp_path / "t2" / "notes.json").read_text())
    assert {s["path"] for s in notes["skipped_records"]} == {
        "reference/bad/r.json",
        "results/runs/simplecnn/cpu/paper-seed0.json",
    }
