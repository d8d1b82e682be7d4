"""The host-wide timing lock and the parent watch (issue 16): timing integrity does not depend on Snakemake."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import tool_env

from gpuscale.measure import timinglock
from gpuscale.measure.timinglock import TimingLockError

HOLD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from gpuscale.measure import timinglock
    with timinglock.hold(watch_parent={watch}):
        Path(sys.argv[1]).write_text(str(__import__("os").getpid()))
        time.sleep(120)
    """
)


def holder(tmp_path: Path, watch: bool = False, env: dict | None = None) -> tuple[subprocess.Popen, int]:
    """A process that holds the lock (and says so by writing its pid to a file)."""
    ready = tmp_path / f"ready{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD.format(watch=watch), str(ready)], env=env or tool_env(), stderr=subprocess.PIPE
    )
    wait_for(lambda: ready.exists() and ready.read_text(), "the holder never took the lock")
    return proc, int(ready.read_text())


def wait_for(condition, message: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(message)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie has ended; only its exit status waits to be collected


@pytest.fixture
def lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUSCALE_LOCK_DIR", str(tmp_path / "lock"))
    monkeypatch.delenv("GPUSCALE_LOCK_TIMEOUT", raising=False)
    return tmp_path / "lock"


def test_a_second_timing_job_is_refused_naming_the_holder_when_it_may_not_wait(lock_dir, tmp_path, monkeypatch):
    proc, pid = holder(tmp_path)
    try:
        monkeypatch.setenv("GPUSCALE_LOCK_TIMEOUT", "0")
        with pytest.raises(TimingLockError, match=f"held by process {pid} .*refused") as err:
            timinglock.acquire()
        assert "\n" not in str(err.value)
    finally:
        proc.kill()
        proc.wait()


def test_a_second_timing_job_waits_and_runs_when_the_first_ends(lock_dir, tmp_path, caplog):
    proc, pid = holder(tmp_path)
    caplog.set_level("WARNING", logger="gpuscale.timinglock")
    killer = subprocess.Popen([sys.executable, "-c", f"import os, time; time.sleep(1); os.kill({pid}, 9)"])
    try:
        with timinglock.hold(watch_parent=False) as held:
            assert held["held"] and held["holder_pid"] == os.getpid() and held["waited_seconds"] > 0
            assert timinglock.holder()["pid"] == os.getpid()
        assert any(f"held by process {pid}" in m for m in caplog.messages)  # it said whom it waited for
    finally:
        proc.kill()
        proc.wait()
        killer.wait()


def test_the_kernel_releases_the_lock_of_a_killed_holder(lock_dir, tmp_path, monkeypatch):
    proc, _ = holder(tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    monkeypatch.setenv("GPUSCALE_LOCK_TIMEOUT", "0")
    with timinglock.hold(watch_parent=False) as held:
        assert held["held"]
    assert timinglock.describe()["held"] is False  # released on leaving


def test_hold_is_reentrant_and_ranks_of_a_holder_inherit_it(lock_dir, monkeypatch):
    with timinglock.hold(watch_parent=False) as outer, timinglock.hold(watch_parent=False) as inner:
        assert outer == inner
        env = dict(os.environ, RANK="1", LOCAL_RANK="1")
        code = "from gpuscale.measure import timinglock\nwith timinglock.hold() as h: print(h)"
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert "'inherited': True" in done.stdout and f"'holder_pid': {os.getpid()}" in done.stdout


def test_a_bad_timeout_setting_is_one_line(lock_dir, monkeypatch):
    monkeypatch.setenv("GPUSCALE_LOCK_TIMEOUT", "soon")
    with pytest.raises(TimingLockError, match="not a number of seconds"):
        timinglock.acquire()


LAUNCHER = textwrap.dedent(
    """
    import subprocess, sys, time
    subprocess.Popen({argv!r})
    time.sleep(120)
    """
)


@pytest.mark.parametrize("through_shell", [False, True], ids=["direct child", "child of sh -c (Snakemake, DVC)"])
def test_a_timing_job_ends_when_whoever_started_it_is_killed(lock_dir, tmp_path, through_shell):
    """kill -9 of the starter (as of Snakemake in the issue): its timing job must not run on as an orphan."""
    ready = tmp_path / "ready"
    child = [sys.executable, "-c", HOLD.format(watch=True), str(ready)]
    if through_shell:  # Snakemake runs `set -euo pipefail; <command>` through bash: bash stays between them
        child = ["bash", "-c", "set -euo pipefail; " + " ".join(f"'{a}'" for a in child) + "; true"]
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER.format(argv=child)], env=tool_env())
    try:
        wait_for(lambda: ready.exists() and ready.read_text(), "the timing job never took the lock")
        pid = int(ready.read_text())
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        wait_for(lambda: not alive(pid), "the orphaned timing job ran on")
    finally:
        launcher.kill()
        launcher.wait()
    with timinglock.hold(watch_parent=False) as held:  # and it left the lock free
        assert held["held"]


def test_the_record_says_it_held_the_lock(prepared, tmp_path, lock_dir):
    from test_train import tiny_settings

    from gpuscale.contract import record
    from gpuscale.measure import train

    train.run(tiny_settings(epochs=1), prepared, tmp_path / "r.json", threads=1)
    lock = record.load(tmp_path / "r.json")["environment"]["timing_lock"]
    assert lock["held"] is True and lock["path"] == str(lock_dir / timinglock.LOCK_NAME)
    assert lock["holder_pid"] == os.getpid() and lock["waited_seconds"] >= 0
