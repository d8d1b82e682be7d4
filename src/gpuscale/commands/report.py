"""gpuscale report: tables and charts -> one offline HTML page."""

from __future__ import annotations

from pathlib import Path

from gpuscale.commands import load_params, params_files


def add_arguments(parser) -> None:
    parser.add_argument("--tables", default="results/tables")
    parser.add_argument("--charts", default="reports/charts")
    parser.add_argument("--out", default="reports/index.html")


def errors() -> tuple:
    from gpuscale.aggregate import AggregateError

    return (AggregateError,)


def run(args) -> int:
    from gpuscale import report

    config = load_params(args)
    report.run(Path(args.tables), Path(args.charts), Path(args.out), config, params_files(args))
    return 0
