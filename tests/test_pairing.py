"""CPU and GPU paired within one machine lease (issue 26): records of two leases built by hand, the pairing, its
marks, the spreads and the interval arithmetic on known numbers, and the refusal to cross leases silently."""

from __future__ import annotations

import math
import re

import polars as pl
import pytest
import records

from gpuscale import words
from gpuscale.analyze import aggregate, analysis
from gpuscale.present import report
from gpuscale.present.charts.size import CROSSING_RING
from gpuscale.present.page import _chip
from gpuscale.present.sections.conditions import conditions_section, spread_table
from gpuscale.present.sections.headline import headline
from gpuscale.present.sections.key import key_results

A, B = "a" * 8 + "-1111-2222-3333-444444444444", "b" * 8 + "-5555-6666-7777-888888888888"
Z = analysis.Z95


def run(tmp_path, recs, pairing="same-lease"):
    paths = [records.write(tmp_path / "runs", rec) for rec in recs]
    return aggregate.run(paths, [], tmp_path / "tables", tmp_path / "metrics.json", 0.02, pairing=pairing)


def two_leases() -> list[dict]:
    """resnet18 in lease A (two seeds a side) and lease B (one seed a side)."""
    make = records.make
    return [
        make("resnet18", "cpu", [40.0, 36.0, 44.0], seed=0, lease=A),  # mean 40; steady epochs 36, 44
        make("resnet18", "cpu", [44.0, 44.0, 44.0], seed=1, lease=A),
        make("resnet18", "cuda", [4.0, 4.0, 4.0], seed=0, lease=A),
        make("resnet18", "cuda", [6.0, 6.0, 6.0], seed=1, lease=A),
        make("resnet18", "cpu", [30.0, 30.0, 30.0], seed=0, lease=B, round_=2),
        make("resnet18", "cuda", [5.0, 5.0, 5.0], seed=0, lease=B, round_=2),
    ]


def test_each_lease_pairs_its_own_halves_and_the_speedup_is_the_median_over_leases(tmp_path):
    row = run(tmp_path, two_leases())["speedup"].row(0, named=True)
    lease_a, lease_b = 42.0 / 5.0, 30.0 / 5.0  # median CPU / median GPU epoch within each lease: 8.4 and 6.0
    assert row["pairing"] == "same-lease" and row["leases"] == 2 and row["pairing_reason"] is None
    assert row["lease_ids"] == f"{A}, {B}"
    assert row["speedup"] == pytest.approx(math.sqrt(lease_a * lease_b))  # two leases: their geometric mean
    assert row["rounds"] == 2


def test_the_seconds_shown_come_from_the_pairing_and_divide_to_the_speedup(tmp_path):
    row = run(tmp_path, two_leases())["speedup"].row(0, named=True)
    # two leases: each side the geometric mean of the two leases' medians (CPU 42 and 30, GPU 5 and 5), not the
    # median over all runs (CPU 40, GPU 5: 8.0, no figure shown)
    assert row["cpu_epoch_seconds"] == pytest.approx(math.sqrt(42.0 * 30.0))
    assert row["gpu_epoch_seconds"] == pytest.approx(5.0)
    for column in ("epoch_seconds", "seconds"):  # as printed, to three figures, they divide to the speedup shown
        shown = float(words.seconds(row[f"cpu_{column}"])[:-2]) / float(words.seconds(row[f"gpu_{column}"])[:-2])
        assert f"{shown:.1f}" == f"{row['speedup']:.1f}"
        assert row[f"cpu_{column}"] / row[f"gpu_{column}"] == pytest.approx(row["speedup"])
    assert row["cpu_steady_epoch_seconds"] / row["gpu_steady_epoch_seconds"] == pytest.approx(row["steady_speedup"])
    # three leases: the middle lease's own medians (ratios 10, 6 and 8: lease C's CPU 40 s and GPU 5 s)
    c = "c" * 8 + "-9999-9999-9999-999999999999"
    make = records.make
    recs = [
        make("resnet18", device, [seconds] * 2, lease=lease)
        for lease, device, seconds in ((A, "cpu", 40.0), (A, "cuda", 4.0), (B, "cpu", 30.0), (B, "cuda", 5.0))
    ] + [make("resnet18", "cpu", [40.0] * 2, lease=c), make("resnet18", "cuda", [5.0] * 2, lease=c)]
    paths = [records.write(tmp_path / r["conditions"]["lease"][:8] / "runs", r) for r in recs]
    three = aggregate.run(paths, [], tmp_path / "t3", tmp_path / "m3.json", 0.02)["speedup"].row(0, named=True)
    assert three["speedup"] == pytest.approx(8.0)
    assert (three["cpu_epoch_seconds"], three["gpu_epoch_seconds"]) == pytest.approx((40.0, 5.0))


def test_rounds_counts_the_rounds_measured_not_the_highest_number(tmp_path):
    recs = [records.make("simplecnn", d, [10.0, 10.0], lease=A, round_=2) for d in ("cpu", "cuda")]
    assert run(tmp_path, recs)["speedup"].row(0, named=True)["rounds"] == 1


def test_every_spread_on_its_own_and_the_interval_that_holds_them(tmp_path):
    row = run(tmp_path, two_leases())["speedup"].row(0, named=True)
    # lease to lease: the sd of the two leases' log speedups
    lease = abs(math.log(8.4 / 6.0)) / math.sqrt(2)
    assert row["lease_spread"] == pytest.approx(lease)
    # epoch to epoch: one CPU run has steady epochs 36 and 44, the other four runs none that differ; pooled over
    # the three CPU runs, the GPU's zero added in quadrature
    one_run = abs(math.log(44.0 / 36.0)) / math.sqrt(2)
    epoch = math.sqrt(one_run**2 / 3)
    assert row["epoch_spread"] == pytest.approx(epoch)
    # seed to seed: only lease A has two seeds in one round: CPU 40 and 44, GPU 4 and 6, in quadrature
    seed = math.hypot(math.log(44 / 40) / math.sqrt(2), math.log(6 / 4) / math.sqrt(2))
    assert row["seed_spread"] == pytest.approx(seed)
    assert row["round_spread"] is None  # no seed of one lease was repeated in a second round
    # the interval: speedup × exp(±1.96 √(epoch² + lease²)), widened to hold the bootstrap over seeds
    speedup, total = row["speedup"], math.hypot(epoch, lease)
    assert row["speedup_interval_low"] == pytest.approx(min(speedup * math.exp(-Z * total), row["speedup_ci_low"]))
    assert row["speedup_interval_high"] == pytest.approx(max(speedup * math.exp(Z * total), row["speedup_ci_high"]))
    assert (
        row["speedup_interval_low"] <= row["speedup_ci_low"] <= row["speedup_ci_high"] <= row["speedup_interval_high"]
    )


def test_the_same_run_repeated_in_another_lease_is_a_second_run_paired_in_its_own_lease(tmp_path):
    make = records.make
    paths = [
        records.write(tmp_path / lease[:8] / "runs", make("resnet18", device, [seconds] * 2, lease=lease))
        for lease, device, seconds in ((A, "cpu", 40.0), (A, "cuda", 4.0), (B, "cpu", 30.0), (B, "cuda", 5.0))
    ]
    out = aggregate.run(paths, [], tmp_path / "tables", tmp_path / "metrics.json", 0.02)
    assert out["runs"].select("device", "lease").rows() == [("cpu", A), ("cpu", B), ("cuda", A), ("cuda", B)]
    row = out["speedup"].row(0, named=True)
    assert row["leases"] == 2 and row["speedup"] == pytest.approx(math.sqrt(10.0 * 6.0))
    assert row["lease_spread"] == pytest.approx(math.log(10.0 / 6.0) / math.sqrt(2))


def test_the_combined_interval_on_hand_made_numbers():
    low, high = analysis.combined_interval(10.0, (0.3, None, 0.4))  # √(0.3² + 0.4²) = 0.5
    assert (low, high) == pytest.approx((10.0 * math.exp(-Z * 0.5), 10.0 * math.exp(Z * 0.5)))
    assert analysis.combined_interval(10.0, (0.0,), 9.0, 30.0) == pytest.approx((9.0, 30.0))  # the bootstrap wider
    assert analysis.combined_interval(10.0, (None, None)) == (None, None)
    assert analysis.combined_interval(None, (0.1,)) == (None, None)
    assert analysis.log_median([2.0, 8.0]) == pytest.approx(4.0) and analysis.log_median([1.0, 2.0, 9.0]) == 2.0
    assert analysis.pooled_log_sd([[1.0, math.e], [5.0]]) == pytest.approx(1 / math.sqrt(2))


def test_rounds_give_the_round_to_round_spread(tmp_path):
    make = records.make
    recs = [
        make("simplecnn", "cpu", [10.0, 10.0], lease=A),
        make("simplecnn", "cpu", [12.0, 12.0], lease=A, round_=2),
        make("simplecnn", "cuda", [2.0, 2.0], lease=A),
        make("simplecnn", "cuda", [2.0, 2.0], lease=A, round_=2),
    ]
    out = run(tmp_path, recs)
    assert sorted(out["runs"]["round"].to_list()) == [1, 1, 2, 2]
    row = out["speedup"].row(0, named=True)
    assert row["speedup"] == pytest.approx(11.0 / 2.0) and row["rounds"] == 2 and row["leases"] == 1
    round_spread = math.log(12 / 10) / math.sqrt(2)
    assert row["round_spread"] == pytest.approx(round_spread)
    assert row["epoch_spread"] is None and row["lease_spread"] is None  # one steady epoch a run, one lease
    assert row["speedup_interval_high"] == pytest.approx(max(5.5 * math.exp(Z * round_spread), row["speedup_ci_high"]))


def test_halves_only_in_different_leases_are_refused_and_listed_with_the_reason(tmp_path):
    recs = [
        records.make("resnet18", "cpu", [40.0, 40.0], lease=A),
        records.make("resnet18", "cuda", [4.0, 4.0], lease=B),
    ]
    row = run(tmp_path, recs)["speedup"].row(0, named=True)
    assert row["speedup"] is None and row["steady_speedup"] is None and row["pairing"] is None
    assert row["cpu_epoch_seconds"] == 40.0 and row["gpu_epoch_seconds"] == 4.0  # both halves still shown
    assert row["pairing_reason"] == (
        "CPU in lease aaaaaaaa…, GPU in lease bbbbbbbb…: no same-lease pair; report.pairing: any pairs them, "
        "marked cross-lease"
    )
    assert row["speedup_interval_low"] is None and row["leases"] is None
    chip = _chip(row)
    assert chip["value"] == "—" and "no same-lease pair" in chip["detail"]


def test_pairing_any_crosses_leases_and_says_so(tmp_path):
    recs = [
        records.make("resnet18", "cpu", [40.0, 40.0], lease=A),
        records.make("resnet18", "cuda", [4.0, 4.0], lease=B),
    ]
    out = run(tmp_path, recs, pairing="any")
    row = out["speedup"].row(0, named=True)
    assert row["pairing"] == "cross-lease" and row["speedup"] == pytest.approx(10.0) and row["leases"] == 0
    assert row["cpu_lease_ids"] == A and row["gpu_lease_ids"] == B
    assert "paired across leases" in row["pairing_reason"]
    assert out["pairing"] == "any"


def test_a_lease_not_recorded_pairs_as_unknown(tmp_path):
    recs = [records.make("resnet18", "cpu", [40.0, 40.0]), records.make("resnet18", "cuda", [4.0, 4.0], lease=B)]
    row = run(tmp_path, recs)["speedup"].row(0, named=True)
    assert row["pairing"] == "unknown" and row["speedup"] == pytest.approx(10.0) and row["leases"] is None
    assert row["cpu_lease_ids"] == "unknown"


def test_runs_in_a_lease_without_the_other_half_are_left_out_and_counted(tmp_path):
    recs = [
        records.make("resnet18", "cpu", [40.0, 40.0], lease=A),
        records.make("resnet18", "cuda", [4.0, 4.0], lease=A),
        records.make("resnet18", "cuda", [8.0, 8.0], lease=B, round_=2),
    ]
    row = run(tmp_path, recs)["speedup"].row(0, named=True)
    assert row["speedup"] == pytest.approx(10.0) and row["gpu_seeds"] == 1 and row["gpu_lease_ids"] == A
    # the reason names the device whose run was left out (was "1 run(s) in leases without the other device")
    assert row["pairing_reason"] == "1 GPU run in a lease without a CPU run left out (same-lease pairs only)"


def test_runs_carry_their_lease_round_and_drift_and_the_sentinels_are_a_table(tmp_path):
    before = records.sentinel({"pipeline_one_process": 2000.0, "cpu_training": 5e10})
    after = records.sentinel({"pipeline_one_process": 1500.0, "cpu_training": 5e10})
    cpu = records.in_lease(records.make("resnet18", "cpu", [40.0, 40.0]), A, before, after, drifted=True)
    old = records.make("resnet18", "cuda", [4.0, 4.0])  # made before schema 4: no boot id, no sentinel
    out = run(tmp_path, [cpu, old])
    runs = {r["device"]: r for r in out["runs"].iter_rows(named=True)}
    assert (runs["cpu"]["lease"], runs["cpu"]["drifted"], runs["cpu"]["round"]) == (A, True, 1)
    assert (runs["cuda"]["lease"], runs["cuda"]["drifted"]) == ("unknown", None)
    conditions = out["conditions"]
    assert conditions.height == 4 and set(conditions["device"]) == {"cpu"}
    first = conditions.filter((pl.col("when") == "after") & (pl.col("component") == "pipeline_one_process"))
    row = first.row(0, named=True)
    assert (row["lease"], row["value"], row["unit"], row["faster"], row["spread"]) == (
        A,
        1500.0,
        "images/s",
        "higher",
        0.01,
    )


def test_fits_say_how_many_leases_their_models_span(tmp_path):
    make = records.make
    recs = []
    for lease, (model, speedup) in zip((A, A, B), records.SPEEDUPS.items(), strict=True):
        cpu = records.CPU_EPOCH[model]
        recs += [make(model, "cpu", [cpu, cpu], lease=lease), make(model, "cuda", [cpu / speedup] * 2, lease=lease)]
    fits = run(tmp_path, recs)["fits"].filter(
        (pl.col("source") == "this host") & pl.col("fit_id").is_in(["scaling_flops", "amdahl"])
    )
    assert fits["leases"].to_list() == [2, 2]
    assert fits["note"].str.contains("span 2 machine leases").all()


# ---- the marks and the conditions section ---------------------------------------------------------------------------
def mixed_study() -> list[dict]:
    """simplecnn paired within lease A; resnet18's CPU in lease A and GPU in lease B; resnet50 with no lease recorded.
    Every record of lease A carries sentinels, one drifted."""
    make = records.make
    before = records.sentinel({"pipeline_one_process": 2000.0, "memory_bandwidth": 2e10, "cpu_training": 5e10})
    after = records.sentinel({"pipeline_one_process": 1500.0, "memory_bandwidth": 2.2e10, "cpu_training": 4e10})
    steady = records.sentinel({"pipeline_one_process": 2200.0, "memory_bandwidth": 2e10, "cpu_training": 5e10})
    cpu = records.in_lease(make("simplecnn", "cpu", [12.0, 12.0]), A, before, after, drifted=True)
    return [
        cpu,
        records.in_lease(make("simplecnn", "cuda", [6.0, 6.0]), A, steady, steady, drifted=False),
        records.in_lease(make("resnet18", "cpu", [45.0, 45.0]), A, steady, steady, drifted=False),
        make("resnet18", "cuda", [4.5, 4.5], lease=B),
        make("resnet50", "cpu", [500.0, 500.0]),
        make("resnet50", "cuda", [12.5, 12.5]),
    ]


def test_every_figure_that_crosses_leases_is_marked_wherever_it_is_shown(tmp_path):
    from gpuscale.present import charts, docs

    tables = run(tmp_path, mixed_study(), pairing="any")
    assert dict(zip(tables["speedup"]["model"], tables["speedup"]["pairing"], strict=True)) == {
        "simplecnn": "same-lease",
        "resnet18": "cross-lease",
        "resnet50": "unknown",
    }
    key = key_results(tables)
    marks = {c["model"]: (c["value"], c["mark"]) for c in key["sources"][0]["variants"][0]["chips"]}
    assert marks == {"simplecnn": ("2.0×", ""), "resnet18": ("10.0×", "†"), "resnet50": ("40.0×", "‡")}
    assert [m[0] for m in key["marks"]] == ["†", "‡"] and "crosses machine leases" in key["marks"][0]
    assert "this host: 2 machine leases, 2 record(s) without one" in key["conditions"]
    assert "1 figure(s) cross leases †" in key["conditions"] and "1 of 6 jobs drifted" in key["conditions"]
    assert "1 of 3 speedups pair CPU and GPU within one lease" in key["conditions"]
    head = headline(tables["speedup"], 0.02)
    cells = {r["model"]: r["cells"][1]["mark"] for r in head["rows"]}
    assert cells == {"simplecnn": "", "resnet18": "†", "resnet50": "‡"} and len(head["marks"]) == 2
    assert any("paired across leases" in n for r in head["rows"] for n in r["notes"])
    flops = charts.spec(charts.build(aggregate.read_tables(tmp_path / "tables"), 0.02)["speedup_vs_flops"])
    assert any("ringed †" in line for line in flops["title"]["subtitle"])
    rings = [layer for layer in flops["layer"] if (layer.get("mark") or {}).get("size") == CROSSING_RING]
    assert len(rings) == 1
    readme = docs.readme_headline(aggregate.read_tables(tmp_path / "tables"))
    assert "**10.0×**†" in readme and "**40.0×**‡" in readme and "**2.0×** " in readme
    assert "† crosses machine leases" in readme.splitlines()[-1]


def named_sessions(tables):
    """The machine sessions named as report.run names them for its page."""
    from gpuscale.present import sessions

    return sessions.using(sessions.of(tables["runs"].select("lease", "started_at").to_dicts()))


def test_same_lease_mode_lists_the_crossing_model_as_missing_on_every_page(tmp_path):
    tables = run(tmp_path, mixed_study())
    key = key_results(tables)
    chip = next(c for c in key["sources"][0]["variants"][0]["chips"] if c["model"] == "resnet18")
    assert (chip["value"], chip["mark"], chip["detail"]) == ("—", "", "no same-lease pair")
    assert key["marks"] == [words.PAIRING_KEY["unknown"]]  # nothing crosses: only resnet50's unknown lease
    head = headline(tables["speedup"], 0.02)
    notes = next(r["notes"] for r in head["rows"] if r["model"] == "resnet18")
    assert any("no same-lease pair; report.pairing: any pairs them" in n for n in notes)
    with named_sessions(tables):  # as the page names them: the date each began and a letter, never the boot id
        section = conditions_section(tables)
    assert "1 model(s) without a same-lease pair (no speedup)" in section["summary"][0]
    assert any(line.startswith("this host, paper, resnet18: CPU in lease 2026-01-01 A") for line in section["crossing"])


def test_the_conditions_section_gives_each_leases_sentinel_the_drift_and_the_spreads(tmp_path):
    tables = run(tmp_path, mixed_study())
    with named_sessions(tables):
        section = conditions_section(tables)
    sentinels = [[c["text"] for c in row] for row in section["sentinels"]["rows"]]
    # per device: the CPU jobs' before-sentinels of lease A (2000 and 2200: median 2,100, (2200 − 2000) / 2100
    # between them), the GPU job's apart
    pipeline, a = "input pipeline, one process", "2026-01-01 A"
    cpu = ["this host", pipeline, "CPU", a, "2", "2,100 images/s", "9.5%", "1.0%"]
    gpu = ["this host", pipeline, "GPU (CUDA)", a, "1", "2,200 images/s", "0.0%", "1.0%"]
    assert cpu in sentinels and gpu in sentinels
    assert "CPU training arithmetic (dropped)" in [row[1] for row in sentinels]
    # judged as gpuscale.contract.conditions judges: cpu_training, dropped from the sentinel, is no witness; a table
    # now, one row per component beyond its noise (source, variant, seed and round, one value in every row, in its
    # caption)
    drift = [[c["text"] for c in row] for row in section["drift"]["rows"]]
    assert drift == [
        ["simplecnn", "CPU", "2026-01-01 A", "input pipeline, one process", "0.75 (25% slower)"],
        ["simplecnn", "CPU", "2026-01-01 A", "memory bandwidth, one core", "1.10 (10% faster)"],
    ]
    assert "Every row: source this host; variant paper; seed 0; round 1." in section["drift"]["caption"]
    leases = [[c["text"] for c in row] for row in section["leases"]["rows"]]
    assert sorted(row[1] for row in leases) == ["2026-01-01 A", "2026-01-01 B", "not recorded"]
    # a column empty in every row is left out (no figure here was paired in two leases); where one was, it shows
    assert "spread: lease to lease" not in section["spreads"]["header"]
    assert section["spreads"]["header"][0] == "model"
    two = spread_table(run(tmp_path / "two", two_leases())["speedup"])
    assert (
        "spread: lease to lease" in two["header"]
        and "×/÷" in two["rows"][0][two["header"].index("spread: lease to lease")]["text"]
    )


def test_the_page_renders_the_marks_and_the_conditions(tmp_path):
    from conftest import REPO

    from gpuscale.contract import params
    from gpuscale.present import charts

    paths = [records.write(tmp_path / "runs", rec) for rec in mixed_study()]
    aggregate.run(paths, [], tmp_path / "tables", tmp_path / "metrics.json", 0.02, pairing="any")
    charts.run(tmp_path / "tables", tmp_path / "charts", 0.02)
    config = params.load([REPO / "params.yaml"])
    out = report.run(tmp_path / "tables", tmp_path / "charts", tmp_path / "index.html", config, [])
    html = out.read_text()
    assert '<section id="conditions">' in html and "Measurement conditions" in html
    assert "10.0×<sup>†</sup>" in html and "40.0×<sup>‡</sup>" in html
    assert "2,200 images/s" in html
    assert "this host: 2 machine leases (2026-01-01 A, 2026-01-01 B), 2 record(s) without one;" in html


def test_a_one_lease_figure_is_marked_beside_figures_of_several_and_the_cells_give_seconds_per_epoch(tmp_path):
    make = records.make
    recs = [
        *two_leases(),
        make("simplecnn", "cpu", [12.0] * 3, seed=0, lease=A),
        make("simplecnn", "cpu", [14.0] * 3, seed=1, lease=A),
        make("simplecnn", "cuda", [6.0] * 3, seed=0, lease=A),
        make("simplecnn", "cuda", [7.0] * 3, seed=1, lease=A),
        make("resnet50", "cpu", [100.0] * 3, lease=B),
        make("resnet50", "cuda", [10.0] * 3, lease=B),
    ]
    tables = run(tmp_path, recs)
    chips = {c["model"]: c["detail"] for c in key_results(tables)["sources"][0]["variants"][0]["chips"]}
    assert chips["simplecnn"].endswith("] 1 lease")  # an interval, without a lease-to-lease spread
    assert chips["resnet50"] == "1 run, 1 lease"  # no interval at all
    assert "1 lease" not in chips["resnet18"]
    head = headline(tables["speedup"], 0.02)
    assert head["header"][0].endswith(", 10 epochs") and head["header"][1].endswith(", paper, 3 epochs")
    cell = next(r for r in head["rows"] if r["model"] == "resnet18")["cells"][1]
    cpu, gpu = (float(x) for x in re.findall(r"[\d.]+", cell["lines"][0]))
    assert cell["lines"][0].endswith(" s/epoch") and f"{cpu / gpu:.1f}×" == cell["value"]
