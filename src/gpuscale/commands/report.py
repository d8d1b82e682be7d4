"""gpuscale report: tables and charts -> one offline HTML page."""

from __future__ import annotations

from pathlib import Path

from gpuscale.commands import UsageError, input_folder, load_params, load_typed, needs_tables, params_files, writable


def add_arguments(parser) -> None:
    parser.add_argument("--tables", default="results/tables")
    parser.add_argument("--charts", default="reports/charts")
    parser.add_argument("--out", default="reports/index.html")
    parser.add_argument(
        "--predict", help="the predict stage's tables (results/predict): adds the 'Predicted before measuring' section"
    )


def errors() -> tuple:
    """Its inputs are checked before any work (check); reading them raises nothing of the aggregate stage's."""
    return ()


def check(args) -> None:
    from gpuscale.words import CHART_NAMES

    load_params(args)
    from gpuscale.analyze.tables import TABLES

    inputs = [input_folder(args.tables, "--tables"), input_folder(args.charts, "--charts")]
    needs_tables(args.tables, TABLES)
    charts = Path(args.charts)
    missing = [name for name in CHART_NAMES if not (charts / f"{name}.vl.json").is_file()]
    if missing:
        raise UsageError(
            f"--charts {charts}: no charts there ({missing[0]}.vl.json missing); run the charts stage first "
            f"(gpuscale charts --out {charts}, or snakemake / dvc repro)"
        )
    if args.predict:
        inputs.append(input_folder(args.predict, "--predict"))
        if not Path(args.predict).is_dir():
            raise UsageError(f"--predict {args.predict}: not a folder; run the predict stage first (gpuscale predict)")
    writable(args.out, "--out", inputs)


def run(args) -> int:
    from gpuscale.present import report

    params = load_typed(args)
    predict_dir = Path(args.predict) if args.predict else None
    report.run(Path(args.tables), Path(args.charts), Path(args.out), params, params_files(args), predict_dir)
    return 0
