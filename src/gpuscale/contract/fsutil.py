"""Atomic writes: an interrupted stage leaves nothing that looks finished."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
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


class WriteError(OSError):
    """An output that could not be written for want of room: a full disk, a quota, a file-size limit (ulimit -f).
    str() is one line naming the output, the cause and the fix; nothing was left where the output belongs."""

    def __str__(self) -> str:
        return self.strerror


_NO_ROOM = {errno.ENOSPC: "no space left on the device", errno.EFBIG: "file too large", errno.EDQUOT: "disk quota"}
_OS_ERROR = re.compile(r"os error (\d+)")  # how Rust writers (polars, safetensors) name an OS error


def _file_size_limit() -> int | None:
    try:
        import resource
    except ImportError:  # not Unix
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else soft


def no_room(path: Path | str, err: BaseException) -> WriteError | None:
    """A WriteError naming `path` where `err` says the disk, a quota or the file-size limit stopped the write
    (OSError's errno, a Rust writer's "os error N", or a short write that names no cause: numpy's "N requested and
    M written", judged by the limit and the free space left); None for any other error."""
    code = getattr(err, "errno", None) if isinstance(err, OSError) else None
    if code not in _NO_ROOM:
        found = _OS_ERROR.search(str(err))
        code = int(found.group(1)) if found and int(found.group(1)) in _NO_ROOM else None
    if code is None and isinstance(err, OSError) and "written" in str(err):
        free = shutil.disk_usage(Path(path).parent).free if Path(path).parent.is_dir() else None
        code = errno.ENOSPC if free is not None and free < 1 << 20 else errno.EFBIG if _file_size_limit() else None
    if code is None:
        return None
    folder = Path(path).parent
    if code == errno.EFBIG:
        limit = _file_size_limit()
        cause = f"the file-size limit ({limit} bytes, ulimit -f)" if limit is not None else "a file-size limit"
        fix = "raise the limit (ulimit -f unlimited) and run again"
    elif code == errno.EDQUOT:
        cause, fix = f"the disk quota of {folder} is used up", "free space within the quota and run again"
    else:
        free = shutil.disk_usage(folder).free if folder.is_dir() else 0
        cause, fix = f"the disk holding {folder} is full ({free >> 20} MiB free)", "free space there and run again"
    return WriteError(code, f"cannot write {path}: {cause}; nothing was left there: {fix}")


@contextlib.contextmanager
def _said_in_one_line(path: Path) -> Iterator[None]:
    """A full disk, a quota or a file-size limit while writing `path` raised as no_room's one line; else as it was."""
    try:
        yield
    except Exception as err:
        room = no_room(path, err)
        if room is None:
            raise
        raise room from err


@contextlib.contextmanager
def atomic_path(path: Path | str, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success move it into place in one rename. The temporary name
    holds this process's id, so the next writer can tell a killed writer's leftover (and removes it). A write
    stopped by a full disk, a quota or a file-size limit raises WriteError naming `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=f"{suffix}.partial", dir=path.parent)
    except OSError as err:
        raise no_room(path, err) or err from None
    os.close(fd)
    tmp_path = Path(tmp)
    tmp_path.chmod(0o666 & ~_umask())  # mkstemp makes 0600; finished files get the usual mode
    try:
        with _said_in_one_line(path):
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
        with _said_in_one_line(path):
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
