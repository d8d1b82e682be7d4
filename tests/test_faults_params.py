"""A misspelt params key is named with its likely meaning, from the CLI, Snakemake and DVC alike; Snakemake
validates the schema without a "No validator found" warning (issue 16)."""

from __future__ import annotations

import logging

import pytest
import yaml
from conftest import REPO, TINY, copy_project, run, write_yaml

from gpuscale import cli

MESSAGE = "train.epohcs: unknown key; did you mean train.epochs?"


def misspelt(path):
    config = yaml.safe_load((REPO / "params.yaml").read_text())
    config["train"]["epohcs"] = config["train"].pop("epochs")
    return write_yaml(path, config)


@pytest.mark.parametrize("whole_file", [True, False], ids=["in params.yaml", "in an overlay"])
def test_the_cli_names_the_misspelt_key_and_its_likely_meaning(tmp_path, capsys, whole_file):
    if whole_file:
        argv = ["validate", "--params", str(misspelt(tmp_path / "p.yaml"))]
    else:
        overlay = write_yaml(tmp_path / "o.yaml", {"train": {"epohcs": 3}})
        argv = ["validate", "--params", str(REPO / "params.yaml"), "--params", str(overlay)]
    assert cli.main(argv) == 2
    logging.getLogger().handlers.clear()
    err = capsys.readouterr().err.strip()
    assert MESSAGE in err and len(err.splitlines()) == 1


def test_no_suggestion_when_nothing_is_close(tmp_path, capsys):
    overlay = write_yaml(tmp_path / "o.yaml", {"train": {"zzzqqq": 3}})
    assert cli.main(["validate", "--params", str(REPO / "params.yaml"), "--params", str(overlay)]) == 2
    logging.getLogger().handlers.clear()
    err = capsys.readouterr().err
    assert "train.zzzqqq: unknown key (allowed here:" in err and "did you mean" not in err


def test_params_files_that_are_not_text_or_not_files_are_one_line(tmp_path, capsys):
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    numeric = tmp_path / "n.yaml"
    numeric.write_text("train: {1: 2}\n")
    for path, text in ((binary, "not UTF-8"), (tmp_path, "cannot read"), (numeric, "train.1: key 1 is not text")):
        assert cli.main(["validate", "--params", str(path)]) == 2
        logging.getLogger().handlers.clear()
        err = capsys.readouterr().err.strip()
        assert text in err and len(err.splitlines()) == 1, err


@pytest.mark.e2e
def test_snakemake_names_the_misspelt_key_and_validates_without_a_schema_warning(tmp_path):
    repo = copy_project(tmp_path / "repo")
    write_yaml(repo / "typo.yaml", {"train": {"epohcs": 3}})
    done = run(["snakemake", "-n", "--cores", "1", "--configfile", "typo.yaml"], repo, check=False)
    assert done.returncode != 0 and MESSAGE in done.stderr + done.stdout
    write_yaml(repo / "tiny.yaml", TINY)
    done = run(["snakemake", "-n", "--cores", "1", "--configfile", "tiny.yaml"], repo)
    assert "No validator found" not in done.stdout + done.stderr


@pytest.mark.e2e
def test_dvc_names_the_misspelt_key(tmp_path):
    repo = copy_project(tmp_path / "repo", git=True)
    misspelt(repo / "params.yaml")
    done = run(["dvc", "repro", "data"], repo, check=False)
    assert done.returncode != 0 and MESSAGE in done.stdout + done.stderr
