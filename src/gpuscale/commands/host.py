"""gpuscale host: write this host's hardware fingerprint."""

from __future__ import annotations

from gpuscale.commands import writable


def add_arguments(parser) -> None:
    parser.add_argument("--out", default="results/host.json")


def check(args) -> None:
    writable(args.out, "--out")


def run(args) -> int:
    from gpuscale.contract import fsutil
    from gpuscale.measure import envinfo

    fsutil.write_json(args.out, {"host_fingerprint": envinfo.host_fingerprint(), "hardware": envinfo.hardware()})
    return 0
