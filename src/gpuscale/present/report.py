"""The report stage: one self-contained HTML page (reports/index.html) that works offline.

It answers first (key results, computed from the tables), then explains (charts, the headline table, why), then
proves (checks, every run, environment, provenance; collapsed): the sections of gpuscale.present.sections, in the
order of its PAGE. The Vega libraries are inlined once; each chart is its Vega-Lite spec from the charts stage; every
table is drawn by one template macro with its words from gpuscale.words and can be downloaded as CSV built in the
page. Everything goes through Jinja2 with autoescaping and embedded JSON through words.script_json, so text from
params, records or file names cannot inject markup.
"""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import json
import logging
from pathlib import Path

import jinja2
from markupsafe import Markup

from gpuscale import words
from gpuscale.analyze.tables import read_tables
from gpuscale.contract import fsutil
from gpuscale.contract.settings import Params
from gpuscale.present import sessions
from gpuscale.present.page import Page, gloss
from gpuscale.present.sections import PAGE
from gpuscale.present.sections.checks import warnings
from gpuscale.present.sections.predicted import load_predictions

DATA_FILES = ("present/templates/report.html.j2",)  # package data this module reads (gpuscale.deps)
log = logging.getLogger("gpuscale.present.report")


def _empty(vl: dict) -> str | None:
    """The message of a chart the data do not allow (charts.style._empty), shown as a line instead of a chart."""
    meta = vl.get("usermeta") or {}
    return meta.get("message") if meta.get("empty") else None


def _figures(specs: dict[str, dict]) -> dict[str, list[dict]]:
    """The charts for the template, by section: title, spec (as script JSON), help, or why there is none."""
    figures = {}
    for section in PAGE:
        for name in (n for n in words.CHART_NAMES if n in section.CHARTS):
            spec = specs[name]
            empty = _empty(spec)
            figures.setdefault(section.ID, []).append(
                {
                    "name": name,
                    "title": words.chart_title(spec),
                    "spec": Markup(words.script_json(spec)),
                    "help": section.CHARTS[name],
                    "empty": empty is not None,
                    "message": empty or "",
                }
            )
    return figures


class CsvBlobs:
    """Each distinct CSV the page offers, embedded once, under an id its download buttons name: a table shown in a
    section and the same table among 'All tables as CSV' share one copy. Embedded gzipped and base64-encoded
    (`packed`): the page's script unpacks one when its button is pressed (DecompressionStream, in every current
    browser, offline). A study's long tables (runs, epochs, phases, the sentinels) are most of a page's bytes
    otherwise: the 8-lease reference's CSVs took 696 KB of its 2.18 MB."""

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}

    def ref(self, text: str) -> str:
        return self.ids.setdefault(text, f"csv-{len(self.ids)}")

    def items(self) -> list[tuple[str, str]]:
        return [(blob_id, text) for text, blob_id in self.ids.items()]

    @staticmethod
    def packed(text: str) -> str:
        """The CSV gzipped (no time stamp: the same tables give the same bytes) and base64-encoded."""
        return base64.b64encode(gzip.compress(text.encode(), mtime=0)).decode("ascii")


def _section_template(name: str) -> str | None:
    """sections/<ID>: that section's TEMPLATE (Jinja drops a template's last newline: one is added back)."""
    found = [s for s in PAGE if f"sections/{s.ID}" == name]
    return found[0].TEMPLATE + "\n" if found else None


def _sections(page: Page) -> tuple[list[dict], dict]:
    """The page's sections in order (id, contents line, template, shown) and the names their templates read."""
    listed, names = [], {}
    for section in PAGE:
        context = section.context(page)
        if context and names.keys() & context.keys():
            raise ValueError(f"report: section {section.ID} repeats a name of another: {names.keys() & context.keys()}")
        names.update(context or {})
        listed.append(
            {"id": section.ID, "nav": section.NAV, "template": f"sections/{section.ID}", "shown": context is not None}
        )
    return listed, names


def with_predict_skips(tables: dict, pred: dict | None) -> dict:
    """The aggregate stage's skipped records and the predict stage's (a bad record of a reference or validation
    folder, which only predict reads), each file once: the conditions and checks list them all."""
    seen = {s["path"] for s in tables.get("skipped_records", [])}
    extra = [s for s in (pred or {}).get("skipped", []) if s["path"] not in seen]
    return {**tables, "skipped_records": [*tables.get("skipped_records", []), *extra]} if extra else tables


def render(
    tables: dict,
    chart_dir: Path,
    params: Params | dict,
    params_files: list[Path],
    vega_bundle: str | None = None,
    out_dir: Path | None = None,
    pred: dict | None = None,
) -> str:
    specs = {name: json.loads((Path(chart_dir) / f"{name}.vl.json").read_text()) for name in words.CHART_NAMES}
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(
            [jinja2.PackageLoader("gpuscale.present", "templates"), jinja2.FunctionLoader(_section_template)]
        ),
        autoescape=jinja2.select_autoescape(default=True),
        undefined=jinja2.StrictUndefined,
    )
    template = env.get_template("report.html.j2")
    env.filters["gloss"] = gloss
    params = Params.of(params)
    tables = with_predict_skips(tables, pred)
    with sessions.using(sessions.of(tables["runs"].select("lease", "started_at").to_dicts())):
        sections, names = _sections(Page(tables, params, pred, out_dir, params_files))
        return _page(template, params, tables, sections, names, vega_bundle, specs)


def _page(template, params: Params, tables: dict, sections: list, names: dict, vega_bundle, specs) -> str:
    import vl_convert

    return template.render(
        title=params.report.title,
        label=params.study.label,
        generated=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        sources={words.source_short(k): v for k, v in tables.get("sources", {}).items() if v},
        warnings=warnings(tables),
        figures=_figures(specs),
        sections=sections,
        **names,
        csv_blobs=CsvBlobs(),
        script_json=lambda value: Markup(words.script_json(value)),
        vega_bundle=Markup((vega_bundle or vl_convert.javascript_bundle()).replace("</script", "<\\/script")),
    )


def run(
    tables_dir: Path,
    chart_dir: Path,
    out: Path,
    params: Params | dict,
    params_files: list[Path],
    predict_dir: Path | None = None,
) -> Path:
    """The page; with predict_dir (results/predict), its 'Predicted before measuring' section too."""
    pred = load_predictions(predict_dir)
    html = render(read_tables(tables_dir), chart_dir, params, params_files, out_dir=Path(out).parent, pred=pred)
    fsutil.write_text(out, html)
    log.info("report -> %s", out)
    return out
