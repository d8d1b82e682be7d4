"""`gpuscale predict`: probe records + model facts + reference records -> results/predict/ tables (torch-free)."""

from __future__ import annotations

from pathlib import Path

HELP = "probe records and model facts -> predicted epochs and speedups, validated on the reference studies"


HOLDS = (".csv", ".json")  # each table as CSV and JSON


def add_arguments(parser) -> None:
    parser.add_argument(
        "--probes", default="results/probe", help="folder of probe records: <device>.json per study device"
    )
    parser.add_argument("--facts", help="model facts file (default: the package's modelfacts.json)")
    parser.add_argument("--out", default="results/predict")
    parser.add_argument(
        "--model",
        help="one model (a registry name or a spec): print its predicted CPU and GPU epoch and speedup with bands for"
        " this host, probing first where --probes has no probe of this lease; writes no tables",
    )
    parser.add_argument(
        "--data",
        default="data/prepared",
        help="with --model: the prepared dataset a probe it runs times the input pipeline on (if it exists)",
    )


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
    writable(args.out, "--out (folder)", inputs, holds=HOLDS)
    # the user's own probes stop the stage when bad; a reference folder's are skipped by the run, with a line
    # in results/predict/skipped (the report's conditions show it)
    check_probes(sorted(Path(args.probes).glob("*.json")) if Path(args.probes).is_dir() else [])


def check_probes(files: list[Path]) -> None:
    """Every probe record the stage may read holds finite figures within range, each key once, real text, and is a
    regular file (gpuscale.contract.recordcheck): the cost model read a NaN in a probe into NaN predictions."""
    from gpuscale.commands import UsageError
    from gpuscale.contract import recordcheck

    for path in files:
        try:
            recordcheck.read_json(path, "probe record", recordcheck.PROBE_MAX_BYTES)
        except recordcheck.BadValue as err:
            raise UsageError(f"{err}; take the probe again (gpuscale probe) or remove it") from None


def run(args) -> int:
    import sys
    import tempfile

    from gpuscale.commands import load_typed
    from gpuscale.models import registry as models
    from gpuscale.models import spec as model_spec
    from gpuscale.predict import costmodel
    from gpuscale.predict import prediction as predict

    params = load_typed(args)
    if args.model is not None:  # even an empty one: refused as no model, not read as no --model
        return one_off(args, params)
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


def _lease_probes(folder: Path, devices: list[str], lease: str | None) -> tuple[dict[str, dict], list[str]]:
    """The probe records of `folder` made in this lease (boot id), read, by device, and the devices that have none."""
    import json

    got, missing = {}, []
    for device in sorted({d.split("-ddp")[0] for d in devices}):
        try:
            doc = json.loads((folder / f"{device}.json").read_text())
        except (OSError, ValueError):
            doc = None
        same = isinstance(doc, dict) and lease is not None and (doc.get("conditions") or {}).get("lease") == lease
        (got.__setitem__(device, doc) if same else missing.append(device))
    return got, missing


def _table_models(doc: dict) -> set[str] | None:
    """The models a CPU probe's layer table timed; None where the probe holds no table (a GPU's, or one that could
    not time any: probing again would not give one)."""
    table = doc.get("layer_table")
    return set(table.get("models") or {}) if isinstance(table, dict) else None


def one_off(args, params) -> int:
    """`gpuscale predict --model SPEC`: this host's predicted epochs and speedup for one model, in seconds, with
    bands; probes of this lease are taken first where --probes lacks them (gpuscale probe, about a minute each)."""
    import sys
    import tempfile

    from gpuscale.commands import UsageError, model_choice

    try:
        model_choice("--model", args.model)  # a registry name, or a spec that builds and runs on 32x32 images
    except UsageError as err:
        print(f"gpuscale predict: error: {err}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="gpuscale-facts-") as scratch:
        return _one_off(args, params, scratch)


def _one_off(args, params, scratch: str) -> int:
    import subprocess
    import sys

    from gpuscale.measure import envinfo
    from gpuscale.models import spec as model_spec
    from gpuscale.predict import costmodel
    from gpuscale.predict import prediction as predict

    lease = envinfo.boot_id()
    folder = Path(args.probes)
    got, missing = _lease_probes(folder, list(params.study.devices), lease)
    for device, doc in got.items():  # a CPU prices a model by its layer table: one timed without it, again
        table = _table_models(doc)
        if device.startswith("cpu") and table is not None and args.model not in table:
            print(f"the probe of {device} in {folder} has no layer table of {args.model}: probing it again")
            missing.append(device)
    for device in missing:
        if device not in got:
            print(
                f"no probe of {device} from this lease in {folder}: probing it "
                f"(about {params.predict.probe_seconds:.0f} s)"
            )
        command = [sys.executable, "-m", "gpuscale", "probe", *_params_argv(args), "--device", device]
        command += ["--model", args.model]
        command += ["--out", str(folder / f"{device}.json")]
        if Path(args.data, "manifest.json").is_file():
            command += ["--data", str(args.data)]
        if subprocess.run(command, check=False).returncode != 0:
            print(f"gpuscale predict: error: the probe of {device} failed (see above)", file=sys.stderr)
            return 2
    try:
        facts_path = Path(args.facts) if args.facts else None
        if model_spec.is_spec(args.model):  # the user's own model: its facts (counted once, cached by file hash)
            facts_path = with_spec_facts(facts_path or costmodel.FACTS_FILE, [args.model], Path(scratch))
        facts = costmodel.load_facts(facts_path)
        if args.model not in facts:
            print(f"gpuscale predict: error: --model: no facts for {args.model!r}", file=sys.stderr)
            return 2
        probes = predict.load_probes([folder / f"{device}.json" for device in sorted({*got, *missing})])
        folders = list(dict.fromkeys([*params.report.reference, *params.predict.validate_on]))
        skipped: list[dict] = []  # a reference folder's bad records: warned and left out, as in the study's run
        leases = [x for f in folders if Path(f).is_dir() for x in predict.reference_leases(f, skipped)]
        rows, _ = predict.host_predictions(
            probes, facts, [args.model], {}, params.data.train_size or 50_000, params.train.batch_size, leases
        )
    except (costmodel.CostModelError, model_spec.SpecError) as err:
        print(f"gpuscale predict: error: {err}", file=sys.stderr)
        return 2
    skipped = [
        f"  {d:8} not measured: {p.get('not_measured_reason')}"
        for d, p in probes.items()
        if p.get("status") != "measured"
    ]
    print(render_one_off(args.model, rows, lease, skipped))
    return 0


def _params_argv(args) -> list[str]:
    from gpuscale.commands import params_files

    return [a for path in params_files(args) for a in ("--params", str(path))]


def render_one_off(model: str, rows: list[dict], lease: str | None, skipped: list[str] = ()) -> str:
    """The one-off answer as a few aligned lines: each device's epoch, then the speedup, each with its band."""
    lines = [f"{model}, predicted for this host (lease {(lease or 'unknown')[:8]}), the paper protocol:", *skipped]
    for r in rows:
        if r["quantity"] == "speedup":
            lines.append(f"  {'speedup':8} {r['predicted']:8.1f}x   band {r['low']:.1f}x to {r['high']:.1f}x")
        else:
            lines.append(
                f"  {r['device']:8} {r['predicted']:8.1f} s an epoch   band {r['low']:.1f} to {r['high']:.1f} s"
                f"   ({r['bound']}-bound)"
            )
    how = sorted({r["calibration"] for r in rows if r["quantity"] != "speedup"})
    lines.append("  from: " + "; ".join(how))
    return "\n".join(lines)
