# Shared helpers: params validation with a one-line error, the params files the commands read,
# the code each stage runs (its inputs), and the hand-over to DVC when the workflow succeeds.

import os
import subprocess
import sys
from pathlib import Path

from gpuscale import envinfo


def _params_files():
    """params.yaml first, then the --configfile overlays in the order given: what Snakemake merged."""
    cli = [Path(f) for f in workflow.overwrite_configfiles]
    base = [Path(f) for f in workflow.configfiles if Path(f).absolute() not in {c.absolute() for c in cli}]
    return [os.path.relpath(f) if Path(f).absolute().is_relative_to(Path.cwd()) else str(f) for f in base + cli]


if workflow.config_settings.config:
    sys.exit("gpuscale: --config values do not reach the stage commands; put them in an overlay file and pass --configfile FILE")

PARAMS_FILES = _params_files()
PARAMS_ARGS = " ".join(f"--params {f}" for f in PARAMS_FILES)
try:
    gp.load([Path(f) for f in PARAMS_FILES])
except gp.ParamsError as err:
    sys.exit(f"gpuscale: params error: {err}")

HOST_FINGERPRINT = envinfo.host_fingerprint()
CUDA_MISMATCH = envinfo.cuda_mismatch()  # a GPU this torch cannot use: said before any job starts
if CUDA_MISMATCH:
    print(f"gpuscale: warning: {CUDA_MISMATCH}", file=sys.stderr)
PKG = "src/gpuscale"
CODE = {
    "host": [f"{PKG}/cli.py", f"{PKG}/envinfo.py", f"{PKG}/fsutil.py"],
    "data": [f"{PKG}/cli.py", f"{PKG}/params.py", f"{PKG}/data.py", f"{PKG}/fsutil.py", f"{PKG}/schemas/params.schema.yaml"],
    "train": [
        f"{PKG}/cli.py", f"{PKG}/params.py", f"{PKG}/train.py", f"{PKG}/data.py", f"{PKG}/models.py",
        f"{PKG}/nets.py", f"{PKG}/envinfo.py", f"{PKG}/record.py", f"{PKG}/energy.py", f"{PKG}/loaders.py",
        f"{PKG}/variants.py", f"{PKG}/sampling.py", f"{PKG}/distributed.py", f"{PKG}/checkpoint.py", f"{PKG}/fsutil.py",
        f"{PKG}/schemas/params.schema.yaml", f"{PKG}/schemas/run-record.schema.json",
    ],
    "aggregate": [
        f"{PKG}/cli.py", f"{PKG}/params.py", f"{PKG}/aggregate.py", f"{PKG}/metrics.py", f"{PKG}/analysis.py",
        f"{PKG}/paper.py",
        f"{PKG}/sampling.py",
        f"{PKG}/record.py", f"{PKG}/fsutil.py", f"{PKG}/schemas/run-record.schema.json",
    ],
    "charts": [f"{PKG}/cli.py", f"{PKG}/charts.py", f"{PKG}/aggregate.py", f"{PKG}/analysis.py", f"{PKG}/fsutil.py"],
    "report": [f"{PKG}/cli.py", f"{PKG}/report.py", f"{PKG}/charts.py", f"{PKG}/paper.py", f"{PKG}/fsutil.py",
               f"{PKG}/templates/report.html.j2"],
}


def all_records():
    return [gp.record_path(**key) for key in gp.run_keys(config)]


def sweep_records():
    return [gp.sweep_record_path(**key) for key in gp.sweep_keys(config)]


def reference_records():
    """Every record under the reference folders the report includes (measured elsewhere)."""
    return sorted(str(p) for folder in config["report"]["reference"] for p in Path(folder).rglob("*.json"))


def data_inputs(wildcards):
    """The source file or folder, where the params name one, so replacing it reruns the data stage."""
    path = config["data"]["path"]
    return [path] if path and os.path.exists(path) else []


def train_threads(wildcards):
    return config["train"]["cpu_threads"] or os.cpu_count() or 1


onsuccess:
    # Hand the finished state to DVC, so `dvc status` agrees with what Snakemake just built.
    # Only for params.yaml alone: outputs of an overlay (e.g. the quick preset) do not match params.yaml.
    if os.path.isdir(".dvc") and PARAMS_FILES == ["params.yaml"]:
        done = subprocess.run(["dvc", "commit", "--force", "--quiet"], check=False)
        if done.returncode:
            print("gpuscale: `dvc commit` failed; run it by hand to record these outputs in dvc.lock", file=sys.stderr)
