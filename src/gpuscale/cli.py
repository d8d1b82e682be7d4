"""The one command-line entry point: `gpuscale <command> ...` (also `python -m gpuscale`).

Snakemake rules and DVC stages call these commands and nothing else. This module is a small dispatcher: the
registry below names each command, its module and its one-line help; `gpuscale --help` lists them without
importing any, and `gpuscale NAME ...` imports gpuscale.commands.NAME alone (so `gpuscale train` imports
nothing of the report side). A command module defines `add_arguments(parser)`, `run(args) -> int` and,
optionally, `check(args)` (every argument and output checked before any work, raising UsageError) and `errors()`:
the exception classes that end it in one line (exit 2) rather than a traceback.
Every command takes --params, --log and --debug (tracebacks instead of the one line).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import logging
import os
import signal
import sys
from pathlib import Path
from typing import NoReturn

log = logging.getLogger("gpuscale")

# name -> (module under gpuscale.commands, one-line help). Adding a command: a module and one line here.
COMMANDS: dict[str, tuple[str, str]] = {
    "validate": ("validate", "check params files and exit"),
    "host": ("host", "write this host's hardware fingerprint"),
    "data": ("data", "prepare the dataset (data.* params)"),
    "train": ("train", "train and time one (model, device, variant, seed)"),
    "aggregate": ("aggregate", "records -> Polars tables, fits and metrics"),
    "charts": ("charts", "tables -> Altair charts (HTML, SVG, Vega-Lite JSON)"),
    "report": ("report", "tables and charts -> one offline HTML page"),
    "models": ("models", "list the model registry, then the study's models named by spec, with parameters and FLOPs"),
    "probe": ("probe", "measure a device's layer throughputs, step costs and input pipeline (about a minute)"),
    "predict": ("predict", "probe records and model facts -> predicted epochs and speedups, validated"),
    "estimate": ("estimate", "print the predicted duration of each timing job still to run, and the total"),
    "sentinel": ("sentinel", "measure the machine state the timings depend on (a few seconds; a witness)"),
    "use": ("use", "choose the overlays plain snakemake and dvc repro run with (gpuscale use config/quick.yaml)"),
    "hardware": ("hardware", "list or search the hardware catalog (GPUs and CPUs with datasheet figures)"),
}
# The commands that write the project's outputs: refused while another workflow works in the folder.
PROJECT_WRITERS = ("host", "data", "train", "probe", "sentinel", "aggregate", "charts", "report", "predict", "use")
DESCRIPTION = "gpuscale: how much faster a GPU trains a network than a CPU (the stages of the Snakemake/DVC workflow)"
EXIT_USAGE = 2
EXIT_SIGINT, EXIT_SIGTERM = 130, 143  # 128 + the signal's number, as a shell reports it
SIGNAL_EXITS = (EXIT_SIGINT, EXIT_SIGTERM)


class Terminated(BaseException):
    """SIGTERM, raised where the main thread is (like KeyboardInterrupt for SIGINT), so every open atomic write
    removes its partial file on the way out and the command ends in one line with 143 (128 + 15)."""

    from_signal = True  # not the user's code failing (gpuscale.models.specbuild lets it through)


def _on_sigterm(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    raise Terminated()


def install_signal_handlers() -> None:
    """SIGTERM ends a command like Ctrl-C does (one line, nothing half-written); SIGXFSZ is ignored, so a write
    past the file-size limit (ulimit -f) fails with EFBIG and is said in one line instead of killing the process.
    Main thread only (signal handlers can be set nowhere else)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGTERM, _on_sigterm)
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


class _LogFile(logging.FileHandler):
    """The --log file; a write to it that fails (a full disk) drops the line rather than printing a traceback:
    the command's own outputs say the cause."""

    def handleError(self, record):
        pass


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit 2), naming the command and where to read more."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def setup_logging(log_file: str | None, verbose: bool = False) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    rank = int(os.environ.get("RANK", "0"))
    if rank:  # the other processes of a data-parallel run: warnings only, and never the log file rank 0 writes
        logging.basicConfig(
            level=logging.WARNING,
            format=f"%(asctime)s %(levelname)s [rank {rank}] %(name)s: %(message)s",
            datefmt="%H:%M:%S",
            handlers=handlers,
            force=True,
        )
        return
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(_LogFile(log_file, mode="w"))
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        handlers=handlers,
        force=True,
    )


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [
        "usage: gpuscale [--debug] COMMAND [options]",
        "",
        DESCRIPTION,
        "",
        "commands:",
        *(f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()),
        "",
        "gpuscale --version prints the version.",
        "Every command takes --params FILE (repeat to overlay), --log FILE and --debug (show tracebacks).",
        "`gpuscale COMMAND --help` lists a command's options.",
    ]
    return "\n".join(lines)


def command_parser(name: str, module) -> argparse.ArgumentParser:
    parser = OneLineParser(prog=f"gpuscale {name}", description=COMMANDS[name][1])
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument(
        "--params",
        action="append",
        metavar="FILE",
        help="params file (default params.yaml); repeat to overlay, later files win",
    )
    parser.add_argument("--log", metavar="FILE", help="also write the log to FILE")
    module.add_arguments(parser)
    return parser


def build_parser(name: str) -> argparse.ArgumentParser:
    """The parser of one command (imports that command's module only)."""
    return command_parser(name, importlib.import_module(f"gpuscale.commands.{COMMANDS[name][0]}"))


def one_line(text: str) -> str:
    """The message as one printable line: a line break or control character (from a key, a path, a record
    field) is shown escaped, never acted on by the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _unknown(name: str) -> int:
    close = difflib.get_close_matches(name, COMMANDS, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    print(
        f"gpuscale: error: unknown command {one_line(repr(name))}{hint} (allowed: {', '.join(COMMANDS)})",
        file=sys.stderr,
    )
    return EXIT_USAGE


def main(argv: list[str] | None = None) -> int:
    """Run one command. SIGTERM and SIGINT are caught from the first line on, so a signal while the command's
    modules load, or while its arguments are read, ends in the same one line as one mid-work."""
    install_signal_handlers()
    entry = argv is None  # the process's own command (the `gpuscale` script, python -m gpuscale), not a test's call
    argv = list(sys.argv[1:] if argv is None else argv)
    state = {"name": ""}
    try:
        code = _dispatch(argv, state)
    except (KeyboardInterrupt, Terminated, Exception) as err:
        signalled = interrupt_behind(err)
        if signalled is None:
            short = out_of_resources(err)
            if short is None:
                raise
            return fail(f"{_who(state)}: error: {short}", 1)  # as a write that meets a limit: a runtime failure
        said = "interrupted (SIGINT)" if signalled is KeyboardInterrupt else "stopped by SIGTERM"
        code = EXIT_SIGINT if signalled is KeyboardInterrupt else EXIT_SIGTERM
        code = fail(f"{_who(state)}: {said}; no partial output was left: run it again to finish", code)
    if entry:  # the command has ended and said so: a signal while Python shuts down would only add a traceback
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return code


def exit_as_module(code: int) -> NoReturn:
    """End `python -m gpuscale` with main's code. A command a signal ended leaves through os._exit once its logs
    and streams are flushed: under `-m`, CPython (3.11, 3.12) kills the process with SIGINT at exit (status -2, not
    130) when a KeyboardInterrupt ever ended a string exec/eval, caught or not, and dataclasses, namedtuple and
    typing build code that way while modules import, so Ctrl-C there was misreported. Every `with` block has
    already cleaned up on the way out: there is nothing left for the interpreter's shutdown to do."""
    if code not in SIGNAL_EXITS:
        raise SystemExit(code)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: the status still tells
            stream.flush()
    os._exit(code)


def interrupt_behind(err: BaseException) -> type | None:
    """KeyboardInterrupt or Terminated where a signal ended the command, None otherwise. Python wraps a signal
    that lands in some places: in a class body's __set_name__ while a module imports it comes as a RuntimeError
    whose cause is the KeyboardInterrupt; cleanup code that fails on the way out chains it as the context."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, (KeyboardInterrupt, Terminated)):
            return type(err)
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def out_of_resources(err: BaseException) -> str | None:
    """One line for a command that a process limit or a full disk stopped where gpuscale has no handler of its own
    (inside numpy's or torch's loading, Python's tempfile), naming the limit; None for anything else (a bug keeps its
    traceback). Seen: `ulimit -v` gives torch's ImportError `libtorch_cpu.so: failed to map segment from shared
    object`, a MemoryError or ENOMEM; `ulimit -f` or a full disk gives EFBIG/ENOSPC, or tempfile's `No usable
    temporary directory found`."""
    import errno
    import resource

    def limit(which: int) -> str:
        soft = resource.getrlimit(which)[0]
        return "unlimited" if soft == resource.RLIM_INFINITY else f"{soft / 2**20:,.0f} MiB"

    memory = f"raise the limit (ulimit -v: {limit(resource.RLIMIT_AS)}) or free memory"
    files = f"raise the limit (ulimit -f: {limit(resource.RLIMIT_FSIZE)}) or free disk space"
    text = str(err)
    if isinstance(err, MemoryError) or getattr(err, "errno", None) == errno.ENOMEM:
        return f"out of memory ({type(err).__name__}: {text or 'no message'}); {memory}"
    if isinstance(err, ImportError) and ("failed to map segment" in text or "cannot allocate memory" in text.lower()):
        return f"could not load a library, for want of address space ({text}); {memory}"
    if getattr(err, "errno", None) in (errno.EFBIG, errno.ENOSPC):
        return f"could not write a file ({text}); {files}"
    if isinstance(err, FileNotFoundError) and "No usable temporary directory found" in text:
        return f"no temporary folder could be written (Python's tempfile tried them all); {files}"
    return None


def _who(state: dict) -> str:
    return f"gpuscale {state['name']}" if state["name"] else "gpuscale"


def _dispatch(argv: list[str], state: dict) -> int:
    rest = list(argv)
    debug = False
    while rest and rest[0] == "--debug":  # `gpuscale --debug COMMAND ...` as well as `gpuscale COMMAND --debug`
        debug = True
        rest.pop(0)
    if rest and rest[0] == "--version":
        from gpuscale import __version__

        print(f"gpuscale {__version__}")
        return 0
    if not rest or rest[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if rest else sys.stderr)
        return 0 if rest else EXIT_USAGE
    name = rest.pop(0)
    if name not in COMMANDS:
        return _unknown(name)
    state["name"] = name
    module = importlib.import_module(f"gpuscale.commands.{COMMANDS[name][0]}")
    args = command_parser(name, module).parse_args(rest)
    args.debug = args.debug or debug
    args.command = name
    args.argv = argv  # the whole command line, for a data-parallel relaunch
    return _run_command(name, module, args)


def _run_command(name: str, module, args) -> int:
    from gpuscale.commands import UsageError, check_log
    from gpuscale.contract.fsutil import WriteError
    from gpuscale.contract.params import ParamsError
    from gpuscale.contract.paths import PathError
    from gpuscale.contract.record import RecordError
    from gpuscale.contract.runlock import RunLockError
    from gpuscale.models.spec import SpecError

    # SpecError: a model named by spec that cannot be used, from whichever command meets it first (estimate, probe,
    # predict and the rest): one line, exit 2, as validate says it
    known: tuple = (UsageError, ParamsError, PathError, RecordError, RunLockError, SpecError)
    try:
        check_log(args)
        setup_logging(args.log)
        known = (*known, *(module.errors() if hasattr(module, "errors") else ()))
        if hasattr(module, "check"):  # every argument and output, before any work
            module.check(args)
        if name in PROJECT_WRITERS:  # never beside another workflow in this folder (contract.runlock)
            from gpuscale.contract import runlock

            runlock.guard_command(name)
        return module.run(args)
    except known as err:
        if args.debug:
            raise
        return fail(f"gpuscale {name}: error: {one_line(str(err))}", EXIT_USAGE)
    except WriteError as err:  # a full disk, a quota, a file-size limit: the output named, nothing left there
        if args.debug:
            raise
        return fail(f"gpuscale {name}: error: {one_line(str(err))}", 1)
    except (KeyboardInterrupt, Terminated):
        raise  # main() says it in one line
    except Exception as err:  # a bug: its traceback goes to stderr, its one line to the log file too
        if interrupt_behind(err):
            raise  # a signal in disguise: main() says it in one line
        fail(f"gpuscale {name}: unexpected {type(err).__name__}: {one_line(str(err))}", 1, stderr=False)
        raise


def fail(message: str, code: int, stderr: bool = True) -> int:
    """Say why a stage failed on stderr and in its --log file (Snakemake and DVC keep the log, not stderr)."""
    if stderr:
        print(message, file=sys.stderr)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            try:
                handler.stream.write(message + "\n")
                handler.flush()
            except (OSError, ValueError):  # the log's disk is full, or the log is closed: stderr said it
                pass
    return code
