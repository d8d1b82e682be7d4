"""Snakemake conventions: light rules run locally, timing rules are benchmarked, a failing stage says why in its
log file as well as on stderr."""

from __future__ import annotations

import pytest
from conftest import REPO, copy_project, run, write_yaml


def test_light_rules_are_local_and_timing_rules_are_benchmarked(monkeypatch):
    pytest.importorskip("snakemake")
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, ResourceSettings

    monkeypatch.chdir(REPO)
    with SnakemakeApi() as api:
        workflow = api.workflow(
            snakefile=REPO / "Snakefile", resource_settings=ResourceSettings(), config_settings=ConfigSettings()
        )._workflow
        local = set(workflow._localrules)
        benchmarked = {rule.name: str(rule.benchmark) for rule in workflow.rules if rule.benchmark}
    assert {"host", "aggregate", "charts", "report"} <= local
    assert not {"data", "train", "sweep_threads", "sweep_batch"} & local
    assert set(benchmarked) == {"train", "sweep_threads", "sweep_batch"}
    # kept under logs/: neither a record nor a DVC output, so the DVC stages stay the same DAG
    assert all(path.startswith("logs/benchmarks/") for path in benchmarked.values())


def test_a_failing_command_writes_its_one_line_error_into_its_log(tmp_path):
    bad = write_yaml(tmp_path / "bad.yaml", {"data": {"source": "cifar10", "path": str(tmp_path / "none.tar.gz")}})
    log = tmp_path / "logs" / "data.log"
    argv = ["gpuscale", "data", "--params", str(REPO / "params.yaml"), "--params", str(bad)]
    done = run([*argv, "--out", str(tmp_path / "prepared"), "--log", str(log)], tmp_path, check=False)
    assert done.returncode == 2
    [line] = [line for line in done.stderr.splitlines() if line.startswith("gpuscale data: error:")]
    assert log.read_text().splitlines()[-1] == line


@pytest.mark.e2e
def test_a_failing_snakemake_job_leaves_its_error_in_the_rule_log(tmp_path):
    repo = copy_project(tmp_path / "repo")
    (repo / "data/raw").mkdir(parents=True, exist_ok=True)
    (repo / "data/raw/broken.tar.gz").write_bytes(b"not an archive")
    write_yaml(repo / "broken.yaml", {"data": {"source": "cifar10", "path": "data/raw/broken.tar.gz"}})
    done = run(["snakemake", "data/prepared", "--cores", "1", "--configfile", "broken.yaml"], repo, check=False)
    assert done.returncode != 0
    text = (repo / "logs/data.log").read_text()
    assert "gpuscale data: error:" in text.splitlines()[-1], text
