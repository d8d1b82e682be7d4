"""gpuscale models: list the model registry, then the models the study names by spec, with parameters and FLOPs.

The registry's figures are the shipped facts (gpuscale/models/modelfacts.json, counted by gpuscale.models.facts and
checked current by tests/test_models.py): nothing is built, no torch. A model named by spec is built and counted
once, then read from its cache file under .gpuscale/cache/models/ while its spec and source files (their sha256)
are unchanged.
"""

from __future__ import annotations

from pathlib import Path

CACHE_FOLDER = ".gpuscale/cache/models"  # <slug>.json per model named by spec (gpuscale.models.spec.facts_document)


def add_arguments(parser) -> None:
    pass  # --params (every command's): the study whose models named by spec are listed after the registry


def spec_models(args) -> list[str]:
    """The models named by spec in study.models and sweeps.models (in that order, once each)."""
    from gpuscale.contract import params
    from gpuscale.models import spec as model_spec

    if not args.params and not Path(params.DEFAULT_PARAMS).is_file():
        return []
    from gpuscale.commands import load_typed

    config = load_typed(args)
    names = [*config.study.models, *config.sweeps.models]
    return [m for m in dict.fromkeys(names) if model_spec.is_spec(m)]


def spec_entry(key: str, name: str) -> dict:
    """A spec model's facts: its cache file where current, else built (one line naming its key where it fails),
    counted and cached."""
    from gpuscale.commands import UsageError
    from gpuscale.models import spec as model_spec

    cached = model_spec.read_facts(name, CACHE_FOLDER)
    if cached is not None:
        return cached
    from gpuscale.models import facts  # torch: only for a model not counted yet

    try:
        return facts.spec_facts(name, CACHE_FOLDER)
    except model_spec.SpecError as err:
        raise UsageError(f"{key}: {err}") from None


def run(args) -> int:
    from gpuscale.models import registry as models
    from gpuscale.models import spec as model_spec

    specs = spec_models(args)
    for name in specs:
        model_spec.check(name)  # torch-free: the form, file and function are there
    shipped = models.facts()["models"]
    rows = [(name, shipped[name], models.MODELS[name].description) for name in models.MODELS]
    rows += [(name, spec_entry(f"study.models ({name})", name), model_spec.description(name)) for name in specs]
    width = max([16, *(len(m) + 1 for m in specs)])
    print(f"{'model':<{width}} {'parameters':>12} {'train GFLOPs/image':>19}  description")
    for name, entry, description in rows:
        print(
            f"{name:<{width}} {entry['parameters']:>12,} {entry['train_flops_per_image'] / 1e9:>19.4f}  {description}"
        )
    return 0
