"""`gpuscale predict`: probe records + model facts + reference records -> results/predict/ tables (torch-free)."""

from __future__ import annotations

from pathlib import Path

HELP = "probe records and model facts -> predicted epochs and speedups, validated on the reference studies"


def add_arguments(parser) -> None:
    parser.add_argument(
        "--probes", default="results/probe", help="folder of probe records: <device>.json per study device"
    )
    parser.add_argument("--facts", help="model facts file (default: the package's modelfacts.json)")
    parser.add_argument("--out", default="results/predict")


def run(args) -> int:
    import sys

    from gpuscale import costmodel, models, predict
    from gpuscale.commands import load_params

    config = load_params(args)
    try:
        predict.run(
            [p for d in config["study"]["devices"] if (p := Path(args.probes) / f"{d}.json").exists()],
            config["report"]["reference"],
            Path(args.out),
            list(models.MODEL_NAMES),
            images=config["data"]["train_size"] or 50_000,
            batch_size=config["train"]["batch_size"],
            facts_path=Path(args.facts) if args.facts else None,
        )
    except costmodel.CostModelError as err:
        print(f"gpuscale predict: error: {err}", file=sys.stderr)
        return 2
    return 0
