"""Stage code dependencies are computed (gpuscale.deps), and what a stage really imports is among them."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml
from conftest import REPO, TINY, tool_env, write_yaml

from gpuscale import deps
from gpuscale.contract import params

HOOK = """\
import atexit, json, os, sys

def _dump():
    names = sorted(m for m in sys.modules if m == "gpuscale" or m.startswith("gpuscale."))
    files = {m: getattr(sys.modules[m], "__file__", None) for m in names}
    with open(os.environ["GPUSCALE_IMPORTS_OUT"], "w") as fh:
        json.dump(files, fh)

atexit.register(_dump)
"""


def dvc_code_deps() -> dict[str, set[str]]:
    """stage -> the src/gpuscale files dvc.yaml's code deps stand for (as written, before matrix expansion):
    a workflow/code/<command> dep is the files its links point at."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    out: dict[str, set[str]] = {}
    for name, stage in stages.items():
        code = [d for d in stage.get("deps", []) if d.startswith(("src/gpuscale/", f"{deps.LINK_ROOT}/"))]
        out[name] = {f for d in code for f in (deps.linked_files(REPO / d) if (REPO / d).is_dir() else [d])}
    return out


def snakemake_code_deps() -> dict[str, set[str]]:
    """stage -> the code inputs the Snakefile gives its rules (common.smk's CODE is deps.code_files_by_stage)."""
    return {stage: set(files) for stage, files in deps.code_files_by_stage(REPO / "src/gpuscale").items()}


def test_dvc_yaml_code_deps_and_params_are_generated_and_current():
    stale = "dvc.yaml is stale: run `python -m gpuscale.deps --write dvc.yaml`"
    text = (REPO / "dvc.yaml").read_text()
    assert deps.render_dvc(text, deps.study_models(REPO / "params.yaml"), REPO) == text, stale
    stages = yaml.safe_load(text)["stages"]
    for name, stage in stages.items():
        # each stage's keys, read from the merge of params.yaml and the overlays chosen (`gpuscale use`)
        expected = [{deps.params_file(name): deps.STAGE_PARAMS[name]}] if deps.STAGE_PARAMS[name] else []
        assert stage.get("params", []) == expected, name
        code = [d for d in stage["deps"] if d.startswith(("src/", "workflow/"))]
        assert code == [f"workflow/code/{deps.STAGE_COMMANDS[name]}"], name  # one code column in `dvc exp show`
    # Each link folder points at exactly its command's code files, and every link resolves.
    folders = {p.name for p in (REPO / deps.LINK_ROOT).iterdir()}
    assert folders == set(deps.STAGE_COMMANDS.values()), stale
    for stage in deps.STAGE_COMMANDS:
        linked = deps.linked_files(REPO / deps.link_folder(stage))
        assert linked == sorted(deps.code_files(stage, REPO / "src/gpuscale")), f"{stage}: {stale}"
        assert all((REPO / f).is_file() for f in linked), stage


def test_write_links_mirrors_the_package_and_drops_stale_links(tmp_path):
    pkg = make_package(
        tmp_path / "src",
        {
            "__init__.py": "",
            "cli.py": "from gpuscale import params\n",
            "params.py": 'DATA_FILES = ("schemas/p.yaml",)\n',
        },
    )
    (pkg / "schemas").mkdir()
    (pkg / "schemas/p.yaml").write_text("x: 1\n")
    stray = tmp_path / deps.LINK_ROOT / "train/gone.py"
    stray.parent.mkdir(parents=True)
    stray.symlink_to("../../../src/gpuscale/gone.py")
    deps.write_links(tmp_path, pkg)
    folder = tmp_path / deps.link_folder("sweep_batch")
    assert folder == tmp_path / "workflow/code/train"
    expected = [
        "src/gpuscale/__init__.py",
        "src/gpuscale/cli.py",
        "src/gpuscale/params.py",
        "src/gpuscale/schemas/p.yaml",
    ]
    assert deps.linked_files(folder) == expected
    assert (folder / "schemas/p.yaml").read_text() == "x: 1\n"  # relative links: the copy of a repo still resolves
    assert not os.path.isabs(os.readlink(folder / "cli.py"))


def test_training_depends_on_no_analysis_code_and_the_report_side_on_no_training_code():
    train = set(deps.closure("train", REPO / "src/gpuscale"))
    assert {
        "gpuscale.measure.train",
        "gpuscale.measure.loaders",
        "gpuscale.measure.variants",
        "gpuscale.models.nets",
    } <= train
    assert not train & {
        "gpuscale.analyze.aggregate",
        "gpuscale.present.charts",
        "gpuscale.present.report",
        "gpuscale.analyze.analysis",
    }
    for stage in ("aggregate", "charts", "report"):
        closure = set(deps.closure(stage, REPO / "src/gpuscale"))
        assert not closure & {
            "gpuscale.measure.train",
            "gpuscale.measure.loaders",
            "gpuscale.measure.variants",
            "gpuscale.measure.distributed",
        }
    assert "src/gpuscale/present/templates/report.html.j2" in deps.code_files("report", REPO / "src/gpuscale")


def make_package(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "gpuscale"
    for name, text in files.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(textwrap.dedent(text))
    return pkg


def test_closure_follows_lazy_imports_relative_imports_and_declared_data(tmp_path):
    pkg = make_package(
        tmp_path,
        {
            "__init__.py": "",
            "cli.py": """
                from gpuscale import params
                def cmd_train(args):
                    from gpuscale import train
                def cmd_report(args):
                    from gpuscale import report
                def main(args):
                    if args.command in ("report", "charts"):
                        from gpuscale.report import ReportError
            """,
            "params.py": 'DATA_FILES = ("schemas/p.yaml",)\n',
            "train.py": "def f():\n    from . import loaders\n",
            "loaders.py": "import numpy\n",
            "report.py": "",
        },
    )
    assert deps.closure("train", pkg) == [
        "gpuscale",
        "gpuscale.cli",
        "gpuscale.loaders",
        "gpuscale.params",
        "gpuscale.train",
    ]
    assert "gpuscale.report" in deps.closure("report", pkg)
    assert deps.code_files("train", pkg)[-1] == "src/gpuscale/schemas/p.yaml"


def test_closure_with_one_module_per_command(tmp_path):
    """The split CLI: a dispatcher plus gpuscale/commands/<name>.py; the stage's entry is both."""
    pkg = make_package(
        tmp_path,
        {
            "__init__.py": "",
            "cli.py": """
                import importlib
                def main(name):
                    return importlib.import_module(f"gpuscale.commands.{name}").run
            """,
            "commands/__init__.py": "",
            "commands/train.py": "from gpuscale import train\n",
            "commands/report.py": "from gpuscale import report\n",
            "train.py": "",
            "report.py": "",
        },
    )
    assert deps.closure("train", pkg) == [
        "gpuscale",
        "gpuscale.cli",
        "gpuscale.commands",
        "gpuscale.commands.train",
        "gpuscale.train",
    ]
    assert "src/gpuscale/commands/train.py" in deps.code_files("sweep_batch", pkg)


def test_the_closures_are_kept_until_a_module_file_changes(tmp_path, monkeypatch):
    """The Snakefile's cache of every stage's code files (code_files_by_stage): read back without parsing while
    the sources are the same, computed again after an edit that keeps a file's size and mtime, a new module, or
    a damaged cache; a cache that cannot be written costs only the time."""
    pkg = make_package(
        tmp_path,
        {
            "__init__.py": "",
            "cli.py": "def cmd_train(args):\n    from gpuscale import train\n",
            "train.py": "from gpuscale import aaa\nfrom gpuscale import helpers\n",
            "aaa.py": "",
            "bbb.py": "",
        },
    )
    cache = tmp_path / ".snakemake/gpuscale/code-deps.json"
    computed = {stage: deps.code_files(stage, pkg) for stage in deps.STAGE_COMMANDS}
    assert deps.code_files_by_stage(pkg, cache) == computed
    assert json.loads(cache.read_text())["code"] == computed

    def parsed(*args):
        raise AssertionError("parsed again")

    with monkeypatch.context() as patched:
        patched.setattr(deps, "code_files", parsed)
        assert deps.code_files_by_stage(pkg, cache) == computed
    assert "src/gpuscale/aaa.py" in computed["train"]

    train = pkg / "train.py"
    before = train.stat()
    train.write_text(train.read_text().replace("aaa", "bbb"))  # same size; the mtime put back
    os.utime(train, ns=(before.st_atime_ns, before.st_mtime_ns))
    got = deps.code_files_by_stage(pkg, cache)
    assert "src/gpuscale/bbb.py" in got["train"] and "src/gpuscale/aaa.py" not in got["train"]

    (pkg / "helpers.py").write_text("")  # `from gpuscale import helpers` now names a module
    assert "src/gpuscale/helpers.py" in deps.code_files_by_stage(pkg, cache)["train"]

    cache.write_text('{"key": ')
    assert deps.code_files_by_stage(pkg, cache) == {stage: deps.code_files(stage, pkg) for stage in deps.STAGE_COMMANDS}
    assert json.loads(cache.read_text())["code"]["train"][-1] == "src/gpuscale/train.py"

    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert deps.code_files_by_stage(pkg, blocked / "code-deps.json")["train"] == deps.code_files("train", pkg)
    assert sorted(p.name for p in cache.parent.iterdir()) == ["code-deps.json"]  # no partial file left


def test_the_train_rules_params_are_the_keys_dvc_lists(base_params):
    """Snakemake's train params (run_settings, label) are a function of STAGE_PARAMS["train"] alone."""
    config = copy.deepcopy(base_params)
    item = {"model": "resnet18", "variant": "paper"}
    kept = params.select(config, deps.STAGE_PARAMS["train"], item)
    bare: dict = {}
    for key, value in kept.items():
        node = bare
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    assert params.run_settings(bare, "resnet18", "cpu", "paper", 0) == params.run_settings(
        config, "resnet18", "cpu", "paper", 0
    )
    assert bare["study"].get("label") == config["study"].get("label")
    assert params.select(config, ["report.title", "nothing.here"]) == {
        "report.title": config["report"]["title"],
        "nothing.here": None,
    }


@pytest.mark.e2e
def test_every_module_a_stage_imports_is_a_declared_dependency(tmp_path):
    """Each stage command runs in a subprocess that reports the gpuscale modules it imported at exit."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOOK)
    work = tmp_path / "work"
    work.mkdir()
    config = params.deep_merge(yaml.safe_load((REPO / "params.yaml").read_text()), TINY)
    config["report"].update(reference=[], skip_bad_records=True)  # sweeps.* name records not made here
    write_yaml(work / "params.yaml", config)
    commands = {
        "host": ["gpuscale", "host", "--out", "results/host.json"],
        "data": ["gpuscale", "data", "--out", "data/prepared"],
        "train": ["gpuscale", "train", "--model", "simplecnn", "--device", "cpu"],
        "sweep_batch": ["gpuscale", "train", "--model", "simplecnn", "--device", "cuda-7", "--sweep", "batch=8"],
        "aggregate": ["gpuscale", "aggregate", "--out", "results/tables"],
        "charts": ["gpuscale", "charts"],
        "report": ["gpuscale", "report"],
    }
    undeclared = []
    snakemake, dvc = snakemake_code_deps(), dvc_code_deps()
    for stage, argv in commands.items():
        out = tmp_path / f"{stage}.json"
        extra = {"PYTHONPATH": os.pathsep.join([str(hook), str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
        env = {**tool_env(), **extra, "GPUSCALE_IMPORTS_OUT": str(out)}
        done = subprocess.run(argv, cwd=work, env=env, text=True, capture_output=True, check=False)
        assert done.returncode == 0, f"{argv}: {done.stderr[-3000:]}"
        imported = json.loads(out.read_text())
        files = {f"src/gpuscale/{Path(f).relative_to(REPO / 'src/gpuscale').as_posix()}" for f in imported.values()}
        for tool, declared in (("snakemake", snakemake[stage]), ("dvc", dvc[stage])):
            undeclared += [f"{tool} {stage}: {f}" for f in sorted(files - declared)]
    assert not undeclared, "imported but not declared:\n" + "\n".join(undeclared)
