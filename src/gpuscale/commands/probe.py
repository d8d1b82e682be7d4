"""`gpuscale probe`: measure what a training step on one device is made of, in at most --seconds."""

from __future__ import annotations

HELP = "measure a device's layer throughputs, step costs and input pipeline (a probe record, about a minute)"


def add_arguments(parser) -> None:
    parser.add_argument("--device", required=True, help="cpu, cuda, cuda-N, mps")
    parser.add_argument("--out", required=True, help="probe record path, e.g. results/probe/cpu.json")
    parser.add_argument("--seconds", type=float, help="time budget (default: predict.probe_seconds)")
    parser.add_argument("--threads", type=int, help="torch threads on cpu (default: train.cpu_threads, else all cores)")


def run(args) -> int:
    import sys

    from gpuscale import probe, timinglock
    from gpuscale.commands import load_typed

    config = load_typed(args)
    budget = args.seconds or config.predict.probe_seconds
    try:
        with timinglock.hold():  # a probe times the device: never beside another timing job (gpuscale.timinglock)
            doc = probe.run(args.device, config.train, budget, threads=args.threads)
        probe.write(args.out, doc)
    except probe.ProbeError as err:
        print(f"gpuscale probe: error: {err}", file=sys.stderr)
        return 2
    return 0
