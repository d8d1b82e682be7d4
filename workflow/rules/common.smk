# Shared helpers: params validation with a one-line error, the params files the commands read,
# the code each stage runs (its inputs, computed), and the hand-over to DVC when the workflow succeeds.

import functools
import os
import shlex
import subprocess
import sys
from pathlib import Path

from gpuscale import deps
from gpuscale.analyze import tablefiles
from gpuscale.commands import use as overlay_choice  # `use` is a Snakemake keyword
from gpuscale.measure import envinfo
from gpuscale.contract import paths as gpaths
from gpuscale.contract import runlock
from gpuscale.contract import settings as typed
from gpuscale.models import spec as model_spec


def _configfile_overlays():
    """The --configfile overlays in the order given (this run's only): Snakemake's configfiles past params.yaml."""
    cli = [Path(f) for f in workflow.overwrite_configfiles]
    return [os.path.relpath(f) if Path(f).absolute().is_relative_to(Path.cwd()) else str(f) for f in cli]


if workflow.config_settings.config:
    sys.exit("gpuscale: --config values do not reach the stage commands; put them in an overlay file and pass --configfile FILE")

# `--configfile A --configfile B`: Snakemake keeps the last flag's files only, and the study ran without A's overlay
# (config/mymodel.yaml then an offline overlay planned the default study). Its own command line, in the main process.
_CONFIG_FLAGS = [a for a in sys.argv[1:] if a.split("=")[0] in ("--configfile", "--configfiles")]
if workflow.is_main_process and len(_CONFIG_FLAGS) > 1:
    sys.exit(
        f"gpuscale: {_CONFIG_FLAGS[0]} given {len(_CONFIG_FLAGS)} times: Snakemake keeps only the last one's files; "
        "give them all after one: --configfile A.yaml B.yaml"
    )

# The params: params.yaml, the overlays chosen with `gpuscale use` (.gpuscale/use.yaml), then this run's --configfile
# files. Every stage command reads their merge from one file, .gpuscale/params.yaml (gpuscale.commands.use), so what
# reruns depends on the values, never on an overlay's name; the main process writes it (and DVC's .gpuscale/run.yaml,
# from the choice alone), unless another workflow works here (its jobs read the file; this run will be refused).
CONFIGFILE_OVERLAYS = _configfile_overlays()
try:
    PARAMS_FILES = overlay_choice.sources(".", CONFIGFILE_OVERLAYS)
    if workflow.is_main_process and not runlock.holders(runlock.WORKFLOW_LOCK):
        overlay_choice.refresh(".", CONFIGFILE_OVERLAYS, fingerprint=envinfo.host_fingerprint())
    PARAMS = gp.load_typed([Path(f) for f in PARAMS_FILES])  # validated and typed once; the rules read PARAMS
except gp.ParamsError as err:
    sys.exit(f"gpuscale: params error: {err}")
PARAMS_ARGS = f"--params {overlay_choice.MERGED_PARAMS}"
# Snakemake's own reading (PyYAML) replaced by gpuscale's, which reads `lr: 1e-05` (what `dvc exp run -S` writes) as
# the number DVC reads (gpuscale.contract.params._dvc_number); every other value is the same in both.
config.clear()
config.update(PARAMS.config)
try:  # the paths the params name, resolved and checked where the stage commands check them (contract.paths)
    gpaths.reference_folders(PARAMS.report.reference)
    gpaths.data_path(PARAMS.data.source, PARAMS.data.path)
except gpaths.PathError as err:
    sys.exit(f"gpuscale: params error: {err}")

# No onstart runs under --no-hooks or --delete-all-output, yet the run writes or deletes outputs: it holds the folder
# (gpuscale.contract.runlock) from here, its parse, until Snakemake ends, or ends in one line while another works here.
if workflow.is_main_process and runlock.hooks_skipped(sys.argv):
    try:
        runlock.hold_workflow()
    except runlock.RunLockError as err:
        sys.exit(f"gpuscale: error: {err}")

# Models named by spec (gpuscale.models.spec): a job's {model} wildcard is the spec's slug, the command gets the
# spec; the user's file is an input of that model's jobs only. Built and run as a job will (a forward and backward
# pass, an evaluation pass: gpuscale.models.specbuild.preflight) before any job.
MODEL_BY_SLUG = {model_spec.slug(m): m for m in (*PARAMS.study.models, *PARAMS.sweeps.models)}
SPEC_MODELS = [m for m in MODEL_BY_SLUG.values() if model_spec.is_spec(m)]
if workflow.is_main_process and any(model_spec.is_spec(m) for m in (*MODEL_BY_SLUG.values(), *PARAMS.models)):
    from gpuscale.commands import UsageError, preflight_models  # torch: only where a model is named by spec

    try:
        preflight_models(PARAMS)  # each as `gpuscale validate` does it, its line naming its key
    except UsageError as err:
        sys.exit(f"gpuscale: params error: {err}")


def model_of(wildcards):
    """The model a job's {model} wildcard (a slug) stands for: a registry name or a spec."""
    return MODEL_BY_SLUG.get(wildcards.model, wildcards.model)


def model_files(wildcards):
    """The user's source files of the job's model (a spec's .py file, or its module's under this folder)."""
    return model_spec.files(model_of(wildcards))


def spec_files():
    """The source files of every model named by spec (the probe times their layers, predict counts them)."""
    return sorted({f for m in SPEC_MODELS for f in model_spec.files(m)})


HOST_FINGERPRINT = envinfo.host_fingerprint()
CUDA_MISMATCH = envinfo.cuda_mismatch()  # a GPU this torch cannot use: said before any job starts
if CUDA_MISMATCH:
    print(f"gpuscale: warning: {CUDA_MISMATCH}", file=sys.stderr)
# Each stage's code: the import closure of its command plus the data files those modules read,
# computed from src/gpuscale (gpuscale.deps; dvc.yaml depends on the same files through the link
# folders workflow/code/<command>/, generated from it), kept until a module file changes (.snakemake/ is git-ignored).
CODE = deps.code_files_by_stage(cache=".snakemake/gpuscale/code-deps.json")


# What the aggregation writes (gpuscale.analyze.tablefiles; dvc.yaml's aggregate outs are generated from the same list).
AGGREGATE_OUTPUTS = {
    **tablefiles.outputs(),
    "speedup": report(tablefiles.outputs()["speedup"], caption="../report/speedup.rst", category="Tables"),
}


def all_records():
    return [gp.record_path(**key) for key in TIMING_ORDER]


# The timing jobs' order (gpuscale.contract.params.timing_order): a job's priority is its distance from the end, so with
# one timing slot Snakemake starts them in that order; sweeps come after the study's runs. Shown by a dry run.
TIMING_ORDER = gp.run_keys(PARAMS)
_TIMING_RANK = {
    (model_spec.slug(k["model"]), k["device"], k["variant"], k["seed"], k.get("round", 1)): len(TIMING_ORDER) - i
    for i, k in enumerate(TIMING_ORDER)
}
ROUND_SUFFIX_PATTERN = r"(-round([2-9]|[1-9][0-9]+))?"


def round_of(suffix):
    return int(suffix[len("-round"):]) if suffix else 1


def timing_priority(wildcards):
    key = (wildcards.model, wildcards.device, wildcards.variant, int(wildcards.seed), round_of(wildcards.rsuffix))
    return _TIMING_RANK.get(key, 0)


# A dry run says the order (Snakemake's own listing of jobs is not the order they run in); a real run prints it
# with each job's predicted duration before the first job (onstart: gpuscale estimate).
_DRY_RUN = workflow.dryrun or any(
    a in ("-n", "--dry-run", "--dryrun") or (a.startswith("-n") and a[1:].isalpha()) for a in sys.argv[1:]
)
if _DRY_RUN and workflow.is_main_process and not config["predict"]["only"]:
    _study = config["study"]
    _how = (
        f"interleaved, RMIT under study.order_seed {_study.get('order_seed', 0)}"
        if _study.get("order", "interleaved") == "interleaved"
        else "grouped, the lists' order"
    )
    print(f"gpuscale: timing order ({_how}; sweeps after):", file=sys.stderr)
    for _i, _k in enumerate(TIMING_ORDER, 1):
        _round = f" round {_k['round']}" if "round" in _k else ""
        print(f"  {_i:3d}. {_k['model']} {_k['device']} {_k['variant']} seed {_k['seed']}{_round}", file=sys.stderr)


def sweep_records():
    return [gp.sweep_record_path(**key) for key in gp.sweep_keys(PARAMS)]


def reference_records(folders=None):
    """Every record under the reference folders the report includes (measured elsewhere), or under `folders`."""
    folders = config["report"]["reference"] if folders is None else folders
    return list(_records_under(tuple(folders)))


@functools.cache  # two rules list the same folders' records
def _records_under(folders):
    return tuple(sorted(str(p) for folder in folders for p in Path(folder).rglob("*.json")))


def data_inputs(wildcards):
    """The source file or folder, where the params name one, so replacing it reruns the data stage."""
    path = config["data"]["path"]
    return [path] if path and os.path.exists(path) else []


def train_threads(wildcards):
    return config["train"]["cpu_threads"] or os.cpu_count() or 1


onsuccess:
    # Every job done: let go of the folder (gpuscale.contract.runlock), DVC's lock included, which `dvc commit` takes.
    runlock.release_workflow()
    # Hand the finished state to DVC, so `dvc status` agrees with what Snakemake just built.
    # Not after a run with --configfile overlays: DVC reads the overlays chosen with `gpuscale use` alone.
    if os.path.isdir(".dvc") and not CONFIGFILE_OVERLAYS:
        done = subprocess.run(["dvc", "commit", "--force", "--quiet"], check=False)
        if done.returncode:
            print("gpuscale: `dvc commit` failed; run it by hand to record these outputs in dvc.lock", file=sys.stderr)
