"""`gpuscale probe`: measure what a training step on one device is made of, in at most --seconds."""

from __future__ import annotations

from gpuscale import devices

HELP = "measure a device's layer throughputs, step costs and input pipeline (a probe record, about a minute)"


def add_arguments(parser) -> None:
    parser.add_argument(
        "--device",
        required=True,
        help=f"{devices.allowed(parallel=False)} (a data-parallel cuda-ddpN is probed as one process: cuda)",
    )
    parser.add_argument("--out", required=True, help="probe record path, e.g. results/probe/cpu.json")
    parser.add_argument("--seconds", type=float, help="time budget (default: predict.probe_seconds)")
    parser.add_argument("--threads", type=int, help="torch threads on cpu (default: train.cpu_threads, else all cores)")
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        help="a model (a registry name or a spec) whose layers the CPU's layer table times first, before the study's"
        " (repeatable; gpuscale predict --model passes it)",
    )
    parser.add_argument(
        "--data",
        help="the prepared dataset training reads (gpuscale data --out DIR): the input pipeline is timed on it"
        " (default: on synthetic images)",
    )


def check(args) -> None:
    """Every argument and the output, before any measuring (one line naming what is allowed)."""
    from gpuscale.commands import MAX_THREADS, UsageError, model_choice, writable
    from gpuscale.contract.settings import DEVICE_ALLOWED, is_device

    if not is_device(args.device):
        raise UsageError(f"--device: {args.device!r} is malformed (allowed: {DEVICE_ALLOWED})")
    if args.seconds is not None and not 0 < args.seconds <= 600:
        raise UsageError(f"--seconds: {args.seconds} is out of range (allowed: more than 0, at most 600)")
    if args.threads is not None and not 1 <= args.threads <= MAX_THREADS:
        raise UsageError(f"--threads: {args.threads} is out of range (allowed: 1 to {MAX_THREADS})")
    writable(args.out, "--out")
    for model in args.model:
        model_choice("--model", model)  # a registry name, or a spec that builds and trains on 32x32 images
    if args.data is not None:
        from pathlib import Path

        data = Path(args.data)
        if not data.is_dir() or not (data / "manifest.json").is_file():
            raise UsageError(
                f"--data: {args.data!r} is not a prepared dataset (make one with: gpuscale data --out DIR)"
            )


def run(args) -> int:
    import sys

    from gpuscale.commands import load_typed, preflight_models
    from gpuscale.contract.settings import DeviceSpec
    from gpuscale.measure import probe, timinglock
    from gpuscale.models.spec import SpecError

    config = load_typed(args)
    preflight_models(config, overrides=False)  # the layer table times them: a bad one says so before any timing
    budget = args.seconds or config.predict.probe_seconds
    dataset = None
    if args.data is not None:
        from gpuscale.inputs import data as data_stage

        try:
            dataset, _, _ = data_stage.load_prepared(args.data, verify=False)
        except data_stage.DataError as err:
            print(f"gpuscale probe: error: --data: {err}", file=sys.stderr)
            return 2
    try:
        with (
            timinglock.hold()
        ):  # a probe times the device: never beside another timing job (gpuscale.measure.timinglock)
            device = DeviceSpec.parse(args.device).per_process  # cpu-ddp2: one process's device, cpu
            doc = probe.run(
                device,
                config.train,
                budget,
                threads=args.threads,
                dataset=dataset,
                spec_models=tuple(dict.fromkeys([*args.model, *spec_models(config)])),
            )
        probe.write(args.out, doc)
    except (probe.ProbeError, SpecError) as err:
        print(f"gpuscale probe: error: {err}", file=sys.stderr)
        return 2
    return 0


def spec_models(config) -> tuple[str, ...]:
    """The study's models named by spec (study.models, then sweeps.models), which the layer table times first."""
    from gpuscale.models.spec import is_spec

    return tuple(dict.fromkeys(m for m in (*config.study.models, *config.sweeps.models) if is_spec(m)))
