"""`gpuscale estimate`: each pending timing job's predicted duration and the total (the workflow's onstart)."""

from __future__ import annotations

from pathlib import Path

HELP = "print the predicted duration of each timing job still to run, and the total"


def add_arguments(parser) -> None:
    parser.add_argument("--probes", default="results/probe", help="folder of this host's probe records")
    parser.add_argument("--quick-seconds", type=float, default=3.0, help="budget of the quick rate check per device")
    parser.add_argument("--plan", help="also write record -> predicted seconds here (JSON), for the study's ETA")


def check(args) -> None:
    from gpuscale.commands import input_folder, writable

    probes = input_folder(args.probes, "--probes")
    if args.plan:
        writable(args.plan, "--plan", [probes])


def run(args) -> int:
    from gpuscale.commands import load_typed, preflight_models
    from gpuscale.predict import estimate

    config = load_typed(args)
    preflight_models(config, overrides=False)  # their facts are counted from the built network
    estimate.run(config, Path(args.probes), args.quick_seconds, plan=Path(args.plan) if args.plan else None)
    return 0
