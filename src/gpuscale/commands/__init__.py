"""One module per `gpuscale` command; each defines add_arguments(parser), run(args) -> int and optionally errors().

cli.py imports only the module of the command asked for. Helpers shared by the commands live here and import
nothing heavy.
"""

from __future__ import annotations

from pathlib import Path


class UsageError(ValueError):
    """A bad command-line argument or output location; str() is the one line shown (exit 2)."""


def params_files(args) -> list[Path]:
    from gpuscale import params

    return [Path(p) for p in (args.params or [params.DEFAULT_PARAMS])]


def load_params(args) -> dict:
    from gpuscale import params

    return params.load(params_files(args))
