"""Models named by spec (gpuscale.models.spec): each form builds a 10-class model through the registry's door, each
bad spec ends in one line and exit 2, and the user's file is an input of that model's jobs only."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from conftest import REPO, TINY, copy_project, run, write_yaml

from gpuscale import cli
from gpuscale.contract import params, record
from gpuscale.models import registry, spec, specbuild

NET = """
from torch import nn


def build(num_classes=10):
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(4, num_classes))


def fixed():  # no num_classes: 10 outputs
    return build(10)


def raises():
    raise RuntimeError("no weights here")


def not_a_module():
    return 42


def too_few_outputs():
    return build(3)


def fails_on_32():
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 64 * 64, 10))


class _NoParameters(nn.Module):
    def forward(self, x):
        return x.mean(dim=(1, 2))[:, :10]


def no_parameters():
    return _NoParameters()


def frozen():
    return build().requires_grad_(False)


def exits():
    import sys

    sys.exit(0)


class _Wrapped(nn.Module):  # build()'s network; the bad forms below change one thing of it
    def __init__(self):
        super().__init__()
        self.net = build()

    def forward(self, x):
        return self.net(x)


class _WithAux(_Wrapped):
    def forward(self, x):
        out = self.net(x)
        return out, out


def with_aux():
    return _WithAux()


class _FixedBatch(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3 * 32 * 32, 10)

    def forward(self, x):
        return self.fc(x.view(2, -1))


def fixed_batch():
    return _FixedBatch()


class _TrainOnly(_Wrapped):
    def forward(self, x):
        if not self.training:
            raise RuntimeError("only trains")
        return self.net(x)


def train_only():
    return _TrainOnly()


def prints():
    print("building the net")
    return build()


class _PrintsForward(_Wrapped):
    def forward(self, x):
        print("FORWARD CALLED")
        return self.net(x)


def prints_forward():
    return _PrintsForward()


def threads_one():
    import torch

    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    return build().float()


def lazy():
    return nn.Sequential(nn.Flatten(), nn.LazyLinear(10))


class _Locked(_Wrapped):
    def __init__(self):
        super().__init__()
        import threading

        self.lock = threading.Lock()


def locked():
    return _Locked()


class _Stop(BaseException):
    pass


def base_exception():
    raise _Stop("not an Exception")


instance = build()
"""

DEFINES = """
from torch import nn
from typing import Callable


def _net(num_classes=10):
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, num_classes))


try:
    from fastnets import build_try  # not installed: the fallback below
except ImportError:
    def build_try():
        return _net()

if True:
    def build_if():
        return _net()

build_ann: Callable = _net
build_a, build_b = _net, _net
"""


@pytest.fixture
def netfile(tmp_path, monkeypatch) -> Path:
    """A model file inside the project (the folder the command runs in): a file outside it is refused."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "tinynet.py"
    path.write_text(NET)
    return path


@pytest.fixture
def netpackage(tmp_path, monkeypatch) -> str:
    package = tmp_path / "pkgroot" / "mypkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "nets.py").write_text(NET)
    monkeypatch.syspath_prepend(str(package.parent))
    return "mypkg.nets"


def test_each_spec_form_builds_a_ten_class_network_through_the_registry(netfile, netpackage):
    import torch

    for name in (
        "torchvision:squeezenet1_0",
        f"{netpackage}:build",
        f"{netfile}:build",
        f"{netfile}:fixed",
    ):
        registry.check(name)
        model = specbuild.preflight(name)
        assert registry.get(name).family == "custom"
        out = registry.build(name)(torch.randn(2, 3, 32, 32))
        assert out.shape == (2, 10), name
        assert isinstance(model, torch.nn.Module)
    assert registry.build("simplecnn") is not None  # registry names keep working


def test_a_spec_s_folder_name_is_a_safe_slug_and_its_record_keeps_the_spec():
    assert spec.slug("simplecnn") == "simplecnn"
    assert spec.slug("examples/mynet.py:build") == "examples-mynet-py-build"
    assert spec.slug("torchvision:mobilenet_v3_small") == "torchvision-mobilenet_v3_small"
    assert params.record_path("examples/mynet.py:build", "cpu", "paper", 0) == (
        "results/runs/examples-mynet-py-build/cpu/paper-seed0.json"
    )
    assert spec.files("examples/mynet.py:build") == ["examples/mynet.py"]
    assert spec.files("torchvision:resnet18") == spec.files("simplecnn") == []


def test_timm_builds_or_says_in_one_line_how_to_install_it():
    try:
        import timm  # noqa: F401
    except ImportError:
        with pytest.raises(
            spec.SpecError, match=r"timm is not installed; make timm \(pip install -r requirements/timm.txt"
        ):
            specbuild.preflight("timm:resnet18")
        return
    assert specbuild.preflight("timm:resnet18") is not None
    with pytest.raises(spec.SpecError, match="timm has no model 'resnet19'; did you mean"):
        specbuild.preflight("timm:resnet19")


def _validate(tmp_path, models: list[str], capsys) -> tuple[int, str]:
    overlay = write_yaml(tmp_path / "overlay.yaml", {**TINY, "study": {**TINY["study"], "models": models}})
    argv = ["validate", "--params", str(REPO / "params.yaml"), "--params", str(overlay)]
    # sys.argv as the command has it (a pytest-xdist worker's own argv is empty: a spec parsing it on import passed)
    saved, sys.argv = sys.argv, ["gpuscale", *argv]
    try:
        code = cli.main(argv)
    finally:
        sys.argv = saved
    return code, capsys.readouterr().err


BAD = {
    "unknown builder": ("torchvision:resnt18", "torchvision has no classification builder 'resnt18'; did you mean"),
    "module not importable": ("nosuchpkg.nets:build", "module nosuchpkg.nets is not importable"),
    "function missing": ("{file}:nope", "defines no nope; name a function that returns the model"),
    "function raises": ("{file}:raises", "raises() raised RuntimeError: no weights here"),
    "not a module": ("{file}:not_a_module", "not_a_module() returned int, not a torch.nn.Module"),
    "fails on 32x32": ("{file}:fails_on_32", "fails on a batch of 32x32 images: RuntimeError"),
    "wrong outputs": ("{file}:too_few_outputs", "gives shape (2, 3) for 2 images, not (2, 10)"),
    "missing file": ("{missing}:build", "missing.py does not exist"),
    "no parameters": ("{file}:no_parameters", "has no trainable parameters"),
    "all parameters frozen": ("{file}:frozen", "has no trainable parameters (none, or all frozen)"),
    "sys.exit in the builder": ("{file}:exits", "exits(): it called sys.exit(0); a model's code must not exit"),
    "auxiliary outputs": ("{file}:with_aux", "returns tuple in training mode, not one tensor of logits (2, 10)"),
    "batch size written in": ("{file}:fixed_batch", "fails on 3 images in evaluation mode: RuntimeError"),
    "fails in evaluation mode": ("{file}:train_only", "fails on 3 images in evaluation mode: RuntimeError: only"),
    "exits on import": ("{exits_on_import}:build", "fails on import: it called sys.exit(3)"),
    "parses our command line on import": (
        "{argparse_on_import}:build",
        "it called sys.exit(2); a model's code must not exit (it printed: ",
    ),
    "package fails on import": ("brokenpkg.nets:build", "its package fails on import: RuntimeError: init fails"),
    "a lazy module": ("{file}:lazy", "cannot be counted or copied: ValueError"),
    "a module holding a lock": ("{file}:locked", "cannot be counted or copied: TypeError"),
    "a BaseException": ("{file}:base_exception", "base_exception() raised _Stop: not an Exception"),
    "malformed": ("examples/mynet:build", "is neither a .py file nor a dotted module name"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_spec_ends_in_one_line_and_exit_2(case, netfile, tmp_path, capsys):
    name, expected = BAD[case]
    (tmp_path / "exits_on_import.py").write_text("import sys\n\nsys.exit(3)\n\n\ndef build():\n    pass\n")
    (tmp_path / "argparse_on_import.py").write_text(
        "import argparse\n\nargparse.ArgumentParser().parse_args()\n\n\ndef build():\n    pass\n"
    )
    (tmp_path / "brokenpkg").mkdir()
    (tmp_path / "brokenpkg" / "__init__.py").write_text("raise RuntimeError('init fails')\n")
    (tmp_path / "brokenpkg" / "nets.py").write_text("def build():\n    pass\n")
    name = name.format(
        file=netfile,
        missing=tmp_path / "missing.py",
        exits_on_import="exits_on_import.py",
        argparse_on_import="argparse_on_import.py",
    )
    code, err = _validate(tmp_path, ["simplecnn", name], capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "study.models.1" in err and expected in err, err


def test_a_file_in_another_encoding_and_a_module_of_the_project_are_specs_like_any_other(tmp_path, monkeypatch):
    """A file declaring latin-1 was read as UTF-8 (a traceback); a module inside the project resolved under
    `python -m gpuscale` (the working folder on sys.path) and not from the `gpuscale` script the jobs run."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "latin.py").write_bytes(("# -*- coding: latin-1 -*-\n# caf\xe9\n" + NET).encode("latin-1"))
    registry.check("latin.py:build")
    assert specbuild.preflight("latin.py:build") is not None
    (tmp_path / "projnets").mkdir()
    (tmp_path / "projnets" / "__init__.py").write_text("")
    (tmp_path / "projnets" / "small.py").write_text(NET)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    registry.check("projnets.small:build")
    assert specbuild.preflight("projnets.small:build") is not None
    assert spec.files("projnets.small:build") == ["projnets/small.py", "projnets/__init__.py"]


def test_a_helper_module_the_file_imports_is_one_of_its_sources(tmp_path, monkeypatch):
    """The facts were keyed on the named file alone: an edit to a helper it imports left them stale, and no job
    reran. Its project-local imports, at any depth, are its sources: the cache's key, Snakemake's inputs, DVC's
    deps."""
    from gpuscale.models import facts

    monkeypatch.chdir(tmp_path)
    (tmp_path / "widths.py").write_text("WIDTH = 8\n")
    (tmp_path / "layers.py").write_text("from widths import WIDTH\n")
    (tmp_path / "net.py").write_text(
        "import os\nimport layers\nfrom torch import nn\n\n\ndef build():\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, layers.WIDTH), nn.Linear(layers.WIDTH, 10))\n"
    )
    name = "net.py:build"
    assert spec.files(name) == ["net.py", "layers.py", "widths.py"]  # os and torch are not the project's
    first = facts.spec_facts(name, tmp_path / "facts")
    assert spec.read_facts(name, tmp_path / "facts") == first
    (tmp_path / "widths.py").write_text("WIDTH = 16\n")
    assert spec.read_facts(name, tmp_path / "facts") is None  # stale: a helper changed


def test_what_a_builder_prints_goes_to_stderr_not_where_a_command_answers(netfile, capsys):
    specbuild.build(f"{netfile}:prints")
    out, err = capsys.readouterr()
    assert out == "" and "building the net" in err


def test_two_models_sharing_a_folder_name_are_refused_across_the_study_and_the_sweeps(tmp_path, netfile):
    """A clash inside study.models was refused; one between study.models and sweeps.models ran the sweep's model
    in the study's jobs."""
    (tmp_path / "a-b.py").write_text(NET)
    (tmp_path / "a.b.py").write_text(NET)
    config = params.deep_merge(yaml.safe_load((REPO / "params.yaml").read_text()), TINY)
    config["study"]["models"] = ["a-b.py:build"]
    config["sweeps"]["models"] = ["a.b.py:build"]
    with pytest.raises(params.ParamsError, match=r"sweeps\.models\.0: 'a\.b\.py:build' and 'a-b\.py:build' share"):
        params.validate(config)


def test_a_spec_with_a_space_is_refused_saying_so(tmp_path, netfile):
    config = params.deep_merge(yaml.safe_load((REPO / "params.yaml").read_text()), TINY)
    config["study"]["models"] = ["my nets/net.py:build"]
    with pytest.raises(params.ParamsError, match=r"study\.models\.0: .* holds a space.*rename the file or folder"):
        params.validate(config)


def test_validate_builds_a_spec_named_as_an_override_s_key(tmp_path, capsys, netfile):
    """models: {torchvision:resnt18: ...} was accepted, and never applied."""
    overlay = write_yaml(tmp_path / "o.yaml", {**TINY, "models": {"torchvision:resnt18": {"epochs": 1}}})
    code = cli.main(["validate", "--params", str(REPO / "params.yaml"), "--params", str(overlay)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "models.torchvision:resnt18: model spec" in err and "did you mean" in err, err


@pytest.mark.parametrize("command", ["probe", "estimate"])
def test_probe_and_estimate_refuse_a_bad_spec_in_one_line_before_any_timing(command, tmp_path, netfile, capsys):
    overlay = write_yaml(tmp_path / "o.yaml", {**TINY, "study": {**TINY["study"], "models": [f"{netfile}:raises"]}})
    argv = [command, "--params", str(REPO / "params.yaml"), "--params", str(overlay)]
    argv += ["--device", "cpu", "--out", str(tmp_path / "p.json")] if command == "probe" else []
    if command == "estimate":
        (tmp_path / "probes").mkdir()
        argv += ["--probes", str(tmp_path / "probes")]
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "study.models.0: model spec" in err and "raises() raised RuntimeError" in err, err
    assert not (tmp_path / "p.json").exists()


def test_an_empty_model_is_refused_not_read_as_no_model(capsys):
    code = cli.main(["predict", "--params", str(REPO / "params.yaml"), "--model", ""])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--model: '' is not allowed" in err, err


def test_torch_s_settings_a_builder_changes_are_set_back_with_a_note(netfile, capsys):
    """A builder calling torch.set_num_threads(1) had every epoch timed on one thread, the record none the wiser."""
    import torch

    before = torch.get_num_threads(), torch.get_default_dtype()
    torch.set_num_threads(2)  # whatever an earlier test left: the builder's must differ
    torch.set_default_dtype(torch.float32)
    try:
        specbuild.preflight(f"{netfile}:threads_one")
        assert torch.get_num_threads() == 2 and torch.get_default_dtype() == torch.float32
    finally:
        torch.set_num_threads(before[0])
        torch.set_default_dtype(before[1])
    err = capsys.readouterr().err
    assert "changed torch's threads 2 -> 1" in err and "default dtype torch.float32 -> torch.float64" in err


def test_what_a_forward_prints_while_counted_stays_off_stdout(netfile, tmp_path, capsys):
    from gpuscale.models import facts

    facts.spec_facts(f"{netfile}:prints_forward", tmp_path / "facts")
    out, err = capsys.readouterr()
    assert out == "" and "FORWARD CALLED" in err


def test_a_network_instance_at_the_top_level_is_taken_as_the_model(netfile):
    assert specbuild.preflight(f"{netfile}:instance") is not None


@pytest.mark.parametrize("function", ["build_try", "build_if", "build_ann", "build_a", "build_b"])
def test_a_function_bound_in_a_block_or_by_annotation_or_unpacking_is_found(function, tmp_path, monkeypatch):
    """The torch-free check found only a plain def or assignment at the top level, and refused these."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "defs.py").write_text(DEFINES)
    registry.check(f"defs.py:{function}")
    assert specbuild.preflight(f"defs.py:{function}") is not None


def test_a_module_spec_s_relative_imports_are_its_sources(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    package = tmp_path / "relpkg"
    (package / "parts").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "parts" / "__init__.py").write_text("")
    (package / "parts" / "widths.py").write_text("WIDTH = 4\n")
    (package / "blocks.py").write_text("from .parts.widths import WIDTH\n")
    (package / "net.py").write_text("from . import blocks\n" + NET)
    files = spec.files("relpkg.net:build")
    assert files[0] == "relpkg/net.py" and len(files) == len(set(files))
    assert set(files) == {
        "relpkg/net.py",
        "relpkg/__init__.py",
        "relpkg/blocks.py",
        "relpkg/parts/widths.py",
        "relpkg/parts/__init__.py",
    }


def test_a_long_spec_s_folder_name_is_cut_and_ends_in_a_hash_of_the_whole():
    name = "models/" + "a" * 120 + ".py:build"
    short = spec.slug(name)
    assert len(short) == spec.SLUG_MAX and short.startswith("models-aaa") and short != spec.slug(name + "2")
    assert spec.slug("examples/mynet.py:build") == "examples-mynet-py-build"  # short ones as they were


def test_a_brace_in_a_spec_s_path_is_refused_saying_so(tmp_path):
    config = params.deep_merge(yaml.safe_load((REPO / "params.yaml").read_text()), TINY)
    config["study"]["models"] = ["net{1}.py:build"]
    with pytest.raises(params.ParamsError, match=r"study\.models\.0: .* holds a brace.*rename the file or folder"):
        params.validate(config)


def test_train_refuses_a_spec_its_record_cannot_hold_before_any_timing(tmp_path, capsys, prepared, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my nets").mkdir()
    (tmp_path / "my nets" / "net.py").write_text(NET)
    code = cli.main(["train", "--params", str(REPO / "params.yaml"), "--model", "my nets/net.py:build",
                     "--device", "cpu", "--data", str(prepared), "--out", str(tmp_path / "r.json")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "cannot be a run record's model" in err, err
    assert not (tmp_path / "r.json").exists()


def test_validate_notes_a_spec_in_params_yaml_that_dvc_yaml_has_no_stages_for(tmp_path):
    """dvc repro failed with DVC's own "Parameters 'models.examples/mynet.py:build' are missing", naming no fix."""
    from gpuscale.commands import validate

    params_path, dvc_path = tmp_path / "params.yaml", tmp_path / "dvc.yaml"
    write_yaml(params_path, {"study": {"models": ["simplecnn", "examples/mynet.py:build"]}, "sweeps": {"models": []}})
    write_yaml(dvc_path, {"stages": {"train": {"cmd": "gpuscale train"}}})
    (note,) = validate.dvc_notes(params_path, dvc_path)
    assert "no stages for 'examples/mynet.py:build'" in note and "python -m gpuscale.deps --write dvc.yaml" in note
    stage = spec.dvc_stage("train", "examples/mynet.py:build")
    assert stage == "train-examples-mynet-py-build"
    write_yaml(dvc_path, {"stages": {"train": {"cmd": "gpuscale train"}, stage: {"cmd": "gpuscale train"}}})
    assert validate.dvc_notes(params_path, dvc_path) == []
    write_yaml(params_path, {"study": {"models": ["simplecnn"]}})
    assert validate.dvc_notes(params_path, tmp_path / "none.yaml") == []  # no DVC: nothing to say


def test_a_bad_spec_is_refused_by_train_before_any_timing(netfile, tmp_path, capsys, prepared):
    code = cli.main(["train", "--params", str(REPO / "params.yaml"), "--model", f"{netfile}:too_few_outputs",
                     "--device", "cpu", "--data", str(prepared), "--out", str(tmp_path / "r.json")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--model: model spec" in err and "not (2, 10)" in err
    assert not (tmp_path / "r.json").exists()


def test_params_validation_is_torch_free_and_names_the_key(tmp_path, netfile):
    config = params.deep_merge(yaml.safe_load((REPO / "params.yaml").read_text()), TINY)
    config["study"]["models"] = ["simplecnn", f"{netfile}:build"]
    params.validate(config)
    config["study"]["models"] = ["simplecnn", f"{netfile}:nope"]
    with pytest.raises(params.ParamsError, match=r"study\.models\.1: model spec .* defines no nope"):
        params.validate(config)


def test_a_spec_s_facts_are_counted_once_and_again_after_an_edit(netfile, tmp_path):
    from gpuscale.models import facts

    name, folder = f"{netfile}:build", tmp_path / "facts"
    first = facts.spec_facts(name, folder)
    assert first["parameters"] == 3 * 4 * 9 + 4 + 4 * 10 + 10 and first["train_flops_per_image"] > 0
    doc = json.loads(spec.facts_path(name, folder).read_text())
    assert doc["spec"] == name and doc["sha256"] == spec.file_sha256(name)
    assert spec.read_facts(name, folder) == first
    netfile.write_text(NET.replace("nn.Conv2d(3, 4, 3, padding=1)", "nn.Conv2d(3, 4, 3, padding=1, bias=False)"))
    assert spec.read_facts(name, folder) is None  # stale: the file changed
    assert facts.spec_facts(name, folder)["parameters"] == first["parameters"] - 4
    assert json.loads((REPO / "src/gpuscale/models/modelfacts.json").read_text())["models"].keys() == set(
        registry.MODEL_NAMES
    )


def test_the_probe_s_layer_table_times_a_spec_model(netfile):
    import torch

    from gpuscale.measure import probe

    name = f"{netfile}:build"
    table = probe.layer_table(torch.device("cpu"), 4, 30.0, names=[name])
    assert table["models"][name]["layer_calls"] > 0 and table["models_not_timed"] == []


def test_train_records_the_spec_under_its_slug(prepared, tmp_path, capsys, monkeypatch):
    example = tmp_path / "examples" / "mynet.py"
    example.parent.mkdir()
    shutil.copy(REPO / "examples/mynet.py", example)
    monkeypatch.chdir(tmp_path)
    overlay = write_yaml(tmp_path / "o.yaml", {**TINY, "train": {**TINY["train"], "epochs": 1}})
    name = "examples/mynet.py:build"
    code = cli.main(["train", "--params", str(REPO / "params.yaml"), "--params", str(overlay), "--model", name,
                     "--device", "cpu", "--data", str(prepared), "--threads", "1"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    doc = record.load(tmp_path / "results/runs/examples-mynet-py-build/cpu/paper-seed0.json")
    assert doc["model"]["name"] == name and doc["key"]["model"] == name
    assert doc["model"]["parameters"] == 20138


DAG_INPUTS = """
import asyncio, json
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import DAGSettings, OutputSettings, ResourceSettings, StorageSettings
with SnakemakeApi(OutputSettings()) as api:
    wf = api.workflow(resource_settings=ResourceSettings(cores=1), storage_settings=StorageSettings(),
                      snakefile=Path("Snakefile"), workdir=Path("."))
    dag_api = wf.dag(dag_settings=DAGSettings())
    workflow = dag_api.workflow_api._workflow
    workflow.dag_settings = dag_api.dag_settings
    workflow._prepare_dag(forceall=False, ignore_incomplete=True, lock_warn_only=True, nolock=True)
    built = workflow._build_dag()
    if asyncio.iscoroutine(built):
        asyncio.run(built)
    print("JOBS " + json.dumps({o: sorted(map(str, job.input)) for job in workflow.dag.jobs for o in job.output}))
"""


def _job_inputs(repo: Path) -> dict[str, set[str]]:
    """Every job's output -> its input files, from the DAG Snakemake builds (nothing runs)."""
    done = run([sys.executable, "-c", DAG_INPUTS], repo)
    line = next(line for line in done.stdout.splitlines() if line.startswith("JOBS "))
    return {output: set(inputs) for output, inputs in json.loads(line[len("JOBS ") :]).items()}


@pytest.mark.e2e
def test_snakemake_makes_the_user_s_file_an_input_of_that_model_s_jobs_only(tmp_path):
    repo = copy_project(tmp_path / "repo")
    (repo / "examples/other.py").write_text(textwrap.dedent(NET))
    config = params.deep_merge(yaml.safe_load((repo / "params.yaml").read_text()), TINY)
    config["study"]["models"] = ["simplecnn", "examples/mynet.py:build", "examples/other.py:build"]
    write_yaml(repo / "params.yaml", config)
    jobs = _job_inputs(repo)
    mine = jobs["results/runs/examples-mynet-py-build/cpu/paper-seed0.json"]
    other = jobs["results/runs/examples-other-py-build/cpu/paper-seed0.json"]
    registry_model = jobs["results/runs/simplecnn/cpu/paper-seed0.json"]
    assert "examples/mynet.py" in mine and "examples/other.py" not in mine
    assert "examples/other.py" in other and "examples/mynet.py" not in other
    assert not {"examples/mynet.py", "examples/other.py"} & registry_model
    assert {"examples/mynet.py", "examples/other.py"} <= jobs["results/probe/cpu.json"]


# ----------------------------------------------------------------------------- DVC: a spec model's own stages

SPEC_STUDY = {"study.models": ["simplecnn", "examples/mynet.py:build"], "sweeps.models": ["examples/mynet.py:build"]}


def test_dvc_yaml_gives_a_spec_model_stages_under_its_slug_and_takes_them_back():
    from gpuscale import deps

    text = (REPO / "dvc.yaml").read_text()
    written = deps.render_dvc(text, SPEC_STUDY, REPO)
    stages = yaml.safe_load(written)["stages"]
    assert stages["train"]["matrix"]["model"] == ["simplecnn"]  # the registry names; their stage names unchanged
    assert stages["sweep_threads"]["matrix"]["model"] == []
    mine = stages["train-examples-mynet-py-build"]
    assert "model" not in mine["matrix"]
    assert "--model examples/mynet.py:build " in mine["cmd"] and "${item.model}" not in mine["cmd"]
    assert mine["outs"] == ["results/runs/examples-mynet-py-build/${item.device}/${item.variant}-seed${item.seed}.json"]
    assert "examples/mynet.py" in mine["deps"] and "examples/mynet.py" not in stages["train"]["deps"]
    # DVC splits keys at '.': the spec cannot be named, the section is (in the merged params every stage reads)
    assert "models" in mine["params"][0][".gpuscale/params.yaml"]
    assert "examples/mynet.py" in stages["sweep_batch-examples-mynet-py-build"]["deps"]
    assert "examples/mynet.py" in stages["probe"]["deps"] and "examples/mynet.py" in stages["predict"]["deps"]
    assert "examples/mynet.py" not in stages["aggregate"]["deps"]
    assert deps.render_dvc(written, SPEC_STUDY, REPO) == written  # --write twice changes nothing
    assert deps.render_dvc(written, {}, REPO) == text  # the spec gone from params.yaml: dvc.yaml as before


def test_train_refuses_a_record_path_that_names_the_spec_as_a_stale_dvc_yaml_would(prepared, tmp_path, capsys):
    out = tmp_path / "results/runs/examples/mynet.py:build/cpu/paper-seed0.json"
    code = cli.main(["train", "--params", str(REPO / "params.yaml"), "--model", "examples/mynet.py:build",
                     "--device", "cpu", "--data", str(prepared), "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "python -m gpuscale.deps --write dvc.yaml" in err and "examples-mynet-py-build" in err
    assert not out.exists()


@pytest.mark.e2e
def test_dvc_reruns_only_the_spec_model_s_training_after_an_edit_to_its_file(tmp_path):
    """dvc.yaml written for a study with a spec: `dvc repro` of the trains, then an edit to the user's file changes
    that model's train stage (and the probe and predict, which read every model) and not the registry model's."""
    repo = copy_project(tmp_path / "repo", git=True)
    config = params.deep_merge(yaml.safe_load((repo / "params.yaml").read_text()), TINY)
    config["study"]["models"] = ["simplecnn", "examples/mynet.py:build"]
    config["train"]["epochs"] = 1
    write_yaml(repo / "params.yaml", config)
    run([sys.executable, "-m", "gpuscale.deps", "--write", "dvc.yaml"], repo)
    run(["git", "add", "-A"], repo)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "spec"], repo)
    trains = ["train@simplecnn-cpu-paper-0", "train-examples-mynet-py-build@cpu-paper-0"]
    run(["dvc", "repro", *trains], repo)
    doc = record.load(repo / "results/runs/examples-mynet-py-build/cpu/paper-seed0.json")
    assert doc["model"]["name"] == "examples/mynet.py:build"
    assert (repo / "results/runs/simplecnn/cpu/paper-seed0.json").is_file()

    with (repo / "examples/mynet.py").open("a") as fh:
        fh.write("# an edit to the user's model\n")
    changed = set(json.loads(run(["dvc", "status", "--json"], repo).stdout or "{}")) - {"host"}
    assert changed & set(trains) == {trains[1]}, changed  # the registry model's training stays cached
    assert {"probe@cpu", "predict"} <= changed
    out = run(["dvc", "repro", *trains], repo).stdout
    assert f"Running stage '{trains[1]}'" in out and f"Running stage '{trains[0]}'" not in out, out


def test_gpuscale_models_lists_the_study_s_models_named_by_spec(tmp_path, monkeypatch):
    import argparse

    from gpuscale.commands import models as models_command

    monkeypatch.chdir(REPO)
    overlay = write_yaml(tmp_path / "o.yaml", {"study": {"models": ["simplecnn", "examples/mynet.py:build"]}})
    args = argparse.Namespace(params=[str(REPO / "params.yaml"), str(overlay)])
    assert models_command.spec_models(args) == ["examples/mynet.py:build"]
    assert models_command.spec_models(argparse.Namespace(params=[str(REPO / "params.yaml")])) == []
