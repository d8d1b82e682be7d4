"""`gpuscale predict`: probe records + model facts + reference records -> results/predict/ tables (torch-free)."""

from __future__ import annotations

from pathlib import Path

HELP = "probe records and model facts -> predicted epochs and speedups, validated on the reference studies"


def add_arguments(parser) -> None:
    parser.add_argument("--probes", nargs="*", default=[], metavar="FILE", help="probe records (gpuscale probe)")
    parser.add_argument("--facts", help="model facts file (default: the package's modelfacts.json)")
    parser.add_argument("--out", default="results/predict")


def run(args) -> int:
    from gpuscale import cli, models, predict

    config = cli.load_params(args)
    predict.run(
        [Path(p) for p in args.probes if Path(p).exists()],
        config["report"]["reference"],
        Path(args.out),
        list(models.MODEL_NAMES),
        images=config["data"]["train_size"] or 50_000,
        batch_size=config["train"]["batch_size"],
        facts_path=Path(args.facts) if args.facts else None,
    )
    return 0
