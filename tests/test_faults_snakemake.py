"""kill -9 of `snakemake` alone (issue 16): its `gpuscale train` child must not run on as an orphan timing job."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

import psutil
import pytest
from conftest import TINY, copy_project, tool_env, write_yaml

from gpuscale.contract import params

pytestmark = pytest.mark.e2e


def training_children(repo) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmdline = proc.info["cmdline"] or []
            if "train" in cmdline and any(a.endswith("gpuscale") for a in cmdline) and proc.cwd() == str(repo):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def test_killing_snakemake_alone_ends_its_training_job(tmp_path):
    repo = copy_project(tmp_path / "repo")
    overlay = params.deep_merge(TINY, {"data": {"train_size": 1280}, "train": {"epochs": 50, "log_every_steps": 100}})
    write_yaml(repo / "tiny.yaml", overlay)
    log = repo / "logs/train/simplecnn/cpu/paper-seed0.log"
    snakemake = subprocess.Popen(
        ["snakemake", "--cores", "1", "--configfile", "tiny.yaml"],
        cwd=repo,
        env=tool_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and "epoch 1/50 done" not in (log.read_text() if log.exists() else ""):
            time.sleep(0.2)
        children = training_children(repo)
        assert children, "no gpuscale train process found under the running workflow"
        os.kill(snakemake.pid, signal.SIGKILL)  # snakemake alone, not its process group
        snakemake.wait(timeout=30)
        gone, alive = psutil.wait_procs(children, timeout=30)
        assert not alive, f"the training job ran on after snakemake was killed: {[p.pid for p in alive]}"
        assert not (repo / "results/runs/simplecnn/cpu/paper-seed0.json").exists()
    finally:
        for proc in training_children(repo):  # never leave an orphan behind, whatever the outcome
            proc.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(snakemake.pid, signal.SIGKILL)
