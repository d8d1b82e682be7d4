"""gpuscale charts: tables -> Altair charts (HTML, SVG, Vega-Lite JSON)."""

from __future__ import annotations

from pathlib import Path

from gpuscale.commands import input_folder, load_params, load_typed, needs_tables, writable


def add_arguments(parser) -> None:
    parser.add_argument("--tables", default="results/tables")
    parser.add_argument("--out", default="reports/charts")


def errors() -> tuple:
    """Its inputs are checked before any work (check); reading them raises nothing of the aggregate stage's."""
    return ()


def check(args) -> None:
    load_params(args)
    from gpuscale.analyze.tables import TABLES

    tables = input_folder(args.tables, "--tables")
    needs_tables(args.tables, TABLES)
    writable(args.out, "--out (folder)", [tables], holds=(".html", ".svg", ".vl.json"))


def run(args) -> int:
    from gpuscale.present import charts

    params = load_typed(args)
    charts.run(Path(args.tables), Path(args.out), params.report.accuracy_tolerance)
    return 0
