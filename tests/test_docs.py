"""Generated documentation stays generated: README.md's headline block and docs/params.md's reference match what
gpuscale.present.docs gives from the reference study's records and the params schema today."""

from __future__ import annotations

import re

from conftest import REPO

from gpuscale.analyze import aggregate
from gpuscale.present import docs

HOW = "rebuild with: reference/report.sh reference/h200-2026-12-04"


def test_readme_headline_block_is_the_reference_study_as_its_records_say(tmp_path):
    aggregate.run([], [docs.REFERENCE], tmp_path / "tables", tmp_path / "metrics.json", 0.02)
    expected = docs.readme_headline(aggregate.read_tables(tmp_path / "tables"))
    assert docs.block("headline", (REPO / "README.md").read_text()) == expected, HOW


def test_params_reference_is_generated_from_the_schema():
    assert docs.block("params", (REPO / "docs" / "params.md").read_text()) == docs.params_reference(), HOW
    every_key = docs.params_reference()
    for key in ("study.models", "train.epochs", "report.accuracy_tolerance", "runtime.resume"):
        assert f"`{key}`" in every_key


def test_readme_is_a_front_door_whose_links_resolve():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 160
    assert "make reproduce" in text and "make test" in text and "config/quick.yaml" in text
    for target in re.findall(r"\]\(([^)#]+)", text):
        if not target.startswith("http"):
            assert (REPO / target).exists(), target
    for page in ("methodology", "params", "faults", "install", "cluster", "prediction"):
        assert f"docs/{page}.md" in text


def _resolves(name: str) -> bool:
    """A dotted name is a module of the package, or an attribute reached from the longest module it starts with."""
    import importlib

    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_every_module_the_docs_name_exists():
    """docs/faults.md named `gpuscale.data` and `gpuscale.docs` for months after the stage folders moved them: each
    dotted `gpuscale.` name in the README and docs/ must still import (a module, or an attribute of one)."""
    dotted = re.compile(r"\bgpuscale(?:\.[A-Za-z_]\w*)+")
    named = {
        (path.name, m.group(0))
        for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
        for m in dotted.finditer(path.read_text())
    }
    assert len(named) > 10  # the scan finds what the docs name
    assert [n for n in sorted(named) if not _resolves(n[1])] == []
    assert not _resolves("gpuscale.data") and not _resolves("gpuscale.inputs.data.nothing_here")
