"""The one command-line entry point: `gpuscale <stage> ...` (also `python -m gpuscale`).

Snakemake rules and DVC stages call these subcommands and nothing else. Every subcommand that
reads params validates the whole file first, so a bad key stops any stage in one line.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from pathlib import Path

from gpuscale import params as params_mod

log = logging.getLogger("gpuscale")


def setup_logging(log_file: str | None, verbose: bool = False) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    rank = int(os.environ.get("RANK", "0"))
    if rank:  # the other processes of a data-parallel run: warnings only, and never the log file rank 0 writes
        logging.basicConfig(
            level=logging.WARNING,
            format=f"%(asctime)s %(levelname)s [rank {rank}] %(name)s: %(message)s",
            datefmt="%H:%M:%S",
            handlers=handlers,
            force=True,
        )
        return
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file, mode="w"))
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        handlers=handlers,
        force=True,
    )


def params_files(args) -> list[Path]:
    return [Path(p) for p in (args.params or [params_mod.DEFAULT_PARAMS])]


def load_params(args) -> dict:
    return params_mod.load(params_files(args))


def cmd_validate(args) -> int:
    config = load_params(args)
    print(
        f"ok: {len(params_mod.run_keys(config))} runs "
        f"({', '.join(config['study']['models'])} on {', '.join(config['study']['devices'])})"
    )
    return 0


def cmd_host(args) -> int:
    from gpuscale import envinfo, fsutil

    fsutil.write_json(args.out, {"host_fingerprint": envinfo.host_fingerprint(), "hardware": envinfo.hardware()})
    return 0


def cmd_data(args) -> int:
    from gpuscale import data

    config = load_params(args)
    data.prepare(config["data"], Path(args.out))
    return 0


def cmd_train(args) -> int:
    from gpuscale import train

    config = load_params(args)
    study = config["study"]
    if args.model not in study["models"]:
        log.warning("model %s is not in study.models; training it anyway as asked", args.model)
    if args.sweep:
        parameter, _, value = args.sweep.partition("=")
        if not value.isdigit():
            raise params_mod.ParamsError(f"--sweep: {args.sweep!r} is malformed (allowed: threads=N or batch=N)")
        settings = params_mod.sweep_settings(
            config, args.model, args.device, parameter, int(value), args.variant, args.seed
        )
        default_out = params_mod.sweep_record_path(
            args.model, args.device, parameter, int(value), args.variant, args.seed
        )
    else:
        settings = params_mod.run_settings(config, args.model, args.device, args.variant, args.seed)
        default_out = params_mod.record_path(args.model, args.device, args.variant, args.seed)
    world = params_mod.data_parallel_size(args.device)
    if world > 1:
        from gpuscale import distributed

        if not distributed.launched() and not train.spec_unavailable_reason(args.device):
            return distributed.relaunch(world, args.argv)  # torchrun starts `world` copies of this command
    out = Path(args.out or default_out)
    train.run(
        settings,
        Path(args.data),
        out,
        threads=args.threads,
        label=study.get("label"),
        resume=config["runtime"]["resume"],
    )
    return 0


def cmd_aggregate(args) -> int:
    from gpuscale import aggregate

    config = load_params(args)
    records = [Path(params_mod.record_path(**key)) for key in params_mod.run_keys(config)]
    records += [Path(params_mod.sweep_record_path(**key)) for key in params_mod.sweep_keys(config)]
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


def cmd_charts(args) -> int:
    from gpuscale import charts

    config = load_params(args)
    charts.run(Path(args.tables), Path(args.out), config["report"]["accuracy_tolerance"])
    return 0


def cmd_report(args) -> int:
    from gpuscale import report

    config = load_params(args)
    report.run(Path(args.tables), Path(args.charts), Path(args.out), config, params_files(args))
    return 0


def cmd_models(args) -> int:
    from gpuscale import models, nets

    print(f"{'model':<16} {'parameters':>12} {'train GFLOPs/image':>19}  description")
    for name, spec in models.MODELS.items():
        model = spec.build(10)
        flops = nets.flops_per_image(model)
        print(
            f"{name:<16} {nets.parameter_count(model):>12,} {flops['train_flops_per_image'] / 1e9:>19.4f}  {spec.description}"
        )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuscale", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--params",
        action="append",
        metavar="FILE",
        help="params file (default params.yaml); repeat to overlay, later files win",
    )
    common.add_argument("--log", metavar="FILE", help="also write the log to FILE")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", parents=[common], help="check params files and exit")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("host", parents=[common], help="write this host's hardware fingerprint")
    p.add_argument("--out", default="results/host.json")
    p.set_defaults(func=cmd_host)

    p = sub.add_parser("data", parents=[common], help="prepare the dataset (data.* params)")
    p.add_argument("--out", default="data/prepared")
    p.set_defaults(func=cmd_data)

    p = sub.add_parser("train", parents=[common], help="train and time one (model, device, variant, seed)")
    p.add_argument("--model", required=True)
    p.add_argument(
        "--device",
        required=True,
        help="cpu, cuda, cuda-N, mps, or data-parallel cuda-ddpN / cpu-ddpN (started through torchrun's launcher)",
    )
    p.add_argument("--variant", default="paper")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, help="torch threads (default: train.cpu_threads, else all cores)")
    p.add_argument("--sweep", metavar="PARAM=N", help="a sweep run: threads=N (CPU threads) or batch=N (batch size)")
    p.add_argument("--data", default="data/prepared", help="prepared dataset folder")
    p.add_argument("--out", help="record path (default results/runs/<model>/<device>/<variant>-seed<seed>.json)")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("aggregate", parents=[common], help="records -> Polars tables, fits and metrics")
    p.add_argument("--out", default="results/tables")
    p.add_argument("--metrics", default="results/metrics.json")
    p.add_argument(
        "--reference-only",
        action="store_true",
        help="aggregate only the report.reference folders, none of this host's records",
    )
    p.set_defaults(func=cmd_aggregate)

    p = sub.add_parser("charts", parents=[common], help="tables -> Altair charts (HTML, SVG, Vega-Lite JSON)")
    p.add_argument("--tables", default="results/tables")
    p.add_argument("--out", default="reports/charts")
    p.set_defaults(func=cmd_charts)

    p = sub.add_parser("report", parents=[common], help="tables and charts -> one offline HTML page")
    p.add_argument("--tables", default="results/tables")
    p.add_argument("--charts", default="reports/charts")
    p.add_argument("--out", default="reports/index.html")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("models", parents=[common], help="list the model registry with parameters and FLOPs")
    p.set_defaults(func=cmd_models)

    for name in ("probe", "predict", "estimate"):  # gpuscale.commands.<name>: add_arguments(parser), run(args)
        module = importlib.import_module(f"gpuscale.commands.{name}")
        p = sub.add_parser(name, parents=[common], help=module.HELP)
        module.add_arguments(p)
        p.set_defaults(func=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    from gpuscale.record import RecordError

    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    setup_logging(getattr(args, "log", None))
    known: tuple = (params_mod.ParamsError, RecordError)
    try:
        # Each stage's own errors, imported only for that stage: analysis never imports torch.
        if args.command in ("data", "train"):
            from gpuscale.data import DataError

            known = (*known, DataError)
        if args.command == "train":
            from gpuscale.train import TrainError

            known = (*known, TrainError)
        if args.command in ("aggregate", "charts", "report"):
            from gpuscale.aggregate import AggregateError

            known = (*known, AggregateError)
        return args.func(args)
    except known as err:
        if args.debug:
            raise
        print(f"gpuscale {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"gpuscale {args.command}: interrupted; no output was written", file=sys.stderr)
        return 130
