"""How the stages after training scale with the number of run records: aggregate, charts and report, each timed as
a fresh `gpuscale` process the way the workflow runs it, over N SYNTHETIC records.

The records are copies of the shipped study's records (reference/h200-2026-12-04), one per (model, device) as a
template, each copy given another seed and machine lease (boot id) and its times scaled by a random factor; each is
labelled synthetic, written with gpuscale's own writer, and checked against the record schema (each
template's first copy, then one in 97: only the seed, lease and times differ). They lie in a
reference folder of a scratch project, so aggregate reads them with `--reference-only`, as `reference/report.sh`
does; the predict stage is left out (its cost does not grow with the records; `models_latency.py` times it).

    PYTHONPATH=src python benchmarks/report_scale.py [--records 1000,10000] [--seeds 5] [--keep DIR]

Target: at most 30 s for all three stages over 10,000 records on 2 cores.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEMPLATES = REPO / "reference" / "h200-2026-12-04"
LABEL = "SYNTHETIC record (benchmarks/report_scale.py): a shipped record with its seed, lease and times changed"


def templates() -> dict[tuple[str, str], dict]:
    """One shipped `paper` record per (model, device)."""
    from gpuscale.contract import record

    found: dict[tuple[str, str], dict] = {}
    for path in sorted(TEMPLATES.rglob("runs/*/*/paper-seed0.json")):
        rec = record.load(path)
        found.setdefault((rec["key"]["model"], rec["key"]["device"]), rec)
    return found


def scaled(rec: dict, factor: float) -> dict:
    """Every time of the run times `factor`, every rate over it: the record stays consistent with its own clocks."""
    rec = copy.deepcopy(rec)
    for epoch in rec["epochs"]:
        for name in ("train_seconds", "eval_seconds", "measured_seconds"):
            if isinstance(epoch.get(name), float):
                epoch[name] *= factor
        if isinstance(epoch.get("images_per_second"), float):
            epoch["images_per_second"] /= factor
    timing = rec.get("timing") or {}
    for name, value in timing.items():
        if isinstance(value, float) and name != "wall_seconds":
            timing[name] = value / factor if "per_second" in name else value * factor
    return rec


def synthesise(folder: Path, n: int, seeds: int, rng: random.Random) -> int:
    """N records under folder/leases/<lease>/runs/<model>/<device>/paper-seed<k>.json: in each lease every model on
    both devices for each seed (so the study pairs CPU with GPU within a lease), as many leases as N needs."""
    from gpuscale.contract import record

    base = templates()
    models = sorted({model for model, _ in base if (model, "cpu") in base and (model, "cuda") in base})
    written = 0
    lease = 0
    while written < n:
        boot = f"{lease:08x}-5e17-4e71-8c00-{rng.getrandbits(48):012x}"
        pace = rng.lognormvariate(0.0, 0.15)  # the lease's own pace
        for seed in range(seeds):
            for model in models:
                for device in ("cpu", "cuda"):
                    if written >= n:
                        return written
                    rec = scaled(base[(model, device)], pace * rng.lognormvariate(0.0, 0.05))
                    rec["label"] = LABEL
                    rec["key"]["seed"] = rec["settings"]["seed"] = seed
                    rec["environment"]["boot_id"] = boot
                    if rec.get("conditions"):
                        rec["conditions"]["lease"] = boot
                    if written < len(base) or written % 97 == 0:  # every template's copy, then a sample
                        record.validate(rec, "synthetic record")
                    record.write(folder / "leases" / boot[:8] / "runs" / model / device / f"paper-seed{seed}.json", rec)
                    written += 1
        lease += 1
    return written


def stage(argv: list[str], cwd: Path) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one `gpuscale` process: on a shared machine the CPU time
    says how much work it was when the wall time also holds the other processes' load."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "gpuscale", *argv], cwd=cwd, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"gpuscale {argv[0]} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(n: int, seeds: int, root: Path) -> dict:
    project = root / f"n{n}"
    folder = project / "reference" / f"synthetic-{n}"
    start = time.perf_counter()
    written = synthesise(folder, n, seeds, random.Random(n))
    made = time.perf_counter() - start
    shutil.copy(REPO / "params.yaml", project / "params.yaml")
    overlay = {"report": {"reference": [f"reference/synthetic-{n}"], "title": f"SYNTHETIC: {n} records"}}
    (project / "overlay.yaml").write_text(json.dumps(overlay))
    params = ["--params", "params.yaml", "--params", "overlay.yaml"]
    times = {
        "aggregate": stage(
            ["aggregate", *params, "--reference-only", "--out", "results/tables", "--metrics", "results/metrics.json"],
            project,
        ),
        "charts": stage(["charts", *params, "--tables", "results/tables", "--out", "reports/charts"], project),
        "report": stage(
            ["report", *params, "--tables", "results/tables", "--charts", "reports/charts", "--out", "index.html"],
            project,
        ),
    }
    size = (project / "index.html").stat().st_size
    wall = {name: round(w, 1) for name, (w, _) in times.items()}
    cpu = {f"{name}_cpu": round(c, 1) for name, (_, c) in times.items()}
    total = round(sum(w for w, _ in times.values()), 1)
    return {"records": written, "synthesised_s": round(made, 1), **wall, "total_s": total, **cpu, "report_bytes": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", default="1000,10000", help="comma-separated record counts")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per (model, device) in each synthetic lease")
    parser.add_argument("--keep", help="write the scratch projects here and keep them")
    args = parser.parse_args()
    os.environ.setdefault("PYTHONPATH", str(REPO / "src"))
    sys.path.insert(0, str(REPO / "src"))
    root = Path(args.keep or tempfile.mkdtemp(prefix="report-scale-"))
    try:
        for n in (int(x) for x in args.records.split(",")):
            print(json.dumps(measure(n, args.seeds, root)), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
