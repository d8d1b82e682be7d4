"""gpuscale train: train and time one (model, device, variant, seed, round)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from gpuscale import devices
from gpuscale.commands import MAX_THREADS, UsageError, choice, input_folder, load_typed, model_choice, writable

log = logging.getLogger("gpuscale")

SWEEP = re.compile(r"^(threads|batch)=([1-9][0-9]*)$")
MAX_SEED = 2**32 - 1  # numpy's seeds


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True)
    parser.add_argument(
        "--device",
        required=True,
        help=f"{devices.allowed()} (a data-parallel -ddpN started through torchrun's launcher)",
    )
    parser.add_argument("--variant", default="paper")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--round", type=int, default=1, help="which round of the study's interleaved order (study.rounds; default 1)"
    )
    parser.add_argument("--threads", type=int, help="torch threads (default: train.cpu_threads, else all cores)")
    parser.add_argument(
        "--sweep", metavar="PARAM=N", help="a sweep run: threads=N (CPU threads) or batch=N (batch size)"
    )
    parser.add_argument("--data", default="data/prepared", help="prepared dataset folder")
    parser.add_argument("--out", help="record path (default results/runs/<model>/<device>/<variant>-seed<seed>.json)")


def errors() -> tuple:
    from gpuscale.inputs.data import DataError
    from gpuscale.measure.timinglock import TimingLockError
    from gpuscale.measure.train import TrainError

    return (DataError, TrainError, TimingLockError)


def check(args) -> None:
    """Every argument and output, before the lock, the data or any training (one line naming what is allowed)."""
    from gpuscale.contract.settings import DEVICE_ALLOWED, is_device

    config = load_typed(args)
    from gpuscale.contract import record

    if not re.match(record.schema()["properties"]["key"]["properties"]["model"]["pattern"], args.model):
        # what the record's key takes (a space in a spec's path), refused before the timing rather than after it
        raise UsageError(
            f"--model: {args.model!r} cannot be a run record's model (a space in its path?): rename the file or folder"
        )
    model_choice("--model", args.model)
    if not is_device(args.device):
        hint = ""
        if re.fullmatch(r"(cuda|cpu):[0-9]+", args.device):
            hint = f"; did you mean {args.device.replace(':', '-')}?"
        raise UsageError(f"--device: {args.device!r} is malformed{hint} (allowed: {DEVICE_ALLOWED})")
    choice("--variant", args.variant, config.variants)
    if not 0 <= args.seed <= MAX_SEED:
        raise UsageError(f"--seed: {args.seed} is out of range (allowed: 0 to {MAX_SEED})")
    if args.round < 1:
        raise UsageError(f"--round: {args.round} is out of range (allowed: an integer >= 1)")
    if args.threads is not None and not 1 <= args.threads <= MAX_THREADS:
        raise UsageError(f"--threads: {args.threads} is out of range (allowed: 1 to {MAX_THREADS})")
    if args.sweep is not None:
        match = SWEEP.match(args.sweep)
        if not match:
            raise UsageError(f"--sweep: {args.sweep!r} is malformed (allowed: threads=N or batch=N, N >= 1)")
        if int(match[2]) > (limit := MAX_THREADS if match[1] == "threads" else 2**32 - 1):
            raise UsageError(f"--sweep: {args.sweep!r} is out of range (allowed: {match[1]}=N, N from 1 to {limit})")
    data = Path(args.data)
    inputs = [input_folder(data, "--data")]
    if not (data / "manifest.json").is_file():
        raise UsageError(
            f"--data {data}: no prepared dataset there (manifest.json missing); run the data stage first "
            f"(gpuscale data --out {data}, or snakemake / dvc repro)"
        )
    if args.out:
        if ":" in args.model and args.model in args.out:  # a spec where its slug belongs: DVC's matrix put it there
            raise UsageError(
                f"--out {args.out}: names the model spec {args.model!r} in a path (its folder is "
                f"{default_out(args).split('/')[2]}); dvc.yaml is older than params.yaml's study.models: run "
                f"`python -m gpuscale.deps --write dvc.yaml`"
            )
        writable(args.out, "--out", inputs)
    else:
        writable(default_out(args), "--out (default)", inputs)


def default_out(args) -> str:
    from gpuscale.contract import params

    if args.sweep:
        parameter, _, value = args.sweep.partition("=")
        return params.sweep_record_path(args.model, args.device, parameter, int(value), args.variant, args.seed)
    return params.record_path(args.model, args.device, args.variant, args.seed, round=args.round)


def run(args) -> int:
    from gpuscale.contract import params
    from gpuscale.measure import timinglock, train

    config = load_typed(args)
    study = config.study
    if args.model not in study.models:
        log.warning("model %s is not in study.models; training it anyway as asked", args.model)
    if args.sweep:
        parameter, _, value = args.sweep.partition("=")
        settings = params.typed_sweep_settings(
            config, args.model, args.device, parameter, int(value), args.variant, args.seed
        )
    else:
        settings = params.typed_run_settings(config, args.model, args.device, args.variant, args.seed)
    out = Path(args.out or default_out(args))
    world = settings.device.world_size
    # The host-wide timing lock, held from here to the end (a second timing job waits), and this process ends
    # when whoever started it is gone (gpuscale.measure.timinglock).
    with timinglock.hold():
        if world > 1:
            from gpuscale.measure import distributed

            if not distributed.launched() and not train.spec_unavailable_reason(args.device):
                return distributed.relaunch(world, args.argv)  # torchrun starts `world` copies of this command
        train.run(
            settings,
            Path(args.data),
            out,
            threads=args.threads,
            label=study.label,
            resume=config.runtime.resume,
            round_=args.round,
        )
    return 0
