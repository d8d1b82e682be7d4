"""The report: built from hand-written records (labelled as such), checked as text and in a real Chromium."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import records
import yaml
from conftest import REPO

from gpuscale import aggregate, charts, params, report

INJECTION = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = REPO / "test-artifacts"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("report")
    paths = records.study(
        tmp / "runs",
        {"simplecnn": 2.0, "resnet18": 7.5, "resnet50": 40.0},
        {"simplecnn": 12.0, "resnet18": 45.0, "resnet50": 500.0},
        accuracy_gap=0.005,
        label=f"hand-written test record {INJECTION}",
    )
    paths.append(records.write(tmp / "runs", records.make("resnet18", "mps", [1.0], status="not_measured")))
    config = params.load([REPO / "params.yaml"])
    config["study"]["label"] = f"test study {INJECTION}"
    config["report"]["title"] = f"Report {INJECTION}"
    params_file = tmp / "params.yaml"
    params_file.write_text(yaml.safe_dump(config))
    aggregate.run(paths, [], tmp / "tables", tmp / "metrics.json", 0.02)
    charts.run(tmp / "tables", tmp / "charts", 0.02)
    report.run(tmp / "tables", tmp / "charts", tmp / "index.html", config, [params_file])
    return tmp


def test_report_has_every_section_and_escapes_text(built):
    html = (built / "index.html").read_text()
    for section in ("headline", "fits", "usage", "charts", "runs", "environment", "provenance"):
        assert f'id="{section}"' in html
    assert "window.__pwned" in html  # the text is there ...
    assert "<script>window.__pwned" not in html and "<img src=x" not in html  # ... but never as markup
    assert "not measured" in html and "no CUDA GPU on this host (test)" in html
    assert "40.60×" in html  # the paper's figure, beside ours
    assert html.count("vegaEmbed=") + html.count("vegaEmbed =") >= 1


def test_vega_libraries_are_inlined_once(built):
    html = (built / "index.html").read_text()
    assert html.count("<script>") == 2  # the bundle, then the loader
    assert 'src="http' not in html and 'href="http' not in html


def test_every_chart_exists_as_offline_html_and_svg(built):
    for name in charts.CHART_NAMES:
        assert (built / "charts" / f"{name}.svg").read_text().lstrip().startswith("<svg")
        page = (built / "charts" / f"{name}.html").read_text()
        assert 'src="http' not in page


@pytest.mark.e2e
@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium not installed (make test installs it with apt)")
def test_report_renders_in_chromium_offline_without_errors_or_injection(built):
    sync_api = pytest.importorskip("playwright.sync_api")
    errors, requests = [], []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.goto((built / "index.html").as_uri())
        page.wait_for_function(
            "() => [...document.querySelectorAll('div.vega')].every(d => d.querySelector('svg'))", timeout=30_000
        )
        marks = page.evaluate("""() => [...document.querySelectorAll('div.vega')].map(d => [d.id,
            d.querySelectorAll('g[class*="mark-"] path, g[class*="mark-"] text, g[class*="mark-"] line').length])""")
        pwned = page.evaluate("() => window.__pwned === undefined")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
        browser.close()
    assert len(marks) == len(charts.CHART_NAMES)
    assert all(count > 0 for _, count in marks), marks
    assert errors == []
    assert [u for u in requests if not u.startswith(("file:", "data:", "blob:", "about:"))] == []
    assert pwned


def test_sampling_table_names_the_sweep_a_row_comes_from():
    import polars as pl

    base = {
        "source": "here",
        "model": "resnet18",
        "device": "cuda",
        "variant": "paper",
        "seed": 0,
        "epochs": 1,
        "warmup_steps": 5,
        "steps_per_epoch": 98,
        "estimated_total_seconds": 5.0,
        "measured_total_seconds": 6.3,
        "error": -0.21,
        "epoch_error_min": -0.21,
        "epoch_error_max": -0.21,
    }
    frame = pl.DataFrame(
        [
            {**base, "sweep_parameter": "batch", "sweep_value": 512, "sampled_steps": 20},
            {**base, "sweep_parameter": None, "sweep_value": None, "sampled_steps": 20},
            {**base, "sweep_parameter": None, "sweep_value": None, "sampled_steps": 200},
        ]
    )
    html = report.sampling_table(frame)
    assert html.count("batch=512") == 1
    assert ">200<" not in html  # only the step counts the report lists


def test_warns_when_cpu_threads_and_loader_workers_oversubscribe_the_cores(tmp_path):
    crowded = records.make("simplecnn", "cpu", [10.0, 10.0])  # 8 threads on 8 logical cores ...
    crowded["settings"]["train"]["loader"] = {"num_workers": 2}  # ... plus 2 loader workers
    roomy = records.make("resnet18", "cpu", [10.0, 10.0])
    roomy["environment"]["torch_threads"] = 6
    roomy["settings"]["train"]["loader"] = {"num_workers": 2}
    device_loader = records.make("resnet50", "cpu", [10.0, 10.0], variant="tuned")
    device_loader["settings"]["train"]["loader"] = {"num_workers": 2}
    device_loader["variant"] = {
        "name": "tuned",
        "knobs": {"loader": "device"},
        "effective": {},
        "notes": [],
    }  # no workers
    paths = [records.write(tmp_path / "r", rec) for rec in (crowded, roomy, device_loader)]
    out = aggregate.run(paths, [], tmp_path / "t", tmp_path / "m.json", 0.02)
    assert out["runs"].sort("model")["loader_workers"].to_list() == [2, 0, 2]  # resnet18, resnet50, simplecnn
    found = [w for w in report.warnings(aggregate.read_tables(tmp_path / "t")) if "DataLoader's workers" in w]
    assert len(found) == 1 and "1 CPU run(s)" in found[0] and "8 threads + 2 workers on 8" in found[0]


def test_warns_about_compiled_runs_that_may_have_found_a_warm_compile_cache(tmp_path):
    def compiled(model, seed, **cache):
        rec = records.make(model, "cuda", [20.0, 1.0], variant="tuned", seed=seed)
        rec["variant"] = {
            "name": "tuned",
            "knobs": {"compile": "reduce-overhead"},
            "effective": {"compile": "reduce-overhead", **cache},
            "notes": [],
        }
        return rec

    cold = compiled("simplecnn", 0, compile_cache="cold", compile_cache_files_at_start=0)
    empty_shared = compiled("simplecnn", 1, compile_cache="shared", compile_cache_files_at_start=0)
    warm_shared = compiled("simplecnn", 2, compile_cache="shared", compile_cache_files_at_start=68)
    unknown = compiled("resnet18", 0)  # a record from before gpuscale recorded the cache
    uncompiled = records.make("resnet50", "cuda", [2.0, 1.0])
    paths = [records.write(tmp_path / "r", rec) for rec in (cold, empty_shared, warm_shared, unknown, uncompiled)]
    aggregate.run(paths, [], tmp_path / "t", tmp_path / "m.json", 0.02)
    tables = aggregate.read_tables(tmp_path / "t")
    runs = tables["runs"].sort("model", "seed")
    assert runs["compile_cache"].to_list() == ["unknown", None, "cold", "shared", "shared"]
    assert runs["compile_cache_files_at_start"].to_list() == [None, None, 0, 0, 68]
    found = [w for w in report.warnings(tables) if "torch.compile cache" in w]
    assert len(found) == 1 and "2 compiled run(s)" in found[0]
    assert "simplecnn on cuda (tuned, seed 2)" in found[0] and "resnet18 on cuda (tuned, seed 0)" in found[0]
    assert "seed 1" not in found[0]


def test_sampling_summary_gives_the_error_range_over_study_runs_only():
    import polars as pl

    def row(seed, error, lo, hi, **extra):
        return {
            "source": "here",
            "model": "resnet18",
            "device": "cuda",
            "variant": "paper",
            "seed": seed,
            "epochs": 10,
            "warmup_steps": 5,
            "steps_per_epoch": 391,
            "estimated_total_seconds": 1.0,
            "measured_total_seconds": 1.0,
            "error": error,
            "epoch_error_min": lo,
            "epoch_error_max": hi,
            "sweep_parameter": None,
            "sweep_value": None,
            "sampled_steps": 20,
            **extra,
        }

    frame = pl.DataFrame(
        [
            row(0, -0.031, -0.2, 0.1),
            row(1, 0.052, -0.4, 0.3),
            row(0, 0.9, 0.9, 0.9, sweep_parameter="batch", sweep_value=512, epochs=1),
        ]
    )
    html = report.sampling_summary(frame)
    assert ">2<" in html  # two study runs; the sweep run is left out ...
    assert "+90.0%" not in html  # ... and so is its error
    assert all(x in html for x in ("−3.1%", "+5.2%", "−40.0%", "+30.0%"))
