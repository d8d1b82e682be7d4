"""One module per `gpuscale` command; each defines add_arguments(parser), run(args) -> int and optionally errors().

cli.py imports only the module of the command asked for. Helpers shared by the commands live here and import
nothing heavy.
"""

from __future__ import annotations

from pathlib import Path

MAX_THREADS = 4096  # as the params schema's train.cpu_threads (torch.set_num_threads(10**20) was a traceback)


class UsageError(ValueError):
    """A bad command-line argument or output location; str() is the one line shown (exit 2)."""


def params_files(args) -> list[Path]:
    from gpuscale.contract import params

    return [Path(p) for p in (args.params or [params.DEFAULT_PARAMS])]


def load_params(args) -> dict:
    """The merged, validated params (read once per command: check() and run() share them)."""
    from gpuscale.contract import params

    if getattr(args, "_config", None) is None:
        args._config = params.load(params_files(args))
    return args._config


def load_typed(args):
    """load_params as frozen dataclasses (contract.settings.Params), typed once per command; `.config` is the dict."""
    from gpuscale.contract.settings import Params

    if getattr(args, "_typed", None) is None:
        args._typed = Params.from_dict(load_params(args))
    return args._typed


def suggest(value: str, allowed) -> str:
    """'; did you mean X?' for the nearest allowed value, or ''."""
    import difflib

    close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
    return f"; did you mean {close[0]}?" if close else ""


def choice(option: str, value, allowed) -> None:
    """Refuse a value outside `allowed`, naming them (and the nearest one)."""
    allowed = list(allowed)
    if value not in allowed:
        raise UsageError(
            f"{option}: {value!r} is not allowed{suggest(value, allowed)} (allowed: {', '.join(map(str, allowed))})"
        )


def model_choice(option: str, value: str, build: bool = True) -> None:
    """Refuse a model that is neither a registry name nor a usable spec. A spec is also built and asked what a
    training job will ask of it (gpuscale.models.specbuild.preflight; imports torch) unless `build` is False."""
    from gpuscale.models import registry
    from gpuscale.models import spec as model_spec

    if not model_spec.is_spec(value):
        choice(option, value, registry.MODEL_NAMES)
        return
    from gpuscale.contract import paths

    try:
        if model_spec.parse(value).kind == "file":  # code that runs: a .py file inside the project
            paths.model_file(value, option)
        registry.check(value)
        if build:
            from gpuscale.models import specbuild

            specbuild.preflight(value)
    except model_spec.SpecError as err:
        raise UsageError(f"{option}: {err}") from None


def preflight_models(config, overrides: bool = True) -> None:
    """Every model the params name by spec (study.models, sweeps.models and, with `overrides`, the keys under
    models:) built and run as a training job will run it (gpuscale.models.specbuild.preflight; imports torch),
    before any timing: the first that fails ends the command in one line naming its key (UsageError)."""
    from gpuscale.models import spec as model_spec
    from gpuscale.models import specbuild

    named = [(f"study.models.{i}", name) for i, name in enumerate(config.study.models)]
    named += [(f"sweeps.models.{i}", name) for i, name in enumerate(config.sweeps.models)]
    if overrides:
        named += [(f"models.{name}", name) for name in config.models or {}]
    done: set[str] = set()
    for key, name in named:
        if model_spec.is_spec(name) and name not in done:
            done.add(name)
            try:
                specbuild.preflight(name)
            except model_spec.SpecError as err:
                raise UsageError(f"{key}: {err}") from None


def writable(path: Path | str, option: str, inputs=(), holds: tuple[str, ...] = ()) -> Path:
    """Refuse (UsageError) an output that cannot be written, before any work: its nearest existing folder must
    be a folder this process can create files in (outputs are written beside themselves, then renamed). First
    contract.paths checks where it leads (PathError): inside the project when relative, over none of `inputs`
    ((key, path) pairs) nor the params files; a folder output, over no folder holding anything but the kinds of
    file it writes (`holds`: their suffixes)."""
    import errno
    import tempfile

    from gpuscale.contract import paths

    option_key = option.split(" (")[0]
    kind = "folder" if option.endswith("(folder)") else "file"
    paths.resolve_output(path, option_key, kind, [*inputs, *_params_inputs()])
    if kind == "folder":
        paths.replaceable_folder(path, option_key, holds)
    path = Path(path)
    if path.is_dir() and not option.endswith("(folder)"):
        raise UsageError(f"{option} {path}: is a folder; give a file path")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(f"{option} {path}: {folder} is not a folder; give a path under a writable folder")
    try:
        with tempfile.TemporaryFile(dir=folder, prefix=".gpuscale-write-check."):
            pass
    except OSError as err:
        why = "read-only" if err.errno in (errno.EROFS, errno.EACCES, errno.EPERM) else err.strerror
        raise UsageError(
            f"{option} {path}: cannot write under {folder} ({why}); make it writable or choose another path"
        ) from None
    return path


_PARAMS_SEEN: list = []  # the --params files of this command (set by check_log), never an output


def _params_inputs() -> list[tuple[str, Path]]:
    return [("--params", path) for path in _PARAMS_SEEN]


def check_log(args) -> None:
    """The --params files (each an existing file: contract.paths), then the --log file, before any work."""
    from gpuscale.contract import paths

    files = params_files(args) if hasattr(args, "params") else []
    _PARAMS_SEEN[:] = paths.params_files([f for f in files if f.exists() or f.is_symlink()])  # a missing one: load()
    if getattr(args, "log", None):
        writable(args.log, "--log")


def input_folder(path: Path | str | None, option: str) -> tuple[str, Path | str | None]:
    """(option, path) of an input folder given on the command line, checked where it exists: a file where a
    folder is expected is named as such (a missing one is said by the caller, which knows the stage to run)."""
    from gpuscale.contract import paths

    if path is not None and (Path(path).exists() or Path(path).is_symlink()):
        paths.resolve_input(path, option, kind="folder")
    return option, path


def needs_tables(folder: Path | str, names: tuple[str, ...]) -> None:
    """Refuse a tables folder the aggregate stage has not written, saying to run it first.

    The caller passes the table names (gpuscale.analyze.tables.TABLES), so this module, which every command
    imports, stays out of the report side's imports."""
    folder = Path(folder)
    missing = [f"{name}.parquet" for name in names if not (folder / f"{name}.parquet").is_file()]
    missing += [] if (folder / "notes.json").is_file() else ["notes.json"]
    if missing:
        raise UsageError(
            f"--tables {folder}: no aggregated tables there ({missing[0]} missing); run the aggregate stage first "
            f"(gpuscale aggregate --out {folder}, or snakemake / dvc repro)"
        )
