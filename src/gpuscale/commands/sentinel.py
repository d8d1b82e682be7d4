"""`gpuscale sentinel`: a few seconds' witness of this machine's state (gpuscale.measure.sentinel), as a small table."""

from __future__ import annotations

from gpuscale import devices

HELP = "measure the machine state a study's timings depend on (a few seconds a device; a witness, never a correction)"


def add_arguments(parser) -> None:
    parser.add_argument(
        "--device", default="cpu", help=f"{devices.allowed(parallel=False)} (default cpu: the host's parts alone)"
    )
    parser.add_argument("--threads", type=int, help="torch threads (default: train.cpu_threads, else all cores)")
    parser.add_argument("--out", help="also write the sentinel as JSON here")


def check(args) -> None:
    from gpuscale.commands import MAX_THREADS, UsageError, writable
    from gpuscale.contract.settings import DEVICE_ALLOWED, DeviceSpec, is_device

    if not is_device(args.device) or DeviceSpec.parse(args.device).data_parallel:
        raise UsageError(f"--device: {args.device!r} is not allowed (allowed: one device of {DEVICE_ALLOWED})")
    if args.threads is not None and not 1 <= args.threads <= MAX_THREADS:
        raise UsageError(f"--threads: {args.threads} is out of range (allowed: 1 to {MAX_THREADS})")
    if args.out:
        writable(args.out, "--out")


def run(args) -> int:
    import os
    import sys

    import torch

    from gpuscale.commands import load_typed
    from gpuscale.contract import conditions, fsutil
    from gpuscale.measure import envinfo, sentinel, timinglock
    from gpuscale.measure import train as train_mod

    config = load_typed(args)
    device = train_mod.torch_device(args.device)
    reason = train_mod.device_unavailable_reason(device)
    if reason:
        print(f"gpuscale sentinel: error: {args.device} cannot be measured here: {reason}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads or config.train.cpu_threads or os.cpu_count() or 1)
    with timinglock.hold():  # it times the machine: never beside a timing job
        doc = sentinel.measure(config.train, device)
    doc["lease"] = envinfo.boot_id() or "unknown"
    print(conditions.table(doc))
    print(f"lease (boot id): {doc['lease']}")
    if args.out:
        fsutil.write_json(args.out, doc)
    return 0
