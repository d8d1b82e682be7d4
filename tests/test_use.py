"""gpuscale use: the overlays chosen once, merged into the one params file every stage command reads (no tools run
here: tests/test_workflow.py drives Snakemake and DVC with a choice)."""

from __future__ import annotations

import shutil

import pytest
import yaml
from conftest import REPO, write_yaml

from gpuscale import cli, deps
from gpuscale.commands import use
from gpuscale.contract import params


@pytest.fixture
def project(tmp_path, monkeypatch):
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    (tmp_path / "config").mkdir()
    shutil.copy(REPO / "config/quick.yaml", tmp_path / "config/quick.yaml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(use, "refresh", _fixed_host(use.refresh))
    return tmp_path


def _fixed_host(refresh):
    def fixed(root=".", extra=(), fingerprint=None):
        return refresh(root, extra, fingerprint or "host-a")

    return fixed


def gpuscale(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(["use", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_paths_dvc_yaml_names_are_the_ones_use_writes():
    assert (deps.MERGED_PARAMS, deps.RUN_VARS) == (use.MERGED_PARAMS, use.RUN_VARS)
    text = (REPO / "dvc.yaml").read_text()
    assert f"--params {use.MERGED_PARAMS} " in text and f"  - {use.RUN_VARS}\n" in text
    assert "--params params.yaml" not in text and "${study." not in text  # templates read run.yaml's lists


def test_a_choice_is_merged_into_one_file_and_shown(project, capsys):
    code, out, _ = gpuscale(capsys, "config/quick.yaml")
    assert code == 0 and "params.yaml, then config/quick.yaml" in out
    merged = yaml.safe_load((project / use.MERGED_PARAMS).read_text())
    assert merged == params.load([project / "params.yaml", project / "config/quick.yaml"])
    assert merged["study"]["devices"] == ["cpu"] and params.load([project / use.MERGED_PARAMS]) == merged
    run = yaml.safe_load((project / use.RUN_VARS).read_text())["run"]
    assert run["study"]["devices"] == ["cpu"] and run["host"] == "host-a"
    assert use.chosen(project) == ["config/quick.yaml"]

    code, out, _ = gpuscale(capsys)  # no arguments: the choice, unchanged
    assert code == 0 and "then config/quick.yaml" in out and use.chosen(project) == ["config/quick.yaml"]
    code, out, _ = gpuscale(capsys, "--none")
    assert code == 0 and "params.yaml alone" in out and use.chosen(project) == []
    assert yaml.safe_load((project / use.MERGED_PARAMS).read_text())["study"]["devices"] == ["cpu", "cuda"]


def test_the_same_values_under_another_name_leave_the_generated_files_as_they_were(project, capsys):
    write_yaml(project / "a.yaml", {"train": {"epochs": 2}})
    gpuscale(capsys, "config/quick.yaml", "a.yaml")
    before = {f: (project / f).read_bytes() for f in (use.MERGED_PARAMS, use.RUN_VARS)}
    shutil.copy(project / "a.yaml", project / "b.yaml")
    gpuscale(capsys, "config/quick.yaml", "b.yaml")
    assert {f: (project / f).read_bytes() for f in before} == before
    assert use.chosen(project) == ["config/quick.yaml", "b.yaml"]


def test_a_bad_overlay_is_one_line_and_keeps_the_choice(project, capsys):
    gpuscale(capsys, "config/quick.yaml")
    write_yaml(project / "bad.yaml", {"train": {"epochs": -3}})
    code, _, err = gpuscale(capsys, "bad.yaml")
    assert code != 0 and len(err.strip().splitlines()) == 1 and "train.epochs" in err
    assert use.chosen(project) == ["config/quick.yaml"]
    code, _, err = gpuscale(capsys, "missing.yaml")
    assert code != 0 and "missing.yaml" in err and use.chosen(project) == ["config/quick.yaml"]


def test_refresh_stops_dvc_only_where_its_stage_list_changed(project, capsys):
    """DVC's `use` stage: a value edit is merged and passes on; an edit to a list DVC's matrix reads stops the run
    (DVC planned from the old list), in one line naming the key, with the files rewritten for the next run."""
    gpuscale(capsys, "config/quick.yaml")
    config = yaml.safe_load((project / "params.yaml").read_text())
    config["train"]["batch_size"] = 64
    write_yaml(project / "params.yaml", config)
    assert gpuscale(capsys, "--refresh")[0] == 0
    assert yaml.safe_load((project / use.MERGED_PARAMS).read_text())["train"]["batch_size"] == 64

    config["study"]["models"] = ["simplecnn"]
    write_yaml(project / "params.yaml", config)
    code, _, err = gpuscale(capsys, "--refresh")
    assert code == 1 and "study.models changed" in err and "run `dvc repro`" in err
    assert yaml.safe_load((project / use.RUN_VARS).read_text())["run"]["study"]["models"] == ["simplecnn"]
    assert gpuscale(capsys, "--refresh")[0] == 0  # the second run plans from the new list


def test_snakemake_s_configfile_overlays_reach_the_merge_but_not_dvc_s_lists(project):
    write_yaml(project / "once.yaml", {"study": {"models": ["simplecnn"]}})
    done = use.refresh(project, ["once.yaml"], "host-a")
    assert done["config"]["study"]["models"] == ["simplecnn"]
    assert yaml.safe_load((project / use.MERGED_PARAMS).read_text())["study"]["models"] == ["simplecnn"]
    run = yaml.safe_load((project / use.RUN_VARS).read_text())["run"]
    assert run["study"]["models"] == ["simplecnn", "resnet18", "resnet50"]  # the choice's (none): params.yaml's
