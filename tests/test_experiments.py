"""End to end: DVC's experiment tools on a copy of the project with tiny synthetic data (dvc exp run -S,
dvc exp show on a 120-column terminal, dvc metrics diff, dvc plots show)."""

from __future__ import annotations

import csv
import io
import json
import os

import pytest
import yaml
from conftest import REPO, TINY, copy_project, run, write_yaml

from gpuscale import params

pytestmark = pytest.mark.e2e


def commit(repo, message):
    run(["git", "add", "-A"], repo)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message], repo)


def test_exp_run_with_a_changed_param_then_show_and_diff(tmp_path, monkeypatch):
    repo = copy_project(tmp_path / "repo", git=True)
    config = params.deep_merge(yaml.safe_load((REPO / "params.yaml").read_text()), TINY)
    config["study"].update(models=["simplecnn"], devices=["cpu"])
    config["train"]["epochs"] = 1
    write_yaml(repo / "params.yaml", config)
    commit(repo, "tiny study")
    run(["dvc", "repro"], repo)
    commit(repo, "baseline")
    baseline = json.loads((repo / "results/metrics.json").read_text())
    assert list(baseline["s"]["paper"]["simplecnn"]) == ["cpu"]
    assert "reference" not in json.dumps(baseline)  # the shipped reference study is aggregated, not in metrics

    run(["dvc", "exp", "run", "-S", "train.epochs=2", "-n", "two-epochs"], repo)
    table = run(["dvc", "exp", "show", "--csv"], repo).stdout
    rows = {row["Experiment"] or row["rev"]: row for row in csv.DictReader(io.StringIO(table))}
    exp = rows["two-epochs"]
    assert exp["train.epochs"] == "2" and float(exp["s.paper.simplecnn.cpu"]) > 0
    assert all(not name.startswith(("speedup", "fits", "steady_speedup")) for name in exp)

    monkeypatch.setenv("COLUMNS", "120")
    shown = run(["dvc", "exp", "show", "--no-pager", "--only-changed"], repo).stdout
    lines = shown.splitlines()
    assert max(len(line) for line in lines) <= 120
    header = next(line for line in lines if "Experiment" in line)
    assert "s.paper.simplecnn.cpu" in header and "train.epochs" in header, shown
    assert "two-epochs" in shown

    run(["dvc", "exp", "apply", "two-epochs"], repo)
    diff = json.loads(run(["dvc", "metrics", "diff", "--json"], repo).stdout)
    changed = diff["results/metrics.json"]
    assert set(changed) >= {"s.paper.simplecnn.cpu", "acc.paper.simplecnn.cpu"}
    assert changed["s.paper.simplecnn.cpu"]["old"] == baseline["s"]["paper"]["simplecnn"]["cpu"]

    plots = run(["dvc", "plots", "show", "--json"], repo).stdout
    for chart in ("speedup_vs_parameters", "speedup_vs_flops", "epoch_seconds", "phases"):
        assert f"reports/charts/{chart}.svg" in plots
    assert os.path.getsize(repo / "reports/charts/speedup_vs_parameters.svg") > 0
