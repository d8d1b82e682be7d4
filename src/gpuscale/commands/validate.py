"""gpuscale validate: check params files (and overlays) and exit. A model named by spec is also built and asked what a
training job will ask of it (the pre-flight check the workflow makes before any timing job); where params.yaml names
one that dvc.yaml has no stages for, a note says how to give it some."""

from __future__ import annotations

import sys
from pathlib import Path

from gpuscale.commands import load_typed


def add_arguments(parser) -> None:
    pass


def dvc_notes(params_path: Path = Path("params.yaml"), dvc_path: Path = Path("dvc.yaml")) -> list[str]:
    """What `dvc repro` would miss: a model named by spec in params.yaml (DVC's params) whose stages dvc.yaml lacks
    (gpuscale.deps --write makes them; DVC's own message names a missing param, not the fix)."""
    import yaml

    from gpuscale.models import spec as model_spec

    try:
        doc = yaml.safe_load(params_path.read_text()) or {}
        stages = (yaml.safe_load(dvc_path.read_text()) or {}).get("stages") or {}
    except (OSError, yaml.YAMLError, AttributeError):
        return []  # no DVC here (or not readable as such): nothing DVC would miss
    wanted = [("train", m) for m in ((doc.get("study") or {}).get("models") or [])]
    wanted += [("sweep_threads", m) for m in ((doc.get("sweeps") or {}).get("models") or [])]
    missing = list(
        dict.fromkeys(
            m for stage, m in wanted if model_spec.is_spec(str(m)) and model_spec.dvc_stage(stage, m) not in stages
        )
    )
    if not missing:
        return []
    return [
        f"dvc.yaml has no stages for {', '.join(map(repr, missing))} (DVC only): run python -m gpuscale.deps --write "
        f"dvc.yaml before dvc repro"
    ]


def run(args) -> int:
    from gpuscale.commands import preflight_models
    from gpuscale.contract import params

    config = load_typed(args)
    preflight_models(config)
    for line in dvc_notes():
        print(f"gpuscale validate: note: {line}", file=sys.stderr)
    print(
        f"ok: {len(params.run_keys(config))} runs "
        f"({', '.join(config.study.models)} on {', '.join(config.study.devices)})"
    )
    return 0
