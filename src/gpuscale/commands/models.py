"""gpuscale models: list the model registry, then the models the study names by spec, with parameters and FLOPs."""

from __future__ import annotations

from pathlib import Path


def add_arguments(parser) -> None:
    pass  # --params (every command's): the study whose models named by spec are listed after the registry


def spec_models(args) -> list[str]:
    """The models named by spec in study.models and sweeps.models (in that order, once each)."""
    from gpuscale.contract import params
    from gpuscale.models import spec as model_spec

    if not args.params and not Path(params.DEFAULT_PARAMS).is_file():
        return []
    from gpuscale.commands import load_typed, preflight_models

    config = load_typed(args)
    preflight_models(config, overrides=False)  # one line naming the key, as validate says it, before the table
    names = [*config.study.models, *config.sweeps.models]
    return [m for m in dict.fromkeys(names) if model_spec.is_spec(m)]


def run(args) -> int:
    import contextlib
    import sys

    from gpuscale.models import nets
    from gpuscale.models import registry as models

    specs = spec_models(args)
    width = max([16, *(len(m) + 1 for m in specs)])
    print(f"{'model':<{width}} {'parameters':>12} {'train GFLOPs/image':>19}  description")
    for name in [*models.MODELS, *specs]:
        entry = models.get(name)
        with contextlib.redirect_stdout(sys.stderr):  # what a model's own code prints, off the table
            model = entry.build(10)
            flops = nets.flops_per_image(model)
        print(
            f"{name:<{width}} {nets.parameter_count(model):>12,} "
            f"{flops['train_flops_per_image'] / 1e9:>19.4f}  {entry.description}"
        )
    return 0
