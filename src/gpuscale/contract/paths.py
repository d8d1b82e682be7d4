"""Every path the params or the command line hand to gpuscale, resolved once and checked in one place.

A path is resolved once, with `..` and links followed, and checked against where it may lead:
- an input is the kind the key expects (a file, or a folder) and exists; a folder where a file is expected, a
  FIFO or a device (reading one would block or never end), a dangling link or a link loop is named as such;
- a reference folder (report.reference) lies under reference/ and a model file inside the
  project (the folder the command runs in: Snakemake and DVC run every stage at the project's root), so the
  workflow tracks them and a `..` or a link cannot take them elsewhere;
- an output given as a relative path stays inside the project once `..` and links are followed (an absolute
  path names its place itself and is taken as meant); it never lies over an input: not the same file, not a
  folder holding an input or the project, not inside an input folder.
Errors are PathError: one line naming the key (`report.reference.1`, `--out`) and the fix. Stdlib only.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path


class PathError(ValueError):
    """A path that cannot be used; str() is the one line shown (exit 2)."""


def project_root() -> Path:
    """The project: the folder the command runs in, links followed."""
    return Path.cwd().resolve()


def _kind_words(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISFIFO(mode):
        return "a FIFO (a pipe: reading it would wait for a writer)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "neither a file nor a folder"


def _resolved(raw, key: str) -> tuple[str, Path]:
    text = os.fspath(raw)
    if not text:
        raise PathError(f"{key}: an empty path; give a file or folder path")
    if "\0" in text:
        raise PathError(f"{key}: {text!r} holds a NUL byte, which no path can; retype it")
    control = next((c for c in text if ord(c) < 32 or ord(c) == 127), None)
    if control is not None:  # a newline in a file name splits every line that names it
        raise PathError(f"{key}: {text!r} holds a control character ({control!r}); retype it")
    try:
        return text, Path(text).resolve()
    except (RuntimeError, OSError) as err:  # a link loop (RuntimeError before Python 3.13, ELOOP after)
        raise PathError(f"{key}: {text} is a link loop ({err}); point it at a real file or folder") from None


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def _shown(text: str, resolved: Path) -> str:
    """'reference/x' or 'reference/x (-> /elsewhere/x)' where links or `..` lead elsewhere."""
    plain = Path(text).absolute()  # `..` kept: `reference/..` is shown with where it leads
    return text if plain == resolved else f"{text} (-> {resolved})"


def resolve_input(
    raw, key: str, kind: str = "file", inside_project: bool = False, fix: str = "", under: str = ""
) -> Path:
    """An input path resolved (links and `..` followed) and checked: it exists, is `kind` ('file', 'folder' or
    'either': a file or a folder), and, with inside_project, lies inside the project (with `under`, inside that
    folder of the project, never the folder itself). Returns the resolved path."""
    text, path = _resolved(raw, key)
    hint = f"; {fix}" if fix else ""
    if inside_project:
        root = project_root()
        if not _inside(path, root):
            raise PathError(
                f"{key}: {_shown(text, path)} leads outside the project ({root}){hint or '; give a path inside it'}"
            )
        if under and not path.is_relative_to(root / under) or under and path == root / under:
            raise PathError(f"{key}: {_shown(text, path)} leads outside {under}/ of the project{hint}")
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        link = Path(text).is_symlink() or path != Path(os.path.abspath(text))
        what = "is a link to a path that does not exist" if link and os.path.lexists(text) else "does not exist"
        raise PathError(f"{key}: {_shown(text, path)} {what}{hint}") from None
    except OSError as err:
        raise PathError(f"{key}: {text}: cannot be read ({err.strerror}){hint}") from None
    is_dir, is_file = stat.S_ISDIR(mode), stat.S_ISREG(mode)
    if kind == "file" and not is_file:
        raise PathError(f"{key}: {_shown(text, path)} is {_kind_words(mode)} where a file is expected{hint}")
    if kind == "folder" and not is_dir:
        raise PathError(f"{key}: {_shown(text, path)} is {_kind_words(mode)} where a folder is expected{hint}")
    if kind == "either" and not (is_dir or is_file):
        raise PathError(f"{key}: {_shown(text, path)} is {_kind_words(mode)}, not a file or a folder{hint}")
    return path


def resolve_output(raw, key: str, kind: str = "file", inputs: Iterable[tuple[str, object]] = ()) -> Path:
    """An output path resolved and checked before any work: a relative one stays inside the project; a file
    output is not an existing folder and a folder output not an existing file; it lies over none of `inputs`
    ((key, path) pairs: the same path, a folder holding one, a place inside an input folder), over no params file
    nor the project itself. Returns the resolved path (writes go to the path as given, which leads there)."""
    text, path = _resolved(raw, key)
    root = project_root()
    if kind == "file" and text.endswith(("/", os.sep)):  # Path() drops the slash: the file went beside the folder
        raise PathError(f"{key}: {text} ends in '/', which names a folder, where a file is expected; drop the '/'")
    if not Path(text).is_absolute() and not _inside(path, root):
        raise PathError(
            f"{key}: {_shown(text, path)} leads outside the project ({root}); give a path inside it, or an absolute "
            f"path if that place is meant"
        )
    if kind == "folder" and (root == path or root.is_relative_to(path)):
        raise PathError(f"{key}: {text} would replace the project folder {root}; give a folder inside it")
    if path.exists() or path.is_symlink():
        try:
            mode = path.stat().st_mode
        except OSError:
            mode = None
        if mode is not None and kind == "file" and stat.S_ISDIR(mode):
            raise PathError(f"{key}: {_shown(text, path)} is a folder where a file is expected; give a file path")
        if mode is not None and kind == "folder" and not stat.S_ISDIR(mode):
            raise PathError(f"{key}: {_shown(text, path)} is {_kind_words(mode)} where a folder is expected")
        if mode is not None and kind == "file" and not stat.S_ISREG(mode):
            raise PathError(f"{key}: {_shown(text, path)} is {_kind_words(mode)}; give a file path")
    for input_key, input_raw in inputs:
        if input_raw is None:
            continue
        try:
            source = Path(os.fspath(input_raw)).resolve()
        except (RuntimeError, OSError):
            continue  # its own check names it
        if source == path:
            raise PathError(f"{key}: {_shown(text, path)} is {input_key}, an input; write the output elsewhere")
        if source.is_relative_to(path):
            raise PathError(
                f"{key}: {_shown(text, path)} holds {input_key} ({input_raw}), an input it would overwrite; "
                f"write the output elsewhere"
            )
        if path.is_relative_to(source):
            raise PathError(
                f"{key}: {_shown(text, path)} lies inside {input_key} ({input_raw}), an input folder; write the "
                f"output elsewhere"
            )
    return path


def replaceable_folder(path, key: str, suffixes: tuple[str, ...]) -> None:
    """A folder output is swapped in whole (gpuscale.contract.fsutil.atomic_directory), so an existing folder there
    is replaced with all it holds: allowed when it is empty or holds only files of the kinds this output writes
    (`suffixes`, and hidden files such as .DS_Store), none in a subfolder. `charts --out src` replaced the project's
    code, `--out .git` its history."""
    folder = Path(path)
    if not folder.is_dir():
        return
    for entry in sorted(folder.iterdir()):
        plain_file = entry.is_file() and not entry.is_symlink()
        if plain_file and (entry.name.startswith(".") or entry.name.endswith(suffixes)):
            continue
        what = "a link" if entry.is_symlink() else "a folder" if entry.is_dir() else "a file"
        raise PathError(
            f"{key}: {path} holds {entry.name} ({what}), which this output never writes; an output folder is the "
            f"output's alone (it is replaced whole): give a new or empty folder, or one this command wrote"
        )


def index_key(key: str, index: int) -> str:
    """A list item's key as params validation writes it (study.models.0), so one item reads the same in every
    command's line."""
    return f"{key}.{index}"


def reference_folders(folders: Iterable, key: str = "report.reference") -> list[Path]:
    """Each reference folder resolved: an existing folder inside the project, and listed once (a link to a listed
    folder, or a folder inside one, was read as a second host with the same records)."""
    folders = list(folders)
    resolved = [
        resolve_input(
            folder,
            index_key(key, i),
            kind="folder",
            inside_project=True,
            under="reference",
            fix="list folders under reference/ (copy a study there rather than linking it)",
        )
        for i, folder in enumerate(folders)
    ]
    for i, path in enumerate(resolved):
        for j, other in enumerate(resolved[:i]):
            if path.is_relative_to(other) or other.is_relative_to(path):
                how = "is the same folder as" if path == other else "overlaps"
                if Path(folders[i]) == Path(folders[j]):
                    continue  # the same name twice (reference/x, reference/x/): one source, read once
                raise PathError(
                    f"{index_key(key, i)}: {_shown(str(folders[i]), path)} {how} {index_key(key, j)} ({folders[j]}); "
                    "list each folder once"
                )
    return resolved


def data_path(source: str, path) -> Path | None:
    """data.path resolved, where the source reads one: the CIFAR-10 archive (a file), an image folder or a .zip."""
    if path is None or source == "synthetic":
        return None
    if source == "cifar10":
        return resolve_input(
            path, "data.path", kind="file", fix="give the cifar-10-binary.tar.gz archive itself (data.source: cifar10)"
        )
    resolved = resolve_input(path, "data.path", kind="either", fix="give an image folder or a .zip")
    return resolved


def model_file(spec: str, key: str) -> tuple[Path, str]:
    """A model given as `path/to/file.py:function` (study.models, models.<name>): the file resolved (an existing
    .py file inside the project: it is code that runs, and the workflow must track it) and the function's name."""
    text = str(spec)
    file_part, sep, function = text.rpartition(":")
    if not sep or not file_part or not function.isidentifier():
        raise PathError(f"{key}: {text!r} is not FILE.py:FUNCTION (for example models/mine.py:build)")
    if not file_part.endswith(".py"):
        raise PathError(f"{key}: {file_part} is not a .py file; give FILE.py:FUNCTION")
    path = resolve_input(
        file_part, key, kind="file", inside_project=True, fix="give a .py file inside the project (FILE.py:FUNCTION)"
    )
    return path, function


def params_files(files: Iterable) -> list[Path]:
    """The --params files, each an existing file (a FIFO would block the read, a folder is named as such)."""
    return [resolve_input(f, "--params", kind="file", fix="pass --params with an existing params file") for f in files]


def read_regular(path, limit: int, what: str) -> bytes:
    """The bytes of a file found inside an input folder (a record under a reference folder), read only when it is a
    regular file of at most `limit` bytes: a FIFO named x.json would block the stage forever, and a link to
    /dev/zero, or a file of gigabytes, would fill the memory. PathError otherwise, naming the file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as err:
        raise PathError(f"{path}: cannot read ({err.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise PathError(f"{path}: {_kind_words(info.st_mode)}, not a {what}; remove it")
        if info.st_size > limit:
            raise PathError(f"{path}: {_size(info.st_size)}, larger than any {what} (at most {_size(limit)})")
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):  # a file growing while read stops at limit too
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise PathError(f"{path}: larger than any {what} (at most {_size(limit)})")
        return b"".join(chunks)
    except OSError as err:
        raise PathError(f"{path}: cannot read ({err.strerror})") from None
    finally:
        os.close(fd)


def _size(size: int) -> str:
    return f"{size / 2**20:.0f} MiB" if size >= 2**20 else f"{size:,} bytes"
