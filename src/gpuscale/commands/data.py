"""gpuscale data: prepare the dataset (data.* params)."""

from __future__ import annotations

from pathlib import Path

from gpuscale.commands import load_params, writable


def add_arguments(parser) -> None:
    parser.add_argument("--out", default="data/prepared")


def errors() -> tuple:
    from gpuscale.data import DataError

    return (DataError,)


def check(args) -> None:
    load_params(args)
    writable(args.out, "--out (folder)")


def run(args) -> int:
    from gpuscale import data

    config = load_params(args)
    data.prepare(config["data"], Path(args.out))
    return 0
