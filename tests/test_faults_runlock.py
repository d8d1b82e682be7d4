"""One workflow at a time in a project folder (issue 28, family 5): a Snakemake run and stage commands started by
DVC or by hand refuse each other in one line naming the holder, before writing anything; the next run completes.
Each case with two real processes (gpuscale.contract.runlock)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import records
from conftest import REPO, TINY, copy_project, tool_env, write_yaml

from gpuscale.contract import runlock

HOLD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from gpuscale.contract import runlock
    getattr(runlock, sys.argv[1])(*sys.argv[2:3])
    Path(".ready").write_text("1")
    time.sleep(120)
    """
)


def holder(folder: Path, how: str, *args: str) -> subprocess.Popen:
    """A process holding the folder as the Snakefile's onstart does (hold_workflow) or as a stage command outside a
    workflow does (guard_command)."""
    (folder / ".ready").unlink(missing_ok=True)
    env = {k: v for k, v in tool_env().items() if k != runlock.ENV}
    proc = subprocess.Popen([sys.executable, "-c", HOLD, how, *args], cwd=folder, env=env)
    deadline = time.monotonic() + 60
    while not (folder / ".ready").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the holder never took its lock"
        time.sleep(0.05)
    return proc


def run(argv: list[str], cwd: Path, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in tool_env().items() if k != runlock.ENV} | env
    return subprocess.run(argv, cwd=cwd, env=environ, capture_output=True, text=True, check=False)


@pytest.fixture
def project(tmp_path) -> Path:
    records.study(tmp_path / "reference" / "small", records.SPEEDUPS, records.CPU_EPOCH)
    write_yaml(tmp_path / "o.yaml", {**TINY, "report": {"reference": ["reference/small"]}})
    return tmp_path


AGGREGATE = ["--reference-only", "--out", "tables", "--metrics", "m.json"]


def gpuscale(command: str, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gpuscale",
        command,
        "--params",
        str(REPO / "params.yaml"),
        "--params",
        "o.yaml",
        *args,
    ]


def test_a_stage_command_while_a_snakemake_run_works_is_refused_naming_it(project):
    proc = holder(project, "hold_workflow")
    try:
        done = run(gpuscale("aggregate", *AGGREGATE), project)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert lines[0].startswith("gpuscale aggregate: error: a Snakemake run is working in this folder: ")
        assert f"process {proc.pid} (" in lines[0] and lines[0].endswith("then run gpuscale aggregate again")
        assert not (project / "tables").exists() and not (project / "m.json").exists()
        # a job of that run (GPUSCALE_WORKFLOW set by the run) is its own: it works
        assert run(gpuscale("host", "--out", "h.json"), project, GPUSCALE_WORKFLOW=str(proc.pid)).returncode == 0
    finally:
        proc.kill()
        proc.wait()
    done = run(gpuscale("aggregate", *AGGREGATE), project)  # the run gone, the kernel freed its lock
    assert done.returncode == 0 and (project / "tables" / "notes.json").is_file(), done.stderr


def test_stage_commands_outside_a_workflow_run_side_by_side(project):
    proc = holder(project, "guard_command", "data")
    try:
        assert run(gpuscale("host", "--out", "h.json"), project).returncode == 0
    finally:
        proc.kill()
        proc.wait()


def test_snakemake_while_a_stage_command_works_ends_in_one_line_and_the_next_run_completes(tmp_path):
    folder = copy_project(tmp_path / "p")
    write_yaml(folder / "o.yaml", TINY)
    argv = ["snakemake", "results/host.json", "--cores", "1", "--configfile", "o.yaml"]
    proc = holder(folder, "guard_command", "data")  # as `dvc repro`'s data stage, mid-way
    try:
        done = run(argv, folder)
        last = done.stderr.strip().splitlines()[-1]
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert last.startswith("gpuscale: error: a gpuscale stage started outside this workflow"), done.stderr
        assert f"process {proc.pid} (" in last and last.endswith("let it finish (or stop it), then run again")
        assert not (folder / "results").exists()
    finally:
        proc.kill()
        proc.wait()
    done = run(argv, folder)
    assert done.returncode == 0 and (folder / "results" / "host.json").is_file(), done.stderr[-2000:]
    assert not (folder / ".snakemake" / "locks").exists() or not os.listdir(folder / ".snakemake" / "locks")


@pytest.mark.parametrize("flag", ["--no-hooks", "--delete-all-output"])
def test_snakemake_without_its_hooks_still_holds_the_folder(tmp_path, flag):
    """No onstart runs under --no-hooks or --delete-all-output: such a run took no lock, and ran (or deleted every
    output) beside a stage command started by DVC or by hand. The Snakefile holds the folder from its parse."""
    folder = copy_project(tmp_path / "p")
    write_yaml(folder / "o.yaml", TINY)
    argv = ["snakemake", "results/host.json", "--cores", "1", "--configfile", "o.yaml", flag]
    (folder / "results").mkdir()
    (folder / "results/host.json").write_text('{"made": "earlier"}\n')
    proc = holder(folder, "guard_command", "data")  # as `dvc repro`'s data stage, mid-way
    try:
        done = run([*argv, "--forcerun", "host"] if flag == "--no-hooks" else argv, folder)
        last = done.stderr.strip().splitlines()[-1]
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert last.startswith("gpuscale: error: a gpuscale stage started outside this workflow"), done.stderr
        assert (folder / "results/host.json").read_text() == '{"made": "earlier"}\n'
    finally:
        proc.kill()
        proc.wait()
    done = run([*argv, "--forcerun", "host"] if flag == "--no-hooks" else argv, folder)  # alone: it completes, its
    assert done.returncode == 0, done.stderr[-2000:]  # jobs its own (GPUSCALE_WORKFLOW): none refused itself
    if flag == "--no-hooks":
        assert "host_fingerprint" in (folder / "results/host.json").read_text()  # written again by the job
    else:
        assert not (folder / "results/host.json").exists()
    assert not runlock.hooks_skipped(["snakemake", "-n", flag]) and runlock.hooks_skipped(["snakemake", "--no-hook"])


# ----------------------------------------------------------------------------- DVC's own lock (dvc repro removes first)

DVC_HOLD = textwrap.dedent(
    """
    import time
    from pathlib import Path
    from dvc.lock import make_lock
    Path(".dvc/tmp").mkdir(exist_ok=True)  # as dvc.repo.Repo makes it first
    lock = make_lock(".dvc/tmp/lock", tmp_dir=".dvc/tmp")  # DVC's own lock, held while `lock` lives
    lock.lock()
    Path(".ready").write_text("1")
    time.sleep(120)
    """
)


def made_outputs(folder: Path) -> dict[Path, bytes]:
    """Outputs of DVC's first stages as an earlier run left them (DVC would remove them before their commands)."""
    outs = {folder / "results/host.json": b'{"made": "earlier"}\n', folder / "data/prepared/notes.txt": b"earlier\n"}
    for path, text in outs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text)
    return outs


@pytest.mark.e2e
def test_dvc_repro_while_a_snakemake_run_works_stops_at_dvcs_lock_and_removes_no_output(tmp_path):
    folder = copy_project(tmp_path / "p", git=True)
    outs = made_outputs(folder)
    proc = holder(folder, "hold_workflow")  # as the Snakefile's onstart does, in a DVC project
    try:
        done = run(["dvc", "repro"], folder)
        assert {path: path.read_bytes() for path in outs if path.exists()} == outs, done.stdout + done.stderr
        assert done.returncode != 0 and "Unable to acquire lock" in done.stderr, done.stdout + done.stderr
        assert os.listdir(folder / "data/prepared") == ["notes.txt"] and not (folder / "logs").exists()
        assert (folder / ".dvc/tmp/lock").read_text() == f" {proc.pid}\n"  # what zc.lockfile writes there
    finally:
        proc.kill()
        proc.wait()
    done = run(["dvc", "repro", "--dry", "host"], folder)  # the run gone, the kernel freed DVC's lock
    assert done.returncode == 0, done.stderr


def test_the_run_lets_go_of_dvcs_lock_for_its_dvc_commit_and_leaves_a_hardlink_lock_alone(tmp_path, monkeypatch):
    import zc.lockfile

    monkeypatch.delenv(runlock.ENV, raising=False)  # hold_workflow sets it for this process
    (tmp_path / ".dvc").mkdir()
    lock = str(tmp_path / ".dvc/tmp/lock")
    try:
        runlock.hold_workflow(tmp_path)
        with pytest.raises(zc.lockfile.LockError):  # DVC's own way to its lock: held off
            zc.lockfile.LockFile(lock)
        runlock.release_workflow(tmp_path)  # the onsuccess, before `dvc commit`
        zc.lockfile.LockFile(lock).close()
        assert not runlock._taken(runlock.WORKFLOW_LOCK, tmp_path)
        # core.hardlink_lock: DVC's lock is then a file no flock holds off, which no kernel frees: not taken
        (tmp_path / ".dvc/config").write_text("[core]\n    hardlink_lock = true\n")
        Path(lock).unlink()
        runlock.hold_workflow(tmp_path)
        assert not Path(lock).exists()
    finally:
        runlock.release_workflow(tmp_path)


@pytest.mark.e2e
def test_snakemake_while_a_dvc_command_holds_dvcs_lock_ends_in_one_line_naming_it(tmp_path):
    folder = copy_project(tmp_path / "p")
    write_yaml(folder / "o.yaml", TINY)
    outs = made_outputs(folder)
    (folder / ".ready").unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", DVC_HOLD], cwd=folder, env=tool_env())  # as `dvc status` does
    try:
        deadline = time.monotonic() + 60
        while not (folder / ".ready").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the holder never took DVC's lock"
            time.sleep(0.05)
        argv = ["snakemake", "results/host.json", "--forcerun", "host", "--cores", "1", "--configfile", "o.yaml"]
        done = run(argv, folder)
        last = done.stderr.strip().splitlines()[-1]
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert last.startswith("gpuscale: error: a DVC command holds DVC's lock in this folder (.dvc/tmp/lock): ")
        assert f"process {proc.pid} (" in last and last.endswith("let that command finish (or stop it), then run again")
        assert {path: path.read_bytes() for path in outs} == outs
        assert not runlock._taken(runlock.WORKFLOW_LOCK, folder)  # let go of with the refusal
    finally:
        proc.kill()
        proc.wait()
