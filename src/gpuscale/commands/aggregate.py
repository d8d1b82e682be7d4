"""gpuscale aggregate: records -> Polars tables, fits and metrics."""

from __future__ import annotations

from pathlib import Path

from gpuscale.commands import UsageError, load_typed, writable

HOLDS = (".csv", ".parquet", ".json")  # the tables, notes.json


def add_arguments(parser) -> None:
    parser.add_argument("--out", default="results/tables")
    parser.add_argument("--metrics", default="results/metrics.json")
    parser.add_argument(
        "--reference-only",
        action="store_true",
        help="aggregate only the report.reference folders, none of this host's records",
    )


def errors() -> tuple:
    from gpuscale.analyze.aggregate import AggregateError

    return (AggregateError,)


def study_records(config) -> list[Path]:
    from gpuscale.contract import params

    records = [Path(params.record_path(**key)) for key in params.run_keys(config)]
    return records + [Path(params.sweep_record_path(**key)) for key in params.sweep_keys(config)]


def check(args) -> None:
    from gpuscale.contract import paths

    config = load_typed(args)
    paths.reference_folders(config.report.reference)  # existing folders inside the project
    inputs = [(paths.index_key("report.reference", i), f) for i, f in enumerate(config.report.reference)]
    if not args.reference_only:  # the folders of the study's records
        folders = sorted({str(p.parent) for p in study_records(config)})
        inputs += [("a folder of the study's records", f) for f in folders]
    writable(args.out, "--out (folder)", inputs, holds=HOLDS)
    writable(Path(args.out) / "runs.csv", "--out", inputs)
    writable(args.metrics, "--metrics", [*inputs, ("--out", args.out)])
    if args.reference_only or config.report.skip_bad_records:
        return  # skipped records are listed in the tables' notes
    missing = [p for p in study_records(config) if not p.exists()]
    if missing:
        total = len(study_records(config))
        raise UsageError(
            f"{missing[0]}: not trained yet ({len(missing)} of the study's {total} runs have no record); run the "
            f"train stage first (snakemake, or dvc repro), or set report.skip_bad_records: true to aggregate "
            f"what there is"
        )


def run(args) -> int:
    from gpuscale.analyze import aggregate

    config = load_typed(args)
    records = [] if args.reference_only else study_records(config)  # reference-only: shipped records alone
    report = config.report
    aggregate.run(
        records,
        list(report.reference),
        Path(args.out),
        Path(args.metrics),
        report.accuracy_tolerance,
        skip_bad=report.skip_bad_records,
        pairing=report.pairing,
    )
    return 0
