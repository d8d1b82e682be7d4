"""gpuscale train: train and time one (model, device, variant, seed)."""

from __future__ import annotations

import logging
from pathlib import Path

from gpuscale.commands import load_params

log = logging.getLogger("gpuscale")


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True)
    parser.add_argument(
        "--device",
        required=True,
        help="cpu, cuda, cuda-N, mps, or data-parallel cuda-ddpN / cpu-ddpN (started through torchrun's launcher)",
    )
    parser.add_argument("--variant", default="paper")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, help="torch threads (default: train.cpu_threads, else all cores)")
    parser.add_argument(
        "--sweep", metavar="PARAM=N", help="a sweep run: threads=N (CPU threads) or batch=N (batch size)"
    )
    parser.add_argument("--data", default="data/prepared", help="prepared dataset folder")
    parser.add_argument("--out", help="record path (default results/runs/<model>/<device>/<variant>-seed<seed>.json)")


def errors() -> tuple:
    from gpuscale.data import DataError
    from gpuscale.timinglock import TimingLockError
    from gpuscale.train import TrainError

    return (DataError, TrainError, TimingLockError)


def run(args) -> int:
    from gpuscale import params, timinglock, train

    config = load_params(args)
    study = config["study"]
    if args.model not in study["models"]:
        log.warning("model %s is not in study.models; training it anyway as asked", args.model)
    if args.sweep:
        parameter, _, value = args.sweep.partition("=")
        if not value.isdigit():
            raise params.ParamsError(f"--sweep: {args.sweep!r} is malformed (allowed: threads=N or batch=N)")
        settings = params.sweep_settings(
            config, args.model, args.device, parameter, int(value), args.variant, args.seed
        )
        default_out = params.sweep_record_path(args.model, args.device, parameter, int(value), args.variant, args.seed)
    else:
        settings = params.run_settings(config, args.model, args.device, args.variant, args.seed)
        default_out = params.record_path(args.model, args.device, args.variant, args.seed)
    out = Path(args.out or default_out)
    world = params.data_parallel_size(args.device)
    # The host-wide timing lock, held from here to the end (a second timing job waits), and this process ends
    # when whoever started it is gone (gpuscale.timinglock).
    with timinglock.hold():
        if world > 1:
            from gpuscale import distributed

            if not distributed.launched() and not train.spec_unavailable_reason(args.device):
                return distributed.relaunch(world, args.argv)  # torchrun starts `world` copies of this command
        train.run(
            settings,
            Path(args.data),
            out,
            threads=args.threads,
            label=study.get("label"),
            resume=config["runtime"]["resume"],
        )
    return 0
