"""research/ sits beside the package: its scripts may import gpuscale, gpuscale never imports research
(pyproject.toml's import-linter contract, run here on the real tree and on a copy that breaks it)."""

from __future__ import annotations

import py_compile
import shutil
import subprocess
import tomllib

import pytest
from conftest import REPO

NAME = "The package never imports the project's research scripts (research/ may import gpuscale)"


def contract() -> dict:
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if c["name"] == NAME)


def lint(root, env=None) -> subprocess.CompletedProcess:
    tool = shutil.which("lint-imports")
    if tool is None:
        pytest.skip("import-linter is not installed (the test extra has it)")
    return subprocess.run([tool, "--no-cache"], cwd=root, capture_output=True, text=True, check=False, env=env)


def test_the_contract_forbids_research_to_the_whole_package():
    c = contract()
    assert c["type"] == "forbidden" and c["source_modules"] == ["gpuscale"] and c["forbidden_modules"] == ["research"]
    done = lint(REPO)
    assert f"{NAME} KEPT" in " ".join(done.stdout.split()), done.stdout[-3000:]


def test_the_contract_breaks_when_the_package_imports_research(tmp_path):
    """The same contract over a copy of the package with one module importing research/ (deferred, as a sneaky
    import would be) is BROKEN: the check can fail."""
    shutil.copytree(REPO / "src" / "gpuscale", tmp_path / "src" / "gpuscale", ignore=shutil.ignore_patterns("*.pyc"))
    (tmp_path / "src" / "gpuscale" / "sneaky.py").write_text("def f():\n    from research.prediction import x\n")
    toml = REPO / "pyproject.toml"
    settings = tomllib.loads(toml.read_text())["tool"]["importlinter"]
    (tmp_path / ".importlinter").write_text(
        "[importlinter]\n"
        f"root_package = {settings['root_package']}\ninclude_external_packages = True\n\n"
        "[importlinter:contract:research]\n"
        f"name = {NAME}\ntype = forbidden\nsource_modules = gpuscale\nforbidden_modules = research\n"
    )
    import os

    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}
    done = lint(tmp_path, env)
    assert done.returncode != 0, done.stdout
    assert "gpuscale.sneaky -> research" in done.stdout


@pytest.mark.parametrize("script", sorted((REPO / "research").rglob("*.py")), ids=lambda p: p.name)
def test_research_scripts_compile(script, tmp_path):
    py_compile.compile(str(script), cfile=str(tmp_path / "x.pyc"), doraise=True)
