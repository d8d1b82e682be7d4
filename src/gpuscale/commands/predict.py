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


def check(args) -> None:
    """The reference and validation folders, the probes and facts, and the output, before any work."""
    from gpuscale.commands import input_folder, load_typed, writable
    from gpuscale.contract import paths

    config = load_typed(args)
    paths.reference_folders(config.report.reference)
    paths.reference_folders(config.predict.validate_on, "predict.validate_on")
    inputs = [(paths.index_key("report.reference", i), f) for i, f in enumerate(config.report.reference)]
    inputs += [(paths.index_key("predict.validate_on", i), f) for i, f in enumerate(config.predict.validate_on)]
    inputs.append(input_folder(args.probes, "--probes"))
    if args.facts:
        paths.resolve_input(args.facts, "--facts", kind="file")
        inputs.append(("--facts", args.facts))
    writable(args.out, "--out (folder)", inputs)


def run(args) -> int:
    import sys

    from gpuscale.commands import load_typed
    from gpuscale.models import registry as models
    from gpuscale.predict import costmodel
    from gpuscale.predict import prediction as predict

    params = load_typed(args)
    try:
        predict.run(
            probe_paths(Path(args.probes), params.study.devices),
            list(params.report.reference),
            Path(args.out),
            list(models.MODEL_NAMES),
            images=params.data.train_size or 50_000,
            batch_size=params.train.batch_size,
            facts_path=Path(args.facts) if args.facts else None,
            validation_folders=list(params.predict.validate_on),
        )
    except costmodel.CostModelError as err:
        print(f"gpuscale predict: error: {err}", file=sys.stderr)
        return 2
    return 0


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
