"""One workflow at a time in a project folder: Snakemake's run, or stage commands started another way (DVC, by hand).

Two Snakemake runs in one folder meet Snakemake's own directory lock. A Snakemake run and `dvc repro` (or a
hand-run stage) do not: both would write the same outputs (data, tables, charts, report, predictions, records).
So, with two OS file locks (fcntl.flock, freed by the kernel however their holder dies) under `.gpuscale/`:

- a Snakemake run holds `workflow.lock` shared for its whole life (taken in its onstart, after Snakemake's own
  lock, so two Snakemake runs are still Snakemake's to judge), and marks the jobs it starts with GPUSCALE_WORKFLOW;
- every stage command outside such a run holds `commands.lock` shared while it works (DVC's stages and hand-run
  commands may run side by side, as they may today);
- each side takes its own lock first and then looks at the other's: whichever comes second is **refused at once**
  in one line naming the holder (exit 2), before it writes anything. It does not wait: the other run is making
  the same outputs, so waiting would only redo its work over it.

A stage command's refusal comes too late for `dvc repro`: DVC removes a stage's outputs before it starts the
stage's command. So where the folder is a DVC project the Snakemake run also holds DVC's own repo lock,
`.dvc/tmp/lock`, as DVC takes it (zc.lockfile: flock, exclusive, non-blocking, the pid written in), until its jobs
are done (release_workflow, before its onsuccess runs `dvc commit`) or it ends. DVC takes that lock around its
whole command before it reads a stage (dvc.repo.reproduce is @locked), so `dvc repro`, `dvc exp run`,
`dvc checkout` (and `dvc status`, `dvc push`: every locked DVC command) end on DVC's own line ("Unable to acquire
lock") without touching an output; `--wait-for-lock` waits for the run instead. A Snakemake run that finds the
lock held by a DVC command (after DVC's own 3 s of tries) is refused in one line naming it. Not held where DVC is
set to `core.hardlink_lock` (a lock file that no kernel frees: a killed run would leave DVC locked out).

Stdlib only (dvc's config is read where DVC is installed); Linux names the holder (from /proc/locks), elsewhere
the line says "another process".
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

FOLDER = ".gpuscale"
WORKFLOW_LOCK = "workflow.lock"
COMMANDS_LOCK = "commands.lock"
ENV = "GPUSCALE_WORKFLOW"  # set for the jobs of a Snakemake run that holds workflow.lock: they belong to it
DVC_LOCK = Path(".dvc", "tmp", "lock")  # dvc.repo.Repo: make_lock(os.path.join(self.tmp_dir, "lock"), ...)
DVC_TRIES = 3.0  # seconds, as DVC itself tries for its lock before giving up (dvc.lock.DEFAULT_TIMEOUT)

_held: dict[str, int] = {}  # lock path -> descriptor this process holds (shared) until it ends


class RunLockError(RuntimeError):
    """Another workflow is working in this folder; str() is one line."""


def _open(name: str, folder: Path | str = ".") -> tuple[int, Path]:
    path = Path(folder) / FOLDER / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o666), path


def _hold_shared(name: str, folder: Path | str) -> Path:
    import fcntl

    fd, path = _open(name, folder)
    fcntl.flock(fd, fcntl.LOCK_SH)  # only ever held exclusively for the instant of a look (_taken)
    old = _held.pop(str(path.resolve()), None)
    if old is not None:
        os.close(old)
    _held[str(path.resolve())] = fd
    return path


def _release(path: Path) -> None:
    fd = _held.pop(str(path.resolve()), None)
    if fd is not None:
        os.close(fd)


def _taken(name: str, folder: Path | str) -> bool:
    """Whether another process holds `name`: it cannot be taken exclusively for a moment (tried over 0.2 s, so two
    such looks at once never read as a holder)."""
    import fcntl

    fd, _ = _open(name, folder)
    try:
        for _ in range(10):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                return False
            except BlockingIOError:
                time.sleep(0.02)
        return True
    finally:
        os.close(fd)


def holders(name: str, folder: Path | str = ".") -> list[str]:
    """'process PID (COMMAND)' for each process that holds the lock (Linux: /proc/locks), this one left out."""
    return _holders_of(Path(folder) / FOLDER / name)


def _holders_of(path: Path) -> list[str]:
    try:
        inode = path.stat().st_ino
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    pids = []
    for line in lines:
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
            pid = int(fields[4])
            if pid != os.getpid() and pid not in pids:
                pids.append(pid)
    return [f"process {pid} ({_command_of(pid)})" for pid in pids]


def _command_of(pid: int) -> str:
    """The holder's command line, shortened to one line: `gpuscale aggregate ...`, `snakemake --cores 2`."""
    with contextlib.suppress(OSError):
        argv = [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
        argv[:1] = [os.path.basename(a) for a in argv[:1]]
        if len(argv) > 2 and argv[0].startswith("python") and argv[1] == "-m":  # python -m gpuscale ...
            argv = argv[2:]
        elif len(argv) > 1 and argv[0].startswith("python") and not argv[1].startswith("-"):  # a script's python
            argv = [os.path.basename(argv[1]), *argv[2:]]
        return " ".join(" ".join(argv).split())[:120]
    return "unknown command"


def _hold_unless(mine: str, other: str, folder: Path | str, refusal) -> None:
    """Hold `mine` (shared); where `other` is held, let go again and refuse in one line naming its holders."""
    path = _hold_shared(mine, folder)
    if _taken(other, folder):
        _release(path)
        raise RunLockError(refusal(", ".join(holders(other, folder)) or "another process"))


def hold_workflow(folder: Path | str = ".") -> None:
    """For the Snakemake run (its onstart): hold workflow.lock, and DVC's repo lock in a DVC project, while it lives;
    or refuse while a stage command started outside it (by DVC or by hand), or a DVC command, works here."""
    _hold_unless(
        WORKFLOW_LOCK,
        COMMANDS_LOCK,
        folder,
        lambda who: (
            f"a gpuscale stage started outside this workflow (by dvc repro or by hand) is writing in this "
            f"folder: {who}; two workflows here would write the same outputs: let it finish (or stop it), "
            "then run again"
        ),
    )
    try:
        _hold_dvc(folder)
    except RunLockError:
        _release(Path(folder) / FOLDER / WORKFLOW_LOCK)
        raise
    os.environ[ENV] = str(os.getpid())


NO_HOOK_FLAGS = ("--no-hooks", "--delete-all-output", "--delete-temp-output")


def hooks_skipped(argv: list[str]) -> str | None:
    """The Snakemake flag in `argv` under which no onstart runs, though the run writes or deletes outputs
    (`--no-hooks`, `--delete-all-output`, `--delete-temp-output`, or an abbreviation argparse accepts), unless it is
    a dry run; None otherwise. The Snakefile then holds the folder from its parse on (the main process's
    settings are not known at parse time, so the command line is read)."""
    names = [arg.split("=", 1)[0] for arg in argv[1:]]
    dry = any(n in ("--dry-run", "--dryrun", "--dry") or (n[:1] == "-" and n[1:2] != "-" and "n" in n) for n in names)
    for name in names:
        flag = next((f for f in NO_HOOK_FLAGS if len(name) > 5 and f.startswith(name)), None)
        if flag and not dry:
            return flag
    return None


def release_workflow(folder: Path | str = ".") -> None:
    """For the Snakemake run whose jobs are all done (its onsuccess, before `dvc commit`, which takes DVC's lock):
    let go of DVC's lock and workflow.lock; the process's end lets go of them otherwise."""
    _release(Path(folder) / DVC_LOCK)
    _release(Path(folder) / FOLDER / WORKFLOW_LOCK)


def _hold_dvc(folder: Path | str) -> None:
    """Where `folder` is a DVC project: hold DVC's repo lock as DVC takes it by default (zc.lockfile.LockFile:
    fcntl.flock LOCK_EX | LOCK_NB, then " PID" written in), trying for DVC's own 3 s; or refuse naming its holder.
    Nothing where DVC is set to its hardlink lock (flufl.lock, which no flock holds off)."""
    import fcntl

    path = Path(folder) / DVC_LOCK
    if not path.parent.parent.is_dir() or str(path.resolve()) in _held or _hardlink_lock(path.parent.parent):
        return
    path.parent.mkdir(exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    deadline = time.monotonic() + DVC_TRIES
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                who = ", ".join(_holders_of(path)) or "another process"
                raise RunLockError(
                    f"a DVC command holds DVC's lock in this folder ({DVC_LOCK}): {who}; this run holds that lock "
                    "while it works, so that dvc repro cannot remove the outputs it makes: let that command finish "
                    "(or stop it), then run again"
                ) from None
            time.sleep(0.1)
    text = f" {os.getpid()}\n".encode()  # as zc.lockfile writes it: `cat .dvc/tmp/lock` shows this run's pid
    os.pwrite(fd, text, 0)
    os.ftruncate(fd, len(text))
    _held[str(path.resolve())] = fd


def _hardlink_lock(dvc_dir: Path) -> bool:
    """Whether DVC's config (every level: system, global, the project's, local) sets core.hardlink_lock."""
    try:
        from dvc.config import Config, ConfigError
    except ImportError:  # no dvc beside this Snakemake: read nothing, DVC's default is the flock one
        return False
    try:
        return bool(Config(dvc_dir=str(dvc_dir))["core"].get("hardlink_lock", False))
    except ConfigError:  # DVC itself stops on this config, so no dvc repro runs here
        return False


def guard_command(command: str, folder: Path | str = ".") -> None:
    """For a stage command: nothing to do in a job of the Snakemake run holding the folder; else hold
    commands.lock while this process works, or refuse while a Snakemake run works here."""
    if os.environ.get(ENV):
        return
    _hold_unless(
        COMMANDS_LOCK,
        WORKFLOW_LOCK,
        folder,
        lambda who: (
            f"a Snakemake run is working in this folder: {who}; a second workflow here would write the same "
            f"outputs: let it finish (or stop it), then run gpuscale {command} again"
        ),
    )
