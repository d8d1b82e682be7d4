"""gpuscale validate: check params files (and overlays) and exit. A model named by spec is also built and run on
two 32x32 images (the pre-flight check the workflow makes before any timing job)."""

from __future__ import annotations

from gpuscale.commands import UsageError, load_typed


def add_arguments(parser) -> None:
    pass


def run(args) -> int:
    from gpuscale.contract import params
    from gpuscale.models import spec as model_spec
    from gpuscale.models import specbuild

    config = load_typed(args)
    for key, names in (("study.models", config.study.models), ("sweeps.models", config.sweeps.models)):
        for index, name in enumerate(names):
            if model_spec.is_spec(name):
                try:
                    specbuild.preflight(name)
                except model_spec.SpecError as err:
                    raise UsageError(f"{key}.{index}: {err}") from None
    print(
        f"ok: {len(params.run_keys(config))} runs "
        f"({', '.join(config.study.models)} on {', '.join(config.study.devices)})"
    )
    return 0
