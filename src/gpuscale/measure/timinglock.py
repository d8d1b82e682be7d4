"""The host-wide timing lock: one timing job at a time on a host, whoever starts it.

Snakemake's `timing_slot` resource serialises the jobs of one Snakemake process only; a second checkout, DVC, a
hand-run `gpuscale train` or a training process orphaned by a killed Snakemake would overlap with it and both
timings would be wrong. So every timing job takes an OS file lock (fcntl.flock, exclusive) on one well-known
path, `$GPUSCALE_LOCK_DIR/gpuscale-timing.lock` (default /tmp, shared by every user and checkout of the host).

- A second timing job WAITS for the lock, saying who holds it (pid, command, since when) when it starts waiting
  and every minute after; `GPUSCALE_LOCK_TIMEOUT=SECONDS` makes it give up after that long with one line
  (`GPUSCALE_LOCK_TIMEOUT=0`: refuse at once).
- The kernel releases the lock when its holder dies, however it dies (kill -9 included): no stale lock.
- A timing job ends when whoever started it is gone: PR_SET_PDEATHSIG (Linux, through ctypes) sends it SIGTERM
  when its parent dies, and a watchdog thread (every platform) does the same when it is re-parented; where the
  parent is a `sh -c` / `bash -c` wrapper (how Snakemake and DVC start commands), also when that wrapper is
  re-parented, i.e. when Snakemake or DVC died. `GPUSCALE_PARENT_WATCH=0` turns the watch off.
- The record says it held the lock: environment.timing_lock = {path, held, waited_seconds, holder_pid}.
- The processes of a data-parallel run are started by a process that holds the lock; they inherit it (through
  the GPUSCALE_TIMING_LOCK variable) rather than wait for it.

Torch-free and stdlib-only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("gpuscale.timinglock")

LOCK_NAME = "gpuscale-timing.lock"
INHERITED = "GPUSCALE_TIMING_LOCK"  # set for the processes a lock holder starts (data-parallel ranks)
REPORT_EVERY_SECONDS = 60.0
WATCH_EVERY_SECONDS = 1.0
PR_SET_PDEATHSIG = 1

_held: dict | None = None  # what this process holds (or inherited), for the record
_handle: int | None = None
_depth = 0


class TimingLockError(RuntimeError):
    """The lock could not be taken; str() is one line."""


def lock_path() -> Path:
    return Path(os.environ.get("GPUSCALE_LOCK_DIR") or "/tmp") / LOCK_NAME


def _timeout() -> float | None:
    raw = os.environ.get("GPUSCALE_LOCK_TIMEOUT")
    if raw in (None, ""):
        return None
    try:
        value = float(raw)
    except ValueError:
        raise TimingLockError(f"GPUSCALE_LOCK_TIMEOUT={raw!r} is not a number of seconds (allowed: >= 0)") from None
    if value < 0:
        raise TimingLockError(f"GPUSCALE_LOCK_TIMEOUT={raw!r} is out of range (allowed: >= 0)")
    return value


def holder(path: Path | None = None) -> dict | None:
    """What the current holder wrote into the lock file (pid, argv, since), or None."""
    try:
        text = (path or lock_path()).read_text()
        value = json.loads(text) if text.strip() else None
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _describe_holder(info: dict | None) -> str:
    if not info:
        return "another timing job"
    command = " ".join(str(a) for a in info.get("argv") or [])[:160]
    return f"process {info.get('pid')} ({command}) since {info.get('since')}"


def describe() -> dict:
    """For the record: environment.timing_lock."""
    if _held is not None:
        return dict(_held)
    return {"path": str(lock_path()), "held": False, "waited_seconds": None, "holder_pid": None}


def _open(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as err:
        raise TimingLockError(
            f"cannot open the timing lock {path} ({err.strerror}); make it writable or set GPUSCALE_LOCK_DIR "
            f"to a folder every timing job on this host can write"
        ) from None
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o666)  # other users' timing jobs must be able to take it too
    return fd


def acquire() -> dict:
    """Take the lock (waiting as the module says); return what the record keeps."""
    import fcntl

    global _held, _handle
    path = lock_path()
    timeout = _timeout()
    fd = _open(path)
    start = time.monotonic()
    next_report = 0.0
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            waited = time.monotonic() - start
            who = _describe_holder(holder(path))
            if timeout is not None and waited >= timeout:
                os.close(fd)
                raise TimingLockError(
                    f"the host-wide timing lock {path} is held by {who}; refused after {waited:.0f} s "
                    f"(GPUSCALE_LOCK_TIMEOUT={timeout:g}): two timing jobs at once would spoil both timings"
                ) from None
            if waited >= next_report:
                log.warning("waiting for the host-wide timing lock %s, held by %s", path, who)
                next_report += REPORT_EVERY_SECONDS
            time.sleep(0.2)
        except OSError as err:
            os.close(fd)
            raise TimingLockError(
                f"cannot lock {path} ({err.strerror}); set GPUSCALE_LOCK_DIR to a local folder"
            ) from None
    waited = time.monotonic() - start
    info = {"pid": os.getpid(), "argv": sys.argv, "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
    if waited >= 1:
        log.info("took the host-wide timing lock %s after waiting %.0f s", path, waited)
    _handle = fd
    _held = {"path": str(path), "held": True, "waited_seconds": round(waited, 3), "holder_pid": os.getpid()}
    os.environ[INHERITED] = json.dumps(_held)
    return dict(_held)


def release() -> None:
    global _held, _handle
    if _handle is not None:
        with contextlib.suppress(OSError):
            os.ftruncate(_handle, 0)
        os.close(_handle)  # closing the only descriptor releases the flock
    _handle = _held = None
    os.environ.pop(INHERITED, None)


def _inherited() -> dict | None:
    """The lock a parent holds for this process (a data-parallel rank), if its holder is this process's parent."""
    raw = os.environ.get(INHERITED)
    if not raw or "RANK" not in os.environ:
        return None
    try:
        info = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(info, dict) or not info.get("held"):
        return None
    return {**info, "inherited": True}


@contextlib.contextmanager
def hold(watch_parent: bool = True) -> Iterator[dict]:
    """Hold the timing lock for the body (re-entrant in one process); ends this process when its starter dies."""
    global _held, _depth
    inherited = None
    if _depth == 0:
        inherited = _inherited()
        if inherited is not None:
            _held = inherited
        elif os.environ.get("LOCAL_RANK", "0") != "0":
            # another rank of a data-parallel run started by torchrun itself: local rank 0 holds the lock for
            # the host (waiting here would deadlock the process group); only rank 0 writes the record
            inherited = _held = {"path": str(lock_path()), "held": False, "waited_seconds": None, "holder_pid": None}
        else:
            acquire()
        if watch_parent and os.environ.get("GPUSCALE_PARENT_WATCH", "1") != "0" and inherited is None:
            watch_parent_death()
    _depth += 1
    try:
        yield dict(_held)
    finally:
        _depth -= 1
        if _depth == 0:
            if inherited is not None:
                _held = None
            else:
                release()


# ----------------------------------------------------------------------------- parent watch


def _ppid_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _is_shell_wrapper(pid: int) -> bool:
    """A non-interactive `sh -c`/`bash -c` (how Snakemake and DVC run a command)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    name = os.path.basename(argv[0].decode(errors="replace")) if argv and argv[0] else ""
    return name.lstrip("-") in ("sh", "bash", "dash", "zsh") and b"-c" in argv[1:]


def _set_pdeathsig(sig: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


_watching = False


def watch_parent_death(sig: int = signal.SIGTERM) -> None:
    """End this process (signal `sig` to itself) when its parent dies or when a `sh -c` parent is orphaned."""
    global _watching
    if _watching:
        return
    _watching = True
    parent = os.getppid()
    _set_pdeathsig(sig)
    grandparent = _ppid_of(parent) if _is_shell_wrapper(parent) else None
    if os.getppid() != parent:  # died between the two calls
        os.kill(os.getpid(), sig)

    def watch():
        while True:
            time.sleep(WATCH_EVERY_SECONDS)
            gone = os.getppid() != parent
            orphaned = grandparent is not None and _ppid_of(parent) not in (grandparent, None)
            if gone or orphaned:
                who = "its parent" if gone else "the process that started its shell"
                log.error("%s (pid %d) is gone: this timing job ends too", who, parent if gone else grandparent)
                os.kill(os.getpid(), sig)
                return

    threading.Thread(target=watch, name="gpuscale-parent-watch", daemon=True).start()
