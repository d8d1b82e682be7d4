"""Paths go where the user meant, no further (issue 28, family 2): every path that params or the command line
hand to gpuscale is resolved once (`..` and links followed) by gpuscale.contract.paths and checked against
where it may lead; a refusal is one line naming the key and the fix, exit 2, before any work."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, TINY, tool_env, write_yaml

from gpuscale import cli
from gpuscale.contract import paths

PARAMS = ["--params", str(REPO / "params.yaml")]


@pytest.fixture(autouse=True)
def _project(tmp_path, monkeypatch):
    """Each test runs in its own project folder (tmp_path/project); tmp_path/outside lies beyond it."""
    project = tmp_path / "project"
    (project / "reference" / "ok").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    monkeypatch.chdir(project)
    yield
    logging.getLogger().handlers.clear()


def fails(capsys, argv, *expected) -> str:
    code = cli.main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for text in expected:
        assert text in err, err
    return err


def overlay(tmp_path, **sections) -> list[str]:
    merged = {**TINY, "report": {"reference": ["reference/ok"]}, **sections}
    return [*PARAMS, "--params", str(write_yaml(tmp_path / "project" / "o.yaml", merged))]


def aggregate(tmp_path, reference, key="report") -> list:
    section = {"report": {"reference": reference}}  # read by the aggregate stage and by predict
    command = "aggregate" if key == "report" else "predict"
    argv = [command, *overlay(tmp_path, **section)]
    return argv + (["--reference-only", "--out", "t", "--metrics", "m.json"] if command == "aggregate" else [])


# ----------------------------------------------------------------------------- reference folders (params)


REFERENCE_CASES = {
    "dotdot": (lambda t: "reference/..", "reference/.. (-> "),
    "link out": (lambda t: os.symlink(t / "outside", "reference/link") or "reference/link", "leads outside the proj"),
    "link in": (lambda t: os.symlink("../results", "reference/own") or "reference/own", "leads outside reference/"),
    "a file": (lambda t: Path("reference/f.json").write_text("{}") and "reference/f.json", "is a file where a folder"),
    "dangling link": (lambda t: os.symlink("gone", "reference/dl") or "reference/dl", "link to a path that does not"),
    "link loop": (lambda t: os.symlink("loop", "reference/loop") or "reference/loop", "link loop"),
    "missing": (lambda t: "reference/none", "does not exist"),
    "fifo": (lambda t: os.mkfifo("reference/p") or "reference/p", "a FIFO"),
}


@pytest.mark.parametrize("key", ["report", "predict"])
@pytest.mark.parametrize("case", list(REFERENCE_CASES))
def test_a_reference_folder_is_an_existing_folder_inside_the_project(case, key, tmp_path, capsys):
    make, expected = REFERENCE_CASES[case]
    bad = make(tmp_path)
    name = "report.reference.1"
    fails(capsys, aggregate(tmp_path, ["reference/ok", bad], key), f"{name}: ", expected)
    assert not Path("t").exists()


@pytest.mark.parametrize("bad", ["../outside", "/etc", "reference/a/b"])
def test_the_schema_keeps_a_reference_folder_one_name_under_reference(bad, tmp_path, capsys):
    fails(capsys, aggregate(tmp_path, ["reference/ok", bad]), "report.reference.1: ", "a folder under reference/")


def test_a_reference_folder_linked_inside_reference_is_accepted(tmp_path, capsys):
    os.symlink("ok", "reference/alias")
    assert cli.main(aggregate(tmp_path, ["reference/alias"])) == 0, capsys.readouterr().err
    assert Path("t/notes.json").is_file()


@pytest.mark.parametrize("key", ["report", "predict"])
def test_a_reference_folder_listed_twice_under_another_name_is_refused(tmp_path, capsys, key):
    """[reference/ok, reference/alias] with alias -> ok read every record twice, as two hosts."""
    os.symlink("ok", "reference/alias")
    name = "report.reference"
    fails(
        capsys,
        aggregate(tmp_path, ["reference/ok", "reference/alias"], key),
        f"{name}.1: reference/alias (-> ",
        f"is the same folder as {name}.0 (reference/ok); list each folder once",
    )
    assert cli.main(aggregate(tmp_path, ["reference/ok", "reference/ok/"])) == 0, capsys.readouterr().err


# ----------------------------------------------------------------------------- data.path, --params, input folders


def test_data_path_of_the_wrong_kind_is_named_as_such(tmp_path, capsys):
    Path("images").mkdir()
    os.mkfifo("pipe")
    cifar = {**TINY["data"], "source": "cifar10", "path": "images"}
    fails(capsys, ["data", *overlay(tmp_path, data=cifar)], "data.path: images is a folder where a file is expected")
    folder = {**TINY["data"], "source": "imagefolder", "path": "pipe"}
    fails(capsys, ["data", *overlay(tmp_path, data=folder)], "data.path: pipe is a FIFO")
    os.symlink("nothing", "dangling")
    folder["path"] = "dangling"
    fails(capsys, ["data", *overlay(tmp_path, data=folder)], "data.path: dangling", "link to a path that does not")
    assert not Path("data").exists()


def test_a_params_file_that_is_a_fifo_is_refused_without_waiting(tmp_path):
    """Reading a FIFO would wait for a writer forever: refused at once (a subprocess, with a timeout)."""
    os.mkfifo("p.yaml")
    done = subprocess.run(
        [sys.executable, "-m", "gpuscale", "validate", "--params", "p.yaml"],
        capture_output=True,
        text=True,
        env=tool_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "p.yaml is a FIFO" in done.stderr and len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize("command", ["charts", "report"])
def test_an_input_folder_that_is_a_file_is_named_as_such(command, tmp_path, capsys):
    Path("tables").write_text("")
    fails(capsys, [command, *PARAMS, "--tables", "tables", "--out", "o"], "--tables: tables is a file where a folder")


def test_train_data_that_is_a_file_is_named_as_such(tmp_path, capsys):
    Path("prepared").write_text("")
    argv = ["train", *PARAMS, "--model", "simplecnn", "--device", "cpu", "--data", "prepared", "--out", "r.json"]
    fails(capsys, argv, "--data: prepared is a file where a folder is expected")


def test_predict_facts_that_is_a_folder_is_named_as_such(tmp_path, capsys):
    argv = ["predict", *overlay(tmp_path, predict=TINY["predict"]), "--facts", "reference"]
    fails(capsys, [*argv, "--out", "p"], "--facts: reference is a folder where a file is expected")


# ----------------------------------------------------------------------------- outputs


def test_a_relative_output_stays_inside_the_project(tmp_path, capsys):
    base = ["aggregate", *overlay(tmp_path), "--reference-only", "--metrics", "m.json"]
    fails(capsys, [*base, "--out", "../outside/t"], "--out: ../outside/t", "leads outside the project")
    os.symlink(tmp_path / "outside", "results")
    fails(capsys, [*base, "--out", "results/tables"], "--out: results/tables (-> ", "an absolute path if that place")
    assert not list((tmp_path / "outside").iterdir())
    # the same place, given as an absolute path, is taken as meant
    assert cli.main([*base, "--out", str(tmp_path / "outside" / "t")]) == 0, capsys.readouterr().err
    assert (tmp_path / "outside" / "t" / "notes.json").is_file()


OVER_INPUT = {
    "aggregate --out a reference folder": (
        ["aggregate", "--reference-only", "--out", "reference/ok", "--metrics", "m.json"],
        "--out: reference/ok is report.reference.0, an input",
    ),
    "aggregate --out inside a reference folder": (
        ["aggregate", "--reference-only", "--out", "reference/ok/tables", "--metrics", "m.json"],
        "lies inside report.reference.0",
    ),
    "aggregate --out holding the reference folders": (
        ["aggregate", "--reference-only", "--out", "reference", "--metrics", "m.json"],
        "holds report.reference.0",
    ),
    "aggregate --metrics over params": (
        ["aggregate", "--reference-only", "--out", "t", "--metrics", "o.yaml"],
        "--metrics: o.yaml is --params, an input",
    ),
    "aggregate --out the project": (
        ["aggregate", "--reference-only", "--out", ".", "--metrics", "m.json"],
        "would replace the project folder",
    ),
    "log over params": (["validate", "--log", "o.yaml"], "--log: o.yaml is --params, an input"),
    "charts --out = --tables": (["charts", "--tables", "tables", "--out", "tables"], "--out: tables is --tables"),
    "report --out over params": (
        ["report", "--tables", "tables", "--charts", "charts", "--out", "o.yaml"],
        "--out: o.yaml is --params",
    ),
    "report --out inside charts": (
        ["report", "--tables", "tables", "--charts", "charts", "--out", "charts/index.html"],
        "lies inside --charts",
    ),
    "data --out holding data.path": (["data", "--out", "images-parent"], "holds data.path"),
    "data --out the project's parent": (["data", "--out", ".."], "leads outside the project"),
    "train --out inside --data": (
        ["train", "--model", "simplecnn", "--device", "cpu", "--data", "prepared", "--out", "prepared/r.json"],
        "lies inside --data",
    ),
    "report --out a folder": (
        ["report", "--tables", "tables", "--charts", "charts", "--out", "charts"],
        "is a folder where a file is expected",
    ),
    "probe --out a folder": (["probe", "--device", "cpu", "--out", "reference"], "is a folder where a file is"),
}


@pytest.mark.parametrize("case", list(OVER_INPUT))
def test_an_output_never_lies_over_an_input(case, tmp_path, capsys):
    from gpuscale.analyze.tables import TABLES
    from gpuscale.words import CHART_NAMES

    extra, expected = OVER_INPUT[case]
    Path("tables").mkdir()
    for name in TABLES:
        Path("tables", f"{name}.parquet").write_bytes(b"")
    Path("tables/notes.json").write_text("{}")
    Path("charts").mkdir()
    for name in CHART_NAMES:
        Path("charts", f"{name}.vl.json").write_text("{}")
    Path("prepared").mkdir()
    Path("prepared/manifest.json").write_text("{}")
    Path("images-parent/images/train").mkdir(parents=True)
    data = {**TINY["data"], "source": "imagefolder", "path": "images-parent/images"}
    argv = [extra[0], *overlay(tmp_path, data=data), *extra[1:]]
    before = {p: p.read_bytes() for p in Path(".").rglob("*") if p.is_file()}
    fails(capsys, argv, expected)
    assert {p: p.read_bytes() for p in Path(".").rglob("*") if p.is_file()} == before


OVER_THE_PROJECT = {
    "charts --out the project's code": (["charts", "--tables", "tables", "--out", "src"], "src holds pkg (a folder)"),
    "charts --out .git": (["charts", "--tables", "tables", "--out", ".git"], ".git holds HEAD (a file)"),
    "predict --out docs": (["predict", "--probes", "probes", "--out", "docs"], "docs holds a.md (a file)"),
    "data --out the project's code": (["data", "--out", "src"], "src holds pkg (a folder)"),
    "aggregate --out a folder of notes": (
        ["aggregate", "--reference-only", "--out", "docs", "--metrics", "m.json"],
        "docs holds a.md (a file)",
    ),
    "charts --out a folder holding a link": (
        ["charts", "--tables", "tables", "--out", "linked"],
        "linked holds x.svg (a link)",
    ),
}


@pytest.mark.parametrize(
    "out, expected",
    [
        ("results/host.json/", "ends in '/', which names a folder, where a file is expected"),  # wrote host.json
        ("results/a\nb.json", "holds a control character ('\\n')"),  # a file named over two lines
        ("results/a\tb.json", "holds a control character ('\\t')"),
    ],
)
def test_a_file_output_spelt_as_a_folder_or_with_a_control_character_is_refused(tmp_path, capsys, out, expected):
    fails(capsys, ["host", *overlay(tmp_path), "--out", out], "--out: ", expected)
    assert not Path("results").exists()


@pytest.mark.parametrize("case", list(OVER_THE_PROJECT))
def test_a_folder_output_never_replaces_a_folder_of_other_files(case, tmp_path, capsys):
    """A folder output is swapped in whole: `charts --out src` replaced the project's code and `--out .git` its
    history, with exit 0. Only an empty folder, or one holding the kinds of file the output writes, is replaced."""
    from gpuscale.analyze.tables import TABLES

    extra, expected = OVER_THE_PROJECT[case]
    Path("tables").mkdir()
    for name in TABLES:
        Path("tables", f"{name}.parquet").write_bytes(b"")
    Path("tables/notes.json").write_text("{}")
    Path("src/pkg").mkdir(parents=True)
    Path("src/pkg/code.py").write_text("x = 1\n")
    Path(".git").mkdir()
    Path(".git/HEAD").write_text("ref: refs/heads/main\n")
    Path("docs").mkdir()
    Path("docs/a.md").write_text("notes\n")
    Path("linked").mkdir()
    Path("linked/x.svg").symlink_to(tmp_path / "outside")
    argv = [extra[0], *overlay(tmp_path), *extra[1:]]
    before = {p: p.read_bytes() for p in Path(".").rglob("*") if p.is_file()}
    fails(capsys, argv, f"--out: {expected}", "which this output never writes")
    assert {p: p.read_bytes() for p in Path(".").rglob("*") if p.is_file()} == before


def test_a_folder_of_the_outputs_own_kinds_is_replaced(tmp_path):
    Path("out/.DS_Store").parent.mkdir()
    Path("out/.DS_Store").write_bytes(b"\0")
    Path("out/old_chart.svg").write_text("<svg/>")
    paths.replaceable_folder("out", "--out", (".html", ".svg", ".vl.json"))
    paths.replaceable_folder("absent", "--out", (".svg",))
    Path("out/keep.txt").write_text("")
    with pytest.raises(paths.PathError, match=r"^--out: out holds keep\.txt \(a file\)"):
        paths.replaceable_folder("out", "--out", (".html", ".svg", ".vl.json"))


# ----------------------------------------------------------------------------- model files (for custom model specs)


def test_a_model_file_is_an_existing_py_file_inside_the_project(tmp_path):
    Path("models").mkdir()
    Path("models/mine.py").write_text("def build(n): ...\n")
    assert paths.model_file("models/mine.py:build", "study.models[0]") == (Path("models/mine.py").resolve(), "build")
    (tmp_path / "outside" / "evil.py").write_text("")
    os.symlink(tmp_path / "outside" / "evil.py", "models/link.py")
    cases = {
        "models/mine.py": "is not FILE.py:FUNCTION",
        "models/mine.py:": "is not FILE.py:FUNCTION",
        "models/mine.py:2x": "is not FILE.py:FUNCTION",
        "models/mine.txt:build": "is not a .py file",
        "models/none.py:build": "does not exist",
        "../outside/evil.py:build": "leads outside the project",
        "models/link.py:build": "leads outside the project",
        f"{tmp_path}/outside/evil.py:build": "leads outside the project",
    }
    Path("models/dir.py").mkdir()
    cases["models/dir.py:build"] = "is a folder where a file is expected"
    for spec, expected in cases.items():
        with pytest.raises(paths.PathError, match=r"^study\.models\[0\]: .*" + expected.replace(".", r"\.")):
            paths.model_file(spec, "study.models[0]")


@pytest.mark.parametrize("where", ["../outside/evil.py", "link.py", "ABS/outside/evil.py"])
def test_a_model_file_outside_the_project_is_refused_before_it_runs(tmp_path, capsys, where):
    """paths.model_file was never called: `validate` imported and ran a model file outside the project (through
    `..`, a link, or an absolute path) when it checked the spec."""
    ran = tmp_path / "outside" / "ran"
    (tmp_path / "outside" / "evil.py").write_text(f"open({str(ran)!r}, 'w').close()\ndef build(n): ...\n")
    os.symlink(tmp_path / "outside" / "evil.py", "link.py")
    spec = where.replace("ABS", str(tmp_path)) + ":build"
    fails(capsys, ["validate", *overlay(tmp_path, study={**TINY["study"], "models": [spec]})], "study.models.0: ")
    fails(capsys, ["train", *overlay(tmp_path), "--model", spec, "--device", "cpu"], "--model: ", "leads outside")
    assert not ran.exists()


def test_snakemake_stops_on_a_bad_params_path_in_one_line(tmp_path):
    """The workflow checks the params' paths where the commands do (a dry run: nothing is built)."""
    bad = write_yaml(tmp_path / "bad.yaml", {"data": {"source": "cifar10", "path": "reference"}})
    done = subprocess.run(
        ["snakemake", "-n", "--cores", "1", "--configfile", str(bad)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=tool_env(),
        timeout=120,
        check=False,
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("gpuscale")]
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert lines == [
        "gpuscale: params error: data.path: reference is a folder where a file is expected; give the "
        "cifar-10-binary.tar.gz archive itself (data.source: cifar10)"
    ], done.stderr
