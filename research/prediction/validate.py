"""How far the prediction errs on the shipped reference folders: writes research/prediction/results/validation.json
(the headline figures, then every table) and validation.md (the headline as tables), and the generated block of
docs/prediction.md that quotes them. The report's prediction section reads the JSON's headline; nothing in the
product computes it.

    python research/prediction/validate.py [--check] [--rows]

--check: write nothing; exit 1 when the committed files differ from what the folders give now.
--rows: also keep every prediction checked in the JSON (about 0.7 MB; not committed).
Takes a few minutes on 2 cores (every lease of each card held out twice).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
sys.path.insert(0, str(ROOT))  # research.prediction, run as a script from anywhere

from gpuscale.present import docs  # noqa: E402
from research.prediction import validation  # noqa: E402

RESULT = ROOT / "research" / "prediction" / "results" / "validation.json"
DOC = ROOT / "docs" / "prediction.md"
BLOCK = "prediction-validation"


def _rounded(value):
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


ROWS = ("transfer", "validation", "probe_alone")  # every prediction against its measurement: --rows only


def result_doc(result: dict, rows: bool = False) -> dict:
    """The result file: the headline, then each check's summary (and, with rows, every prediction checked)."""
    return _rounded(
        {
            "kind": "gpuscale.prediction-validation",
            "made_by": "python research/prediction/validate.py",
            "headline": validation.headline(result),
            **{k: v for k, v in result.items() if rows or k not in ROWS},
        }
    )


def headline_table(headline: list[dict]) -> str:
    """The headline as one markdown table (docs/prediction.md's generated block and validation.md)."""
    lines = [
        "| card | predicted | model | predictions | median error | worst error | inside the band |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for h in headline:
        lines.append(
            f"| {h['card']} | {h['quantity']} | {h['model']} | {h['predictions']} | "
            f"{h['median_abs_error_percent']:.1f}% | {h['worst_abs_error_percent']:.1f}% | "
            f"{h['inside_band_percent']:.0f}% |"
        )
    return "\n".join(lines) + "\n"


def markdown(doc: dict) -> str:
    parts = [
        "# How far the prediction erred (leave one lease out)\n",
        "Made by `python research/prediction/validate.py` from the shipped lease folders: each machine lease",
        "predicted from its own probes and the other leases of its card only, as the predict stage predicts a new",
        "lease of a known host; 'unmeasured' leaves each model out of the other leases too (as a user's own model).",
        "Error: predicted / measured - 1; the band is the 90% band the predict stage prints.\n",
        headline_table(doc["headline"]),
        "\n## Leave one model out, per study folder\n",
        "| folder | check | predicted | models | median error | worst error | noise floor (median) |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for s in doc["validation_summary"]:
        if s["variant"] != "paper":
            continue
        folder, check = validation.split_check(s["source"])
        floor = s.get("floor_median_percent")
        parts.append(
            f"| {Path(folder).name} | {check} | {s['device']} | {s['models']} | {s['median_abs_error_percent']:.1f}% | "
            f"{s['worst_abs_error_percent']:.1f}% | {'' if floor is None else f'{floor:.1f}%'} |"
        )
    return "\n".join(parts) + "\n"


def main(argv: list[str]) -> int:
    doc = result_doc(validation.run(), rows="--rows" in argv)
    text = json.dumps(doc, indent=1, sort_keys=False) + "\n"
    md = markdown(doc)
    page = docs.replace_block(DOC.read_text(), BLOCK, headline_table(doc["headline"]))
    wanted = {RESULT: text, RESULT.with_suffix(".md"): md, DOC: page}
    if "--check" in argv:
        stale = [str(p.relative_to(ROOT)) for p, t in wanted.items() if not p.exists() or p.read_text() != t]
        print("stale: " + ", ".join(stale) if stale else "up to date")
        return 1 if stale else 0
    for path, content in wanted.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
