"""`gpuscale predict`: probe records + model facts + reference records -> results/predict/ tables (torch-free)."""

from __future__ import annotations

from pathlib import Path

HELP = "probe records and model facts -> this host's predicted epochs and speedups, each with its band"


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
        " this host; reuses a probe of this host and boot from --probes (read only) or from the cache"
        f" ({probecache_folder()}/<host>/), else probes into the cache; writes no tables",
    )
    parser.add_argument(
        "--fresh-probe",
        action="store_true",
        help="with --model: probe again even where a recent probe of this host could be reused",
    )
    parser.add_argument(
        "--probe-max-age",
        type=float,
        default=24.0,
        metavar="HOURS",
        help="with --model: the oldest probe of this host and boot it reuses, in hours (default: 24)",
    )
    parser.add_argument(
        "--data",
        default="data/prepared",
        help="with --model: the prepared dataset a probe it runs times the input pipeline on (if it exists)",
    )


def probecache_folder() -> str:
    from gpuscale.predict import probecache

    return str(probecache.CACHE)


def check(args) -> None:
    """The reference folders, the probes and facts, and the output, before any work."""
    from gpuscale.commands import UsageError, input_folder, load_typed, writable
    from gpuscale.contract import paths

    config = load_typed(args)
    paths.reference_folders(config.report.reference)
    inputs = [(paths.index_key("report.reference", i), f) for i, f in enumerate(config.report.reference)]
    inputs.append(input_folder(args.probes, "--probes"))
    if args.facts:
        paths.resolve_input(args.facts, "--facts", kind="file")
        inputs.append(("--facts", args.facts))
    if not 0 < args.probe_max_age <= 24 * 365:
        raise UsageError(f"--probe-max-age: {args.probe_max_age:g} is out of range (allowed: more than 0 hours)")
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
    import sys

    from gpuscale.measure import envinfo
    from gpuscale.models import spec as model_spec
    from gpuscale.predict import costmodel
    from gpuscale.predict import prediction as predict

    lease = envinfo.boot_id()
    paths = {}
    for device in sorted({d.split("-ddp")[0] for d in params.study.devices}):
        path = one_off_probe(args, params, device, envinfo.host_fingerprint(), lease)
        if path is None:
            return 2
        paths[device] = path
    try:
        facts_path = Path(args.facts) if args.facts else None
        if model_spec.is_spec(args.model):  # the user's own model: its facts (counted once, cached by file hash)
            facts_path = with_spec_facts(facts_path or costmodel.FACTS_FILE, [args.model], Path(scratch))
        facts = costmodel.load_facts(facts_path)
        if args.model not in facts:
            print(f"gpuscale predict: error: --model: no facts for {args.model!r}", file=sys.stderr)
            return 2
        probes = predict.load_probes(list(paths.values()))
        skipped: list[dict] = []  # a reference folder's bad records: warned and left out, as in the study's run
        leases = [x for f in params.report.reference if Path(f).is_dir() for x in predict.reference_leases(f, skipped)]
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
    print(render_one_off(args.model, rows, lease, skipped, paths))
    return 0


def one_off_probe(args, params, device: str, fingerprint: str, lease: str | None) -> Path | None:
    """The probe record of `device` the one-off reads: a recent one of this host and boot (the workflow's under
    --probes, read only, else the cache's: gpuscale.predict.probecache), else a fresh one taken into the cache;
    None when probing failed (said on stderr). Never writes under --probes."""
    import subprocess
    import sys

    from gpuscale.models import spec as model_spec
    from gpuscale.predict import probecache

    sha = model_spec.file_sha256(args.model) if model_spec.is_spec(args.model) else None
    if not args.fresh_probe:
        found, passed = probecache.find(
            device, args.model, fingerprint, lease, Path(args.probes) / f"{device}.json", sha, args.probe_max_age
        )
        if found is not None:
            return found
        for line in passed:
            print(f"not reused: {line}")
    out = probecache.cache_path(fingerprint, device, args.model, sha)
    out.parent.mkdir(parents=True, exist_ok=True)
    print(
        f"probing {device} into {out} (about {params.predict.probe_seconds:.0f} s; reused for {args.probe_max_age:g} h)"
    )
    command = [sys.executable, "-m", "gpuscale", "probe", *_params_argv(args), "--device", device]
    command += ["--model", args.model, "--out", str(out)]
    if Path(args.data, "manifest.json").is_file():
        command += ["--data", str(args.data)]
    if subprocess.run(command, check=False).returncode != 0:
        print(f"gpuscale predict: error: the probe of {device} failed (see above)", file=sys.stderr)
        return None
    return out


def _params_argv(args) -> list[str]:
    from gpuscale.commands import params_files

    return [a for path in params_files(args) for a in ("--params", str(path))]


def render_one_off(
    model: str, rows: list[dict], lease: str | None, skipped: list[str] = (), probes: dict[str, Path] | None = None
) -> str:
    """The one-off answer as a few aligned lines: each device's epoch, then the speedup, each with its band, and
    the probe records it read."""
    lines = [f"{model}, predicted for this host (boot {(lease or 'unknown')[:8]}), the paper protocol:", *skipped]
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
    if probes:
        lines.append(
            "  probes: " + ", ".join(str(path) for path in probes.values()) + " (--fresh-probe: take new ones)"
        )
    return "\n".join(lines)
