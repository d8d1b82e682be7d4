"""The report in Debian's Chromium (driven by playwright, which downloads no browser): what the page shows at a wide
and a phone-sized screen, and the checks every report page passes there (tests/test_report.py builds the pages)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import polars as pl
import pytest
from conftest import REPO

from gpuscale.analyze import aggregate
from gpuscale.analyze.tables import LOCAL_SOURCE

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = REPO / "test-artifacts"
SCREENS = {"wide": (1440, 900), "phone": (390, 844)}
MAX_SCREENS_WIDE = 12
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PAGE_FACTS = r"""() => {
  const first = document.getElementById('host') || document.getElementById('key');
  const key = first.getBoundingClientRect();
  const hostTable = document.querySelector('#host table');
  const small = [];
  for (const el of document.querySelectorAll('body *')) {
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own || !el.getClientRects().length) continue;
    const size = el.tagName === 'text' ? parseFloat(el.getAttribute('font-size') || getComputedStyle(el).fontSize)
                                       : parseFloat(getComputedStyle(el).fontSize);
    if (size < 11) small.push(el.tagName + ' ' + size + ' ' + el.textContent.slice(0, 30));
  }
  const rgb = c => (c.match(/[\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => [r, g, b]
    .map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
    .reduce((a, v, i) => a + v * [0.2126, 0.7152, 0.0722][i], 0);
  const background = el => {
    for (let e = el; e; e = e.parentElement) {
      const c = rgb(getComputedStyle(e).backgroundColor);
      if (c.length === 3 || (c.length === 4 && c[3] > 0.5)) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const lowContrast = [];
  for (const el of document.querySelectorAll('body *')) {
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own || !el.getClientRects().length) continue;
    const style = getComputedStyle(el);
    const fg = el.tagName === 'text' ? rgb(style.fill) : rgb(style.color);
    if (fg.length < 3) continue;
    const [a, b] = [lum(fg.slice(0, 3)), lum(background(el))].sort((x, y) => y - x);
    if ((a + 0.05) / (b + 0.05) < 4.5) lowContrast.push(el.tagName + ' ' + el.textContent.slice(0, 30));
  }
  const overflow = [...document.querySelectorAll('body *')].filter(el => {
    const r = el.getBoundingClientRect();
    return r.right > window.innerWidth + 0.5 && !el.closest('.table-wrap');
  }).slice(0, 5).map(el => (el.closest('div.vega') || el).id + ' ' + el.tagName + ' '
    + (el.textContent || '').slice(0, 40) + ' ' + Math.round(el.getBoundingClientRect().right));
  return {
    lowContrast: lowContrast.slice(0, 5),
    overflow: overflow,
    scrollWidth: document.documentElement.scrollWidth,
    width: window.innerWidth,
    height: document.documentElement.scrollHeight,
    keyTop: key.top + window.scrollY,
    keyBottom: key.bottom + window.scrollY,
    keyText: first.innerText,
    firstId: first.id,
    hostRows: [...document.querySelectorAll('#host tbody tr')].map(tr => [...tr.cells].map(c => c.innerText)),
    hostTableRight: hostTable ? hostTable.getBoundingClientRect().right : null,
    untitledAbbr: [...document.querySelectorAll('abbr')].filter(a => !a.title.trim()).length,
    text: document.body.innerText,
    small: small,
    charts: [...document.querySelectorAll('div.vega')].map(d => [d.id,
      d.querySelectorAll('g[class*="mark-"] path, g[class*="mark-"] text, g[class*="mark-"] line').length]),
  };
}"""


DOWNLOADS = r"""async () => Promise.all([...document.querySelectorAll('button.csv')].map(async b => {
  const blob = document.getElementById(b.dataset.csv);
  return [b.dataset.file, blob ? await window.gpuscaleCsv(b.dataset.csv) : null];
}))"""
LABELLED_CHARTS = ("speedup_vs_flops", "speedup_vs_parameters", "amdahl", "accuracy", "threads", "batch", "scaling")
LABEL_BOXES = r"""names => Object.fromEntries(names.map(name => {
  const chart = document.getElementById('chart-' + name);
  const texts = chart ? [...chart.querySelectorAll('g.mark-text.role-mark text')] : [];
  return [name, texts.filter(t => t.textContent.trim() && t.getClientRects().length).map(t => {
    const r = t.getBoundingClientRect();
    return [t.textContent, r.left, r.top, r.right, r.bottom];
  })];
}))"""


def _label_collisions(boxes: dict) -> list[str]:
    """Pairs of direct labels whose rendered text boxes overlap (by more than half a pixel either way)."""
    found = []
    for name, labels in boxes.items():
        for i, (a, *p) in enumerate(labels):
            for b, *q in labels[i + 1 :]:
                if min(p[2], q[2]) - max(p[0], q[0]) > 0.5 and min(p[3], q[3]) - max(p[1], q[1]) > 0.5:
                    found.append(f"{name}: {a!r} {[round(v) for v in p]} overlaps {b!r} {[round(v) for v in q]}")
    return found


def _column_names(tables_dir: Path) -> set[str]:
    tables = aggregate.read_tables(tables_dir)
    return {c for name in aggregate.TABLES for c in tables[name].columns if "_" in c}


def check_in_chromium(folder: Path, tag: str) -> dict:
    sync_api = pytest.importorskip("playwright.sync_api")
    facts, problems = {}, []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        for screen, (width, height) in SCREENS.items():
            page = browser.new_page(viewport={"width": width, "height": height}, accept_downloads=True)
            messages, requests = [], []
            page.on(
                "console",
                lambda m, out=messages: out.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None,
            )
            page.on("pageerror", lambda e, out=messages: out.append(f"pageerror: {e}"))
            page.on("request", lambda r, out=requests: out.append(r.url))
            page.goto((folder / "index.html").as_uri())
            page.wait_for_function(
                "() => [...document.querySelectorAll('div.vega')].every(d => d.querySelector('svg'))", timeout=60_000
            )
            facts[screen] = page.evaluate(PAGE_FACTS)
            facts[screen]["labels"] = page.evaluate(LABEL_BOXES, list(LABELLED_CHARTS))
            facts[screen]["pwned"] = page.evaluate("() => window.__pwned !== undefined")
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"report-{tag}-{screen}.png"))
            page.screenshot(path=str(ARTIFACTS / f"report-{tag}-{screen}-full.png"), full_page=True)
            if screen == "wide":  # a table downloads as CSV built in the page; every button finds its CSV
                facts["downloads"] = page.evaluate(DOWNLOADS)
                with page.expect_download() as download:
                    page.click("#table .csv")
                facts["csv"] = Path(download.value.path()).read_text()
            facts[screen]["messages"] = messages
            facts[screen]["requests"] = [u for u in requests if not u.startswith(("file:", "data:", "blob:", "about:"))]
            page.close()
        browser.close()
    for screen, (width, _) in SCREENS.items():
        f = facts[screen]
        if f["scrollWidth"] > width:
            problems.append(f"{screen}: the page scrolls sideways ({f['scrollWidth']} px > {width}): {f['overflow']}")
        if f["messages"] or f["requests"] or f["pwned"]:
            problems.append(f"{screen}: {f['messages']} {f['requests']} pwned={f['pwned']}")
        if f["lowContrast"]:
            problems.append(f"{screen}: text below WCAG AA contrast (4.5:1): {f['lowContrast']}")
        if f["small"]:
            problems.append(f"{screen}: text under 11 px: {f['small'][:5]}")
        problems += [f"{screen}: {c}" for c in _label_collisions(f["labels"])]
        if not all(count > 0 for _, count in f["charts"]):
            problems.append(f"{screen}: empty charts {f['charts']}")
    assert problems == []
    return facts


def assert_reads_first(facts: dict, folder: Path) -> None:
    """The first screen (1440x900) holds the answer: this host's results where it has records (before the
    reference's), else the key results; this host's table fits a phone's width."""
    wide = facts["wide"]
    assert wide["keyBottom"] <= SCREENS["wide"][1], f"{wide['firstId']} does not fit the first screen"
    assert wide["height"] <= MAX_SCREENS_WIDE * SCREENS["wide"][1], wide["height"]
    for name in ("speedup_vs_flops", "speedup_vs_parameters"):  # labels kept apart, not dropped wholesale
        shown = {text for text, *_ in wide["labels"][name]}
        assert {"simplecnn", "resnet18", "resnet50"} <= shown, (name, shown)
    tables = aggregate.read_tables(folder / "tables")
    speedup = tables["speedup"]
    local = tables["runs"].filter(pl.col("source") == LOCAL_SOURCE)
    if local.is_empty():
        assert wide["firstId"] == "key"
        for model in speedup.filter(pl.col("speedup").is_not_null())["model"].unique().to_list():
            assert re.search(rf"\b{re.escape(model)} [\d.]+×", wide["keyText"]), model
    else:
        assert wide["firstId"] == "host", "this host's results do not come first"
        rows = {cells[0]: cells for cells in wide["hostRows"]}
        assert set(local["model"].to_list()) <= set(rows), rows
        for r in speedup.filter((pl.col("source") == LOCAL_SOURCE) & pl.col("speedup").is_not_null()).to_dicts():
            assert f"{r['speedup']:.1f}×" in rows[r["model"]], (r["model"], rows[r["model"]])
        phone = facts["phone"]
        assert phone["hostTableRight"] <= SCREENS["phone"][0], "this host's table runs off a phone's screen"
    for screen in SCREENS:
        assert facts[screen]["untitledAbbr"] == 0, "a glossed term without its explanation"
        assert not re.search(r"\b[0-9a-f]{8}(-[0-9a-f]{4}){3}|\b[0-9a-f]{8}…", facts[screen]["text"]), "a boot id"
    visible = set(re.findall(r"(?<![.\w/])[a-z0-9]+(?:_[a-z0-9]+)+(?![\w/.])", wide["text"]))
    models = set(aggregate.read_tables(folder / "tables")["runs"]["model"].to_list())
    assert (visible & _column_names(folder / "tables")) - models == set()
    assert facts["csv"].splitlines()[0].startswith("source,variant,model")
    _assert_every_download_works(facts["downloads"], folder)


def _assert_every_download_works(downloads: list, folder: Path) -> None:
    """Each CSV button finds its CSV; the full tables' are the tables as aggregated, byte for byte."""
    assert downloads and all(text for _, text in downloads), [f for f, text in downloads if not text]
    tables = aggregate.read_tables(folder / "tables")
    got = {f: text for f, text in downloads}
    for name in aggregate.TABLES:
        assert got[f"{name}.csv"] == tables[name].write_csv(), name
