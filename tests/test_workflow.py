"""End to end: the real Snakemake and DVC on a copy of the project, with tiny synthetic data."""

from __future__ import annotations

import json
import re
import shlex
import subprocess

import pytest
import yaml
from conftest import REPO, TINY, copy_project, run, use_params, write_yaml

from gpuscale import deps
from gpuscale.contract import params, record

pytestmark = pytest.mark.e2e


def tiny_params(**study) -> dict:
    base = yaml.safe_load((REPO / "params.yaml").read_text())
    merged = params.deep_merge(base, TINY)
    merged["study"].update(study)
    return merged


def commit(repo, message="params"):
    run(["git", "add", "-A"], repo)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message], repo)


def records(repo) -> dict:
    return {
        tuple(p.relative_to(repo / "results/runs").parts): record.load(p)
        for p in sorted((repo / "results/runs").rglob("*.json"))
    }


def dvc_status(repo) -> dict:
    return json.loads(run(["dvc", "status", "--json"], repo).stdout or "{}")


def normalise(cmd: str) -> list[str]:
    """A stage command as words, without what only Snakemake passes (--threads, from the job's cores)."""
    words = shlex.split(cmd)
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word == "--threads":
            skip = True
        else:
            out.append(word)
    return out


def snakemake_jobs(repo) -> dict:
    """output -> (rule, inputs, command) from Snakemake's detailed summary of what ran."""
    summary = run(["snakemake", "--detailed-summary", "--cores", "1"], repo).stdout
    lines = [line for line in summary.splitlines() if "\t" in line]
    header = lines[0].split("\t")
    jobs = {}
    for line in lines[1:]:
        row = dict(zip(header, line.split("\t"), strict=False))
        inputs = {i for i in row["input-file(s)"].split(",") if i and i != "-"}
        jobs[row["output_file"]] = (row["rule"], inputs, row["shellcmd"])
    return jobs


def dvc_stages(repo) -> dict:
    """output -> (stage name, file deps, command), resolved by DVC itself (matrix expanded); a code dep,
    workflow/code/<command>, stands for the files its links point at (Snakemake lists those)."""
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo

    def files(dep: str) -> set[str]:
        return set(deps.linked_files(repo / dep)) if dep.startswith(f"{deps.LINK_ROOT}/") else {dep}

    stages = {}
    with Repo(str(repo)) as dvc_repo:
        for stage in dvc_repo.index.stages:
            declared = {str(d.def_path) for d in stage.deps if not isinstance(d, ParamsDependency)}
            inputs = {f for d in declared for f in files(d)}
            for out in stage.outs:
                stages[str(out.def_path)] = (stage.name, inputs, stage.cmd)
    return stages


def test_snakemake_then_dvc_agree_and_describe_the_same_dag(tmp_path):
    repo = copy_project(tmp_path / "repo", git=True)
    config = tiny_params(models=["simplecnn", "resnet18"], devices=["cpu", "cuda"])
    config["sweeps"].update(models=["simplecnn"], cpu_threads=[1, 2], gpu_batch_sizes=[32])
    write_yaml(repo / "params.yaml", config)
    commit(repo)

    run(["snakemake", "--cores", "2"], repo)
    got = records(repo)
    study = {(m, d, "paper-seed0.json") for m in ("simplecnn", "resnet18") for d in ("cpu", "cuda")}
    sweeps = {
        ("simplecnn", "cpu", "threads1-paper-seed0.json"),
        ("simplecnn", "cpu", "threads2-paper-seed0.json"),
        ("simplecnn", "cuda", "batch32-paper-seed0.json"),
    }
    assert set(got) == study | sweeps
    assert got[("simplecnn", "cpu", "threads1-paper-seed0.json")]["environment"]["torch_threads"] == 1
    assert all(r["status"] == "measured" for (m, d, _), r in got.items() if d == "cpu")
    sweep_rows = [
        line for line in (repo / "results/tables/sweeps.csv").read_text().splitlines() if line.startswith("this host,")
    ]  # the shipped reference records have sweeps of their own
    assert sum(",threads," in line for line in sweep_rows) == 2
    import torch

    if not torch.cuda.is_available():
        assert all(r["status"] == "not_measured" for (m, d, _), r in got.items() if d == "cuda")

    dry = run(["snakemake", "-n", "--cores", "2"], repo).stdout
    assert "Nothing to be done" in dry

    # Snakemake handed its outputs to DVC (onsuccess: dvc commit): nothing is pending, the host stage included
    # (it reruns on another fingerprint, not always).
    assert dvc_status(repo) == {}

    # Snakemake's benchmark: files (wall time, peak memory) lie under logs/, outside the DAG DVC mirrors
    benchmark = (repo / "logs/benchmarks/train/simplecnn/cpu/paper-seed0.tsv").read_text().splitlines()
    assert benchmark[0].split("\t")[:3] == ["s", "h:m:s", "max_rss"] and len(benchmark) == 2
    jobs, stages = snakemake_jobs(repo), dvc_stages(repo)
    # DVC's `use` stage merges the params again (the Snakefile does it as it parses): no Snakemake job
    assert {o for o in stages if o.startswith(".gpuscale/")} == {".gpuscale/params.yaml", ".gpuscale/run.yaml"}
    stages = {o: s for o, s in stages.items() if not o.startswith(".gpuscale/")}
    assert set(jobs) == set(stages)
    for output, (rule, inputs, command) in jobs.items():
        stage, dvc_deps, dvc_cmd = stages[output]
        assert stage.split("@")[0] == rule
        assert covers(dvc_deps, inputs), output
        assert normalise(command) == normalise(dvc_cmd), output
    assert (repo / "reports/index.html").exists()
    for name, keys in dvc_params(repo).items():  # each DVC stage depends on the keys its command reads
        assert keys == set(deps.STAGE_PARAMS[name.split("@")[0]]) or name.startswith(("train", "sweep")), name
    planned_after_edits(repo)


def planned(repo) -> tuple[set, set]:
    """(Snakemake's planned rules, DVC's changed stages without `use`), from a dry run and `dvc status` (the dry run's
    parse merged params.yaml into .gpuscale/params.yaml, which DVC's params point into, as `gpuscale use` does)."""
    dry = run(["snakemake", "-n", "--cores", "2"], repo).stdout
    stats = dry.split("Job stats:")[1].split("total")[0] if "Job stats:" in dry else ""
    rules = {m for m in re.findall(r"^(\w+)\s+\d+\s*$", stats, flags=re.MULTILINE)}
    return rules, {name.split("@")[0] for name in dvc_status(repo)} - {"use"}


def planned_after_edits(repo):
    """Only what an edit reaches reruns: report.title the report, report code the report, loop code training."""
    config = yaml.safe_load((repo / "params.yaml").read_text())
    config["report"]["title"] = "Another title"
    write_yaml(repo / "params.yaml", config)
    assert planned(repo) == ({"report", "all"}, {"report"})
    with (repo / "src/gpuscale/present/report.py").open("a") as fh:
        fh.write("# an edit in the report's import closure\n")
    assert planned(repo) == ({"report", "all"}, {"report"})
    with (repo / "src/gpuscale/measure/loaders.py").open("a") as fh:
        fh.write("# an edit in training's import closure\n")
    rules, stages = planned(repo)
    assert {"train", "sweep_threads", "sweep_batch", "aggregate"} <= rules
    assert {"train", "sweep_threads", "sweep_batch", "report"} <= stages


def dvc_params(repo) -> dict:
    """stage -> the params keys it depends on, as DVC resolved them (matrix items filled in)."""
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo

    with Repo(str(repo)) as dvc_repo:
        return {
            stage.name: {key for d in stage.deps if isinstance(d, ParamsDependency) for key in d.params}
            for stage in dvc_repo.index.stages
        }


def covers(dvc_deps: set, snakemake_inputs: set) -> bool:
    """Same inputs, where a DVC folder dependency stands for the files Snakemake lists inside it."""

    def inside(path, folder):
        return path == folder or path.startswith(folder.rstrip("/") + "/")

    every_input_covered = all(any(inside(i, d) for d in dvc_deps) for i in snakemake_inputs)
    every_dep_used = all(any(inside(i, d) for i in snakemake_inputs) for d in dvc_deps)
    return every_input_covered and every_dep_used


def test_quick_preset_chosen_once_sticks_for_both_tools_and_reruns_by_value(tmp_path):
    """`gpuscale use config/quick.yaml OVERLAY` (what `make quick` runs), then plain `snakemake`: the quick study on
    synthetic data; DVC agrees right after (nothing stale); the overlay copied to another name plans nothing; an edit
    to one model's params reruns that model only, under both tools."""
    repo = copy_project(tmp_path / "repo", git=True)
    overlay = {
        "data": {"source": "synthetic", "train_size": 200, "test_size": 50},
        "train": {"batch_size": 50, "eval_batch_size": 50},
        "models": {"resnet18": {}},
    }
    write_yaml(repo / "config/synthetic.yaml", overlay)
    run(["gpuscale", "use", "config/quick.yaml", "config/synthetic.yaml"], repo)
    run(["snakemake", "--cores", "2"], repo)
    got = records(repo)
    quick = yaml.safe_load((repo / "config/quick.yaml").read_text())
    assert {k[0] for k in got} == set(yaml.safe_load((repo / "params.yaml").read_text())["study"]["models"])
    assert {k[1] for k in got} == set(quick["study"]["devices"]) == {"cpu"}
    assert all(r["data"]["synthetic"] and r["status"] == "measured" for r in got.values())
    assert all(len(r["epochs"]) == quick["train"]["epochs"] for r in got.values())
    assert "synthetic" in (repo / "logs/train/simplecnn/cpu/paper-seed0.log").read_text().lower()
    assert dvc_status(repo) == {}  # the quick run handed to DVC: its stages read the same merge

    # The same values under another file name: nothing to do for either tool (the name is no parameter).
    (repo / "config/synthetic.yaml").rename(repo / "config/renamed.yaml")
    assert "config/renamed.yaml" in run(["gpuscale", "use", "config/quick.yaml", "config/renamed.yaml"], repo).stdout
    assert "Nothing to be done" in run(["snakemake", "-n", "--cores", "2"], repo).stdout
    assert set(dvc_status(repo)) <= {"use"}  # its deps (the choice, config/) changed; no stage it feeds
    assert "Running stage 'train" not in run(["dvc", "repro"], repo).stdout
    assert dvc_status(repo) == {}

    overlay["models"]["resnet18"] = {"batch_size": 25}
    write_yaml(repo / "config/renamed.yaml", overlay)
    dry = run(["snakemake", "-n", "--cores", "2"], repo).stdout
    assert re.findall(r"Training (\S+) on (\S+)", dry) == [("resnet18", "cpu")], dry
    out = run(["dvc", "repro"], repo).stdout
    assert re.findall(r"Running stage '(train@[^']+)'", out) == ["train@resnet18-cpu-paper-0"], out
    assert record.load(repo / "results/runs/resnet18/cpu/paper-seed0.json")["settings"]["train"]["batch_size"] == 25


def test_bad_params_stop_snakemake_before_any_job(tmp_path):
    repo = copy_project(tmp_path / "repo")
    write_yaml(repo / "bad.yaml", {"train": {"epochs": -3}})
    done = run(["snakemake", "--cores", "1", "--configfile", "bad.yaml"], repo, check=False)
    assert done.returncode != 0
    assert "train.epochs: -3 is out of range (allowed: >= 1)" in done.stderr + done.stdout
    assert not (repo / "results").exists() and not (repo / "data/prepared").exists()


def test_dvc_repro_reruns_only_the_edited_model_and_travels_through_a_remote(tmp_path):
    repo = copy_project(tmp_path / "repo", git=True)
    write_yaml(repo / "params.yaml", tiny_params(models=["simplecnn", "resnet18"], devices=["cpu"]))
    commit(repo)
    run(["dvc", "remote", "modify", "--local", "local", "url", str(tmp_path / "remote")], repo)

    # DVC planned from the shipped study's lists: its `use` stage merges the edited params.yaml and stops, once
    done = run(["dvc", "repro"], repo, check=False)
    assert done.returncode != 0 and "study.models, study.devices changed" in done.stdout + done.stderr
    assert not (repo / "results/runs").exists()
    run(["dvc", "repro"], repo)
    first = records(repo)
    assert len(first) == 2 and all(r["status"] == "measured" for r in first.values())
    assert dvc_status(repo) == {}

    config = yaml.safe_load((repo / "params.yaml").read_text())
    config["models"]["resnet18"] = {"batch_size": 16}
    write_yaml(repo / "params.yaml", config)
    assert set(dvc_status(repo)) == {"use"}  # DVC reads the merge: params.yaml is its `use` stage's dep
    run(["gpuscale", "use"], repo)  # merged now: DVC's status names the stage the edit reaches
    assert set(dvc_status(repo)) - {"use"} == {"train@resnet18-cpu-paper-0"}
    out = run(["dvc", "repro"], repo).stdout
    assert "train@resnet18-cpu-paper-0" in out
    assert "Running stage 'train@simplecnn-cpu-paper-0'" not in out
    second = records(repo)
    key18, key_cnn = ("resnet18", "cpu", "paper-seed0.json"), ("simplecnn", "cpu", "paper-seed0.json")
    assert second[key_cnn] == first[key_cnn]
    assert second[key18]["settings"]["train"]["batch_size"] == 16
    assert second[key18]["started_at"] != first[key18]["started_at"]

    commit(repo, "results")
    run(["dvc", "push"], repo)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    run(["dvc", "remote", "modify", "--local", "local", "url", str(tmp_path / "remote")], clone)
    use_params(clone)  # a fresh clone: `gpuscale use` once
    run(["dvc", "pull"], clone)
    assert records(clone) == second
    assert dvc_status(clone) == {}


def test_snakemake_killed_mid_training_leaves_nothing_finished_and_the_rerun_resumes(tmp_path):
    """The whole Snakemake process group killed (SIGKILL) in the middle of a training job: no record, so the job
    is planned again; after `snakemake --unlock` the rerun continues from the epoch checkpoint (runtime.resume)."""
    import os
    import signal
    import time

    from conftest import tool_env

    from gpuscale.measure import checkpoint

    repo = copy_project(tmp_path / "repo")
    overlay = params.deep_merge(
        TINY,
        {"data": {"train_size": 1280}, "train": {"epochs": 6, "log_every_steps": 100}, "runtime": {"resume": True}},
    )
    write_yaml(repo / "tiny.yaml", overlay)
    argv = ["snakemake", "--cores", "1", "--configfile", "tiny.yaml"]
    log = repo / "logs/train/simplecnn/cpu/paper-seed0.log"
    out = repo / "results/runs/simplecnn/cpu/paper-seed0.json"
    proc = subprocess.Popen(
        argv, cwd=repo, env=tool_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and "epoch 2/6 done" not in (log.read_text() if log.exists() else ""):
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    text = log.read_text()
    assert "epoch 2/6 done" in text and "epoch 6/6 done" not in text
    assert not out.exists() and checkpoint.path_for(out).exists()
    run(["snakemake", "--unlock", "--configfile", "tiny.yaml"], repo)
    assert "Training simplecnn on cpu" in run(argv + ["-n"], repo).stdout
    run(argv, repo)
    rec = record.load(out)
    assert rec["process"]["resumed"] and len(rec["process"]["segments"]) == 2
    assert [e["epoch"] for e in rec["epochs"]] == list(range(1, 7)) and not checkpoint.path_for(out).exists()
    assert (repo / "reports/index.html").exists()


def test_data_parallel_device_runs_through_the_workflow_into_the_scaling_table(tmp_path):
    repo = copy_project(tmp_path / "repo")
    write_yaml(
        repo / "ddp.yaml",
        params.deep_merge(TINY, {"study": {"devices": ["cpu", "cpu-ddp2"]}, "data": {"train_size": 256}}),
    )
    run(["snakemake", "--cores", "2", "--configfile", "ddp.yaml"], repo)
    got = records(repo)
    assert set(got) == {("simplecnn", "cpu", "paper-seed0.json"), ("simplecnn", "cpu-ddp2", "paper-seed0.json")}
    assert got[("simplecnn", "cpu-ddp2", "paper-seed0.json")]["distributed"]["world_size"] == 2
    scaling = (repo / "results/tables/scaling.csv").read_text().splitlines()
    assert len(scaling) == 2 and ",cpu-ddp2,cpu,2," in scaling[1]
    assert "Data-parallel scaling" in (repo / "reports/index.html").read_text()
