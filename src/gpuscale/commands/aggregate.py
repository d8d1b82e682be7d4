"""gpuscale aggregate: records -> Polars tables, fits and metrics."""

from __future__ import annotations

from pathlib import Path

from gpuscale.commands import load_params


def add_arguments(parser) -> None:
    parser.add_argument("--out", default="results/tables")
    parser.add_argument("--metrics", default="results/metrics.json")
    parser.add_argument(
        "--reference-only",
        action="store_true",
        help="aggregate only the report.reference folders, none of this host's records",
    )


def errors() -> tuple:
    from gpuscale.aggregate import AggregateError

    return (AggregateError,)


def run(args) -> int:
    from gpuscale import aggregate, params

    config = load_params(args)
    records = [Path(params.record_path(**key)) for key in params.run_keys(config)]
    records += [Path(params.sweep_record_path(**key)) for key in params.sweep_keys(config)]
    if args.reference_only:  # a report of shipped records alone (reference/*/report.html)
        records = []
    report = config["report"]
    aggregate.run(
        records,
        report["reference"],
        Path(args.out),
        Path(args.metrics),
        report["accuracy_tolerance"],
        skip_bad=report["skip_bad_records"],
    )
    return 0
