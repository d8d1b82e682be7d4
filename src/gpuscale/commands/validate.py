"""gpuscale validate: check params files (and overlays) and exit."""

from __future__ import annotations

from gpuscale.commands import load_typed


def add_arguments(parser) -> None:
    pass


def run(args) -> int:
    from gpuscale.contract import params

    config = load_typed(args)
    print(
        f"ok: {len(params.run_keys(config))} runs "
        f"({', '.join(config.study.models)} on {', '.join(config.study.devices)})"
    )
    return 0
