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
    assert len(text.splitlines()) <= 120
    assert "make reproduce" in text and "make test" in text and "config/quick.yaml" in text
    for target in re.findall(r"\]\(([^)#]+)", text):
        if not target.startswith("http"):
            assert (REPO / target).exists(), target
    for page in ("methodology", "params", "faults", "install", "cluster", "prediction", "conditions"):
        assert f"docs/{page}.md" in text
    for word in ("lease", "sentinel", "drifted", "sampled"):  # the report's words, explained where met
        assert f"**{word}" in text, word


# A measured figure as prose quotes it: a percentage or a ratio (12.2x, 12.2×), not a count or a size (4096 x 4096).
FIGURE = re.compile(r"(?<![\w.\-–])(\d+(?:\.\d+)?)\s?(%|(?:×|x(?!\w))(?!\s*\d))")
BLOCK = re.compile(r"<!-- BEGIN generated:(\w+) [^>]*-->\n.*?<!-- END generated:\1 -->", flags=re.S)
FENCE = re.compile(r"```.*?```", flags=re.S)


def figures(text: str) -> set[str]:
    return {number + ("×" if unit in "x×" else unit) for number, unit in FIGURE.findall(text)}


def quoted_outside_blocks(text: str) -> set[str]:
    """The figures a page quotes in its prose, none of which its generated blocks give."""
    generated = figures("".join(m.group(0) for m in BLOCK.finditer(text)))
    return figures(FENCE.sub("", BLOCK.sub("", text))) - generated


def test_every_figure_the_readme_quotes_comes_from_a_generated_block():
    """A number in the README's prose must be one its generated blocks give (they are checked against their
    generator above), so a figure cannot be copied in by hand and then drift from the records."""
    text = (REPO / "README.md").read_text()
    assert figures(text) and docs.block("headline", text)  # the scan finds the block's figures
    assert quoted_outside_blocks(text) == set()


def test_a_figure_quoted_by_hand_is_caught():
    block = "<!-- BEGIN generated:x (y) -->\n- resnet50: 12.2× against 40.6×, 95% CI.\n<!-- END generated:x -->\n"
    assert quoted_outside_blocks(block + "The paper's 40.6x and the 95% interval.") == set()
    assert quoted_outside_blocks(block + "resnet50 gains 12.3x here, 17% off.") == {"12.3×", "17%"}
    assert quoted_outside_blocks("```\ndvc exp run -S x=50%\n```\nbatch 128, 2 workers, 4096 x 4096") == set()


def test_the_user_pages_quote_no_figure_by_hand():
    """docs/conditions.md, install.md, cluster.md and methodology.md quote no measured figure in prose: only what the
    code sets (the drift floor, read here from the code, so that the page and the rule cannot part) and definitions."""
    from gpuscale.contract import conditions

    settings = {f"{conditions.DRIFT_FLOOR * 100:g}%"}
    assert settings <= figures((REPO / "docs" / "conditions.md").read_text())  # the page states the floor the code has
    for page in ("conditions", "install", "cluster"):
        text = (REPO / "docs" / f"{page}.md").read_text()
        assert quoted_outside_blocks(text) - settings == set(), page
    # methodology's figures are definitions (the bootstrap's 95% and its 2.5% / 97.5% quantiles, a log spread of
    # 0.10 read as about 10%) and its worked example (7.10 x ...), not measurements
    definitions = {"95%", "2.5%", "97.5%", "10%", "7.10×"}
    assert quoted_outside_blocks((REPO / "docs" / "methodology.md").read_text()) - definitions == set()


def test_the_docs_quote_no_cost_model_error_by_hand():
    """The prediction's errors (median, worst, share inside the band) change whenever the calibration leases do:
    the README and the user-facing pages leave them to the report and docs/prediction.md, which compute them."""
    for page in ("README.md", "docs/methodology.md", "docs/conditions.md", "docs/install.md", "docs/cluster.md"):
        text = (REPO / page).read_text()
        assert not re.search(r"errs? \d+(\.\d+)?% median", text), page


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
