"""gpuscale data: prepare the dataset (data.* params)."""

from __future__ import annotations

from pathlib import Path

from gpuscale.commands import load_typed, writable


def add_arguments(parser) -> None:
    parser.add_argument("--out", default="data/prepared")


def errors() -> tuple:
    from gpuscale.inputs.data import DataError

    return (DataError,)


def check(args) -> None:
    from gpuscale.contract import paths

    data = load_typed(args).data
    paths.data_path(data.source, data.path)
    data_path = ("data.path", data.path if data.source != "synthetic" else None)
    writable(args.out, "--out (folder)", [data_path], holds=(".npy", ".json"))


def run(args) -> int:
    from gpuscale.inputs import data

    data.prepare(load_typed(args).data, Path(args.out))
    return 0
