"""The quick preset through a real one-node SLURM cluster (Debian's slurmctld and slurmd) and Snakemake's SLURM
executor, with the shipped profiles/slurm unchanged.

The cluster: a slurm.conf generated in a temporary folder (auth none, no accounting, partitions `cpu` and `gpu`
as the profile names them), daemons started with it and stopped afterwards. Job steps inside a job read the
default /etc/slurm/slurm.conf (the executor's jobstep drops SLURM_* variables, SLURM_CONF included), so the test
writes that file for the run and removes it after; where one exists already (a real cluster's), it is skipped.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from conftest import copy_project, tool_env, write_yaml

from gpuscale.contract import record

pytestmark = pytest.mark.e2e
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")
MARK = "# gpuscale test cluster (tests/test_slurm.py); removed when the test ends\n"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _why_not() -> str | None:
    missing = [tool for tool in ("slurmctld", "slurmd", "sbatch", "squeue") if not shutil.which(tool)]
    if missing:
        return f"Debian's SLURM packages are not installed ({', '.join(missing)} missing; `make test` installs them)"
    if os.geteuid() != 0:
        return "starting slurmd needs root"
    if SYSTEM_CONF.exists() and not SYSTEM_CONF.read_text().startswith(MARK):
        return f"{SYSTEM_CONF} belongs to a real SLURM setup; not overwriting it"
    return None


@pytest.fixture
def cluster(tmp_path):
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    root = tmp_path / "slurm"
    for sub in ("state", "spool", "log"):
        (root / sub).mkdir(parents=True)
    host = socket.gethostname().split(".")[0]
    memory_mb = (
        int(
            next(
                line.split()[1]
                for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")
            )
        )
        * 9
        // 10
        // 1024
    )
    conf = (
        MARK
        + "\n".join(
            [
                "ClusterName=gpuscaletest",
                f"SlurmctldHost={host}",
                f"SlurmctldPort={_free_port()}",
                f"SlurmdPort={_free_port()}",
                "AuthType=auth/none",
                "CredType=cred/none",
                "SlurmUser=root",
                "SlurmdUser=root",
                f"StateSaveLocation={root}/state",
                f"SlurmdSpoolDir={root}/spool",
                f"SlurmctldPidFile={root}/slurmctld.pid",
                f"SlurmdPidFile={root}/slurmd.pid",
                f"SlurmctldLogFile={root}/log/slurmctld.log",
                f"SlurmdLogFile={root}/log/slurmd.log",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SchedulerType=sched/backfill",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU",
                "ReturnToService=2",
                "MpiDefault=none",
                # keep finished jobs queryable by scontrol for the whole test: the default (300 s)
                # purges them before a slow workflow's end, and the test reads their partitions then
                "MinJobAge=86400",
                "AccountingStorageType=accounting_storage/none",
                "JobAcctGatherType=jobacct_gather/none",
                f"NodeName={host} CPUs={os.cpu_count()} RealMemory={memory_mb} State=UNKNOWN",
                "PartitionName=cpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
                "PartitionName=gpu Nodes=ALL MaxTime=INFINITE State=UP",
            ]
        )
        + "\n"
    )
    conf_path = root / "slurm.conf"
    conf_path.write_text(conf)
    SYSTEM_CONF.parent.mkdir(parents=True, exist_ok=True)
    SYSTEM_CONF.write_text(conf)
    env = {**tool_env(), "SLURM_CONF": str(conf_path)}
    try:
        subprocess.run(["slurmctld", "-f", str(conf_path)], check=True, env=env)
        subprocess.run(["slurmd", "-f", str(conf_path)], check=True, env=env)
        deadline = time.monotonic() + 60
        state = ""
        while time.monotonic() < deadline and state != "idle":
            time.sleep(1)
            state = (
                subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=env, capture_output=True, text=True, check=False)
                .stdout.strip()
                .split("\n")[0]
            )
        assert state == "idle", f"the test cluster's node never became idle ({state!r}): see {root}/log"
        yield env
    finally:
        subprocess.run(["scancel", "--user", "root"], env=env, capture_output=True, check=False)
        for daemon in ("slurmd", "slurmctld"):
            pid_file = root / f"{daemon}.pid"
            if pid_file.exists():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid_file.read_text()), 15)
        if SYSTEM_CONF.exists() and SYSTEM_CONF.read_text().startswith(MARK):
            SYSTEM_CONF.unlink()


def test_quick_preset_through_the_slurm_executor(cluster, tmp_path):
    repo = copy_project(tmp_path / "repo")
    write_yaml(
        repo / "synthetic.yaml",
        {
            "data": {"source": "synthetic", "train_size": 300, "test_size": 50},
            "train": {"batch_size": 50, "eval_batch_size": 50},
        },
    )
    argv = [
        "snakemake",
        "--profile",
        "profiles/slurm",
        "--slurm-status-command",
        "squeue",
        "--slurm-init-seconds-before-status-checks",
        "1",
        "--configfile",
        "config/quick.yaml",
        "synthetic.yaml",
    ]
    done = subprocess.run(argv, cwd=repo, env=cluster, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    print(done.stderr[-3000:])  # shown with -s: the SLURM run's own output
    runs = sorted((repo / "results/runs").rglob("*.json"))
    assert [p.relative_to(repo / "results/runs").as_posix() for p in runs] == [
        "resnet18/cpu/paper-seed0.json",
        "resnet50/cpu/paper-seed0.json",
        "simplecnn/cpu/paper-seed0.json",
    ]
    assert all(record.load(p)["status"] == "measured" for p in runs)
    # every training job went through sbatch, on the profile's CPU partition, with a whole node to itself
    train_jobs = re.findall(r"submitted with SLURM jobid (\d+) \(log: \S*/rule_train/", done.stderr)
    assert len(train_jobs) == 3, done.stderr[-3000:]
    for job in train_jobs:
        shown = subprocess.run(
            ["scontrol", "show", "job", job], env=cluster, capture_output=True, text=True, check=True
        ).stdout
        assert "JobState=COMPLETED" in shown and "Partition=cpu" in shown and "OverSubscribe=NO" in shown, shown
    # the light rules are localrules: run beside Snakemake, never queued as SLURM jobs
    assert not re.findall(
        r"submitted with SLURM jobid \d+ \(log: \S*/rule_(host|aggregate|charts|report)/", done.stderr
    )
    assert (repo / "reports/index.html").exists()
    # The run held the folder (gpuscale.contract.runlock) while its training jobs ran under sbatch, outside its
    # process tree: each reached it as the run's own job through GPUSCALE_WORKFLOW (the executor submits with
    # --export=ALL); without it each would have refused itself (next test).
    assert (repo / ".gpuscale" / "workflow.lock").exists()
    logs = "".join(p.read_text(errors="replace") for p in (repo / ".snakemake").rglob("*.log"))
    assert "a Snakemake run is working in this folder" not in logs
    again = subprocess.run(argv + ["-n"], cwd=repo, env=cluster, capture_output=True, text=True, check=True)
    assert "Nothing to be done" in again.stdout + again.stderr


def test_a_slurm_job_is_the_runs_own_only_through_the_exported_variable(cluster, tmp_path):
    """The lock's pass-through, alone: while a run holds the folder, a stage command in a SLURM job with the run's
    GPUSCALE_WORKFLOW works; the same job without it is refused in one line, as a stage of another workflow."""
    import sys

    from gpuscale.contract import runlock

    repo = copy_project(tmp_path / "repo")
    write_yaml(repo / "o.yaml", {"data": {"source": "synthetic"}})
    hold = (
        "import time; from gpuscale.contract import runlock as r; r.hold_workflow(); open('.ready','w'); time.sleep(99)"
    )
    env = {k: v for k, v in cluster.items() if k != runlock.ENV}
    proc = subprocess.Popen([sys.executable, "-c", hold], cwd=repo, env=env)
    try:
        deadline = time.monotonic() + 60
        while not (repo / ".ready").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the holder never took its lock"
            time.sleep(0.05)
        done = {}
        for name, job_env in (("own", {**env, runlock.ENV: str(proc.pid)}), ("other", env)):
            command = f"gpuscale host --params params.yaml --params o.yaml --out results/{name}.json"
            argv = ["sbatch", "--wait", "--export=ALL", "-p", "cpu", "-o", f"{name}.out", "--wrap", command]
            subprocess.run(argv, cwd=repo, env=job_env, capture_output=True, text=True, timeout=300, check=False)
            done[name] = (repo / f"{name}.out").read_text()
    finally:
        proc.kill()
        proc.wait()
    assert (repo / "results/own.json").is_file(), done["own"]
    assert not (repo / "results/other.json").exists()
    refused = [line for line in done["other"].splitlines() if line.startswith("gpuscale host: error:")]
    assert len(refused) == 1 and "a Snakemake run is working in this folder" in refused[0], done["other"]
