"""Atomic writes: an interrupted stage leaves nothing that looks finished."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger("gpuscale.fsutil")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def clean_stale(path: Path | str) -> list[Path]:
    """Remove the partial files and folders a killed writer of `path` left beside it (`.NAME.PID.*.partial`
    whose PID is gone, `.NAME.*.partial` of older versions that did not name their writer, and `.NAME.old`);
    return what was removed. A live writer's partial file is left alone."""
    path = Path(path)
    removed = []
    if not path.parent.is_dir():
        return removed
    prefix = f".{path.name}."
    for entry in path.parent.iterdir():
        name = entry.name
        if not name.startswith(prefix) or not (name.endswith(".partial") or name == f"{prefix}old"):
            continue
        writer = name[len(prefix) :].split(".", 1)[0]
        if writer.isdigit() and _alive(int(writer)):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


@contextlib.contextmanager
def atomic_path(path: Path | str, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success move it into place in one rename. The temporary name
    holds this process's id, so the next writer can tell a killed writer's leftover (and removes it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=f"{suffix}.partial", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    tmp_path.chmod(0o666 & ~_umask())  # mkstemp makes 0600; finished files get the usual mode
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


def write_text(path: Path | str, text: str) -> None:
    with atomic_path(path) as tmp, open(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def write_json(path: Path | str, value: Any) -> None:
    write_text(path, json.dumps(value, indent=2, sort_keys=False) + "\n")


@contextlib.contextmanager
def atomic_directory(path: Path | str) -> Iterator[Path]:
    """Yield an empty temporary directory beside `path`; on success it replaces `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in clean_stale(path):
        log.info("removed %s, left by an interrupted run", stale)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".partial", dir=path.parent))
    tmp.chmod(0o777 & ~_umask())
    try:
        yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _file_digest(path: Path | str, digest, chunk_bytes: int) -> str:
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_file(path: Path | str, chunk_bytes: int = 1 << 20) -> str:
    return _file_digest(path, hashlib.sha256(), chunk_bytes)


def md5_file(path: Path | str, chunk_bytes: int = 1 << 20) -> str:
    return _file_digest(path, hashlib.md5(), chunk_bytes)
