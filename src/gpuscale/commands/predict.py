"""`gpuscale predict`: probe records + model facts + reference records -> results/predict/ tables (torch-free)."""

from __future__ import annotations

from pathlib import Path

HELP = "probe records and model facts -> predicted epochs and speedups, validated on the reference studies"


def add_arguments(parser) -> None:
    parser.add_argument(
        "--probes", default="results/probe", help="folder of probe records: <device>.json per study device"
    )
    parser.add_argument("--facts", help="model facts file (default: the package's modelfacts.json)")
    parser.add_argument("--out", default="results/predict")


def run(args) -> int:
    import sys
    import tempfile

    from gpuscale.commands import load_typed
    from gpuscale.models import registry as models
    from gpuscale.models import spec as model_spec
    from gpuscale.predict import costmodel
    from gpuscale.predict import prediction as predict

    params = load_typed(args)
    specs = [m for m in params.study.models if model_spec.is_spec(m)]
    facts_path = Path(args.facts) if args.facts else None
    try:
        with tempfile.TemporaryDirectory(prefix="gpuscale-facts-") as scratch:
            if specs:  # the study's own models: the package's facts and theirs, in one file for the cost model
                facts_path = with_spec_facts(facts_path or costmodel.FACTS_FILE, specs, Path(scratch))
            predict.run(
                probe_paths(Path(args.probes), params.study.devices),
                list(params.report.reference),
                Path(args.out),
                [*specs, *models.MODEL_NAMES],
                images=params.data.train_size or 50_000,
                batch_size=params.train.batch_size,
                facts_path=facts_path,
                validation_folders=list(params.predict.validate_on),
            )
    except (costmodel.CostModelError, model_spec.SpecError) as err:
        print(f"gpuscale predict: error: {err}", file=sys.stderr)
        return 2
    return 0


def with_spec_facts(path: Path, specs: list[str], folder: Path) -> Path:
    """A copy of the facts file with the spec models' facts added (their cache under results/models, counted
    there on the first use and after an edit of their file: that imports torch)."""
    import json

    from gpuscale.models import spec as model_spec

    doc = json.loads(path.read_text()) if path.exists() else {"schema": 1, "models": {}}
    for name in specs:
        entry = model_spec.read_facts(name)
        if entry is None:
            from gpuscale.models import facts

            entry = facts.spec_facts(name)
        doc["models"][name] = entry
    out = folder / "modelfacts.json"
    out.write_text(json.dumps(doc))
    return out


def probe_paths(folder: Path, devices: list[str]) -> list[Path]:
    """One probe record per device a process trains on: <device>.json, or for a data-parallel study device its
    per-process kind's record (cpu.json for cpu-ddp2; DVC's probe matrix names it cpu-ddp2.json)."""
    from gpuscale.contract.settings import DeviceSpec

    found: dict[str, Path] = {}
    for device in devices:
        single = DeviceSpec.parse(device).per_process
        for path in (folder / f"{single}.json", folder / f"{device}.json"):
            if single not in found and path.exists():
                found[single] = path
    return list(found.values())
