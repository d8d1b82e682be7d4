import json

import polars as pl
import pytest
import records

from gpuscale.analyze import aggregate


def run(tmp_path, paths, reference=(), **kwargs):
    return aggregate.run(paths, list(reference), tmp_path / "tables", tmp_path / "metrics.json", 0.02, **kwargs)


SPEEDUPS, CPU = records.SPEEDUPS, records.CPU_EPOCH


def test_speedups_and_accuracy_differences_have_known_values(tmp_path):
    paths = records.study(tmp_path / "runs", SPEEDUPS, CPU, accuracy_gap=0.01)
    out = run(tmp_path, paths)
    speedup = out["speedup"]
    assert speedup["model"].to_list() == ["simplecnn", "resnet18", "resnet50"]  # sorted by parameters
    assert speedup["speedup"].to_list() == pytest.approx([2.0, 7.5, 40.0])
    assert speedup["steady_speedup"].to_list() == pytest.approx([2.0, 7.5, 40.0])
    assert speedup["cpu_seconds"].to_list() == pytest.approx([24.0, 90.0, 1000.0])
    assert speedup["accuracy_difference"].to_list() == pytest.approx([0.01] * 3)
    assert speedup["accuracy_parity"].to_list() == [True] * 3
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["x"]["paper"]["resnet50"] == pytest.approx(40.0)


def test_accuracy_gap_beyond_tolerance_is_flagged(tmp_path):
    paths = records.study(tmp_path / "runs", {"resnet18": 5.0}, CPU, accuracy_gap=0.05)
    assert run(tmp_path, paths)["speedup"]["accuracy_parity"].to_list() == [False]


def test_gpu_not_measured_keeps_the_cpu_side_and_the_reason(tmp_path):
    cpu = records.write(tmp_path / "runs", records.make("resnet18", "cpu", [10.0, 9.0]))
    gpu = records.write(tmp_path / "runs", records.make("resnet18", "cuda", [1.0], status="not_measured"))
    row = run(tmp_path, [cpu, gpu])["speedup"].row(0, named=True)
    assert row["cpu_seconds"] == pytest.approx(19.0)
    assert row["gpu_seconds"] is None and row["speedup"] is None
    assert "no CUDA GPU" in row["gpu_not_measured_reason"]


def test_seeds_are_summarised_by_the_median(tmp_path):
    paths = [
        records.write(tmp_path / "runs", records.make("simplecnn", "cpu", [s, s], seed=i))
        for i, s in enumerate([10.0, 12.0, 30.0])
    ]
    paths.append(records.write(tmp_path / "runs", records.make("simplecnn", "cuda", [2.0, 2.0])))
    row = run(tmp_path, paths)["speedup"].row(0, named=True)
    assert row["speedup"] == pytest.approx(6.0) and row["cpu_seeds"] == 3


def test_reference_records_are_never_paired_with_this_hosts(tmp_path):
    local = [records.write(tmp_path / "runs", records.make("resnet18", "cpu", [100.0, 100.0]))]
    ref = tmp_path / "reference" / "bigbox"
    records.write(ref / "runs", records.make("resnet18", "cuda", [2.0, 2.0], host="bigbox"))
    records.write(ref / "runs", records.make("resnet18", "cpu", [20.0, 20.0], host="bigbox"))
    speedup = run(tmp_path, local, reference=[ref])["speedup"]
    by_source = {r["source"]: r for r in speedup.iter_rows(named=True)}
    assert by_source["reference: bigbox"]["speedup"] == pytest.approx(10.0)
    assert by_source["this host"]["speedup"] is None


def test_fits_need_three_models_and_then_recover_the_exponent(tmp_path):
    two = records.study(tmp_path / "a", {"simplecnn": 2.0, "resnet18": 7.0}, CPU)
    fits = run(tmp_path, two)["fits"].filter(pl.col("source") == "this host")
    assert not fits["ok"].any() and fits["note"].str.contains("at least 3").all()

    exponent = 0.5
    speedups = {m: (p / 1e5) ** exponent for m, p in records.PARAMS.items()}
    three = records.study(tmp_path / "b", speedups, CPU)
    fits = run(tmp_path, three)["fits"].filter(
        (pl.col("source") == "this host") & pl.col("fit").str.contains("parameters")
    )
    assert fits["ok"].to_list() == [True]
    assert fits["estimate"][0] == pytest.approx(exponent)


def test_an_amdahl_fit_with_an_undetermined_k_says_so_in_the_fits_table(tmp_path):
    paths = records.loader_bound_study(tmp_path / "runs")  # s is clear, k is not
    fits = run(tmp_path, paths)["fits"].filter(
        (pl.col("source") == "this host") & pl.col("fit").str.starts_with("T_gpu")
    )
    row = fits.row(0, named=True)
    assert row["ok"] and row["estimate_se"] > row["estimate"] and "k undetermined" in row["note"]


def test_rerun_on_same_records_changes_no_byte(tmp_path):
    paths = records.study(tmp_path / "runs", SPEEDUPS, CPU)
    run(tmp_path, paths)
    first = {p.name: p.read_bytes() for p in (tmp_path / "tables").iterdir()}
    run(tmp_path, paths)
    assert {p.name: p.read_bytes() for p in (tmp_path / "tables").iterdir()} == first


def test_truncated_record_stops_aggregation_naming_the_file(tmp_path):
    paths = records.study(tmp_path / "runs", {"resnet18": 5.0}, CPU)
    paths[0].write_text(paths[0].read_text()[:50])
    with pytest.raises(aggregate.AggregateError, match=str(paths[0])):
        run(tmp_path, paths)


def test_bad_records_can_be_skipped_and_are_listed(tmp_path):
    paths = records.study(tmp_path / "runs", {"resnet18": 5.0}, CPU)
    paths[0].write_text("{}")
    out = run(tmp_path, paths, skip_bad=True)
    assert [s["path"] for s in out["skipped_records"]] == [str(paths[0])]
    assert out["runs"].height == 1


def test_two_records_for_one_key_are_an_error(tmp_path):
    rec = records.make("resnet18", "cpu", [1.0])
    a = records.write(tmp_path / "a", rec)
    b = records.write(tmp_path / "b", rec)
    with pytest.raises(aggregate.AggregateError, match="two records"):
        run(tmp_path, [a, b])


def test_overlapping_timing_runs_on_one_host_are_found(tmp_path):
    a = records.write(
        tmp_path / "r",
        records.make(
            "resnet18", "cpu", [1.0], started="2026-01-01T00:00:00+00:00", finished="2026-01-01T00:10:00+00:00"
        ),
    )
    b = records.write(
        tmp_path / "r",
        records.make(
            "resnet18", "cuda", [1.0], started="2026-01-01T00:05:00+00:00", finished="2026-01-01T00:06:00+00:00"
        ),
    )
    found = run(tmp_path, [a, b])["overlapping_runs"]
    assert len(found) == 1 and "resnet18/cpu/paper/seed0" in found[0]["runs"]


def test_bootstrap_interval_over_seeds_brackets_the_speedup(tmp_path):
    paths = []
    for seed, (cpu, gpu) in enumerate([(10.0, 1.0), (11.0, 1.1), (12.0, 0.9)]):
        paths.append(records.write(tmp_path / "r", records.make("resnet18", "cpu", [cpu, cpu], seed=seed)))
        paths.append(records.write(tmp_path / "r", records.make("resnet18", "cuda", [gpu, gpu], seed=seed)))
    row = run(tmp_path, paths)["speedup"].row(0, named=True)
    assert row["speedup"] == pytest.approx(11.0)
    assert row["speedup_ci_low"] <= row["speedup"] <= row["speedup_ci_high"]
    assert row["speedup_ci_low"] >= 10.0 / 1.1 - 1e-9 and row["speedup_ci_high"] <= 12.0 / 0.9 + 1e-9
    single = records.study(tmp_path / "s", {"resnet18": 5.0}, CPU)
    assert run(tmp_path / "x", single)["speedup"]["speedup_ci_low"].to_list() == [None]


def test_phase_shares_become_seconds_of_a_steady_epoch(tmp_path):
    rec = records.make("simplecnn", "cuda", [3.0, 2.0, 2.0])
    rec["phase_profile"] = {
        "steps": 10,
        "clock": "test",
        "phase_sum_seconds_per_step": 0.01,
        "instrumented_step_seconds": 0.011,
        "clean_step_seconds": 0.01,
        "overhead_fraction": 0.1,
        "phase_seconds_per_step": {
            "data_wait": 0.004,
            "host_to_device": 0.001,
            "forward": 0.002,
            "backward": 0.002,
            "optimizer": 0.001,
        },
        "phase_fractions": {"data_wait": 0.4, "host_to_device": 0.1, "forward": 0.2, "backward": 0.2, "optimizer": 0.1},
    }
    rec["schema_version"] = 2
    path = records.write(tmp_path / "r", rec)
    phases = run(tmp_path, [path])["phases"]
    by_phase = dict(zip(phases["phase"], phases["seconds_per_epoch"], strict=True))
    assert by_phase["data_wait"] == pytest.approx(0.8) and sum(by_phase.values()) == pytest.approx(2.0)


def test_variant_gains_split_hardware_from_usage(tmp_path):
    paths = [
        records.write(tmp_path / "r", records.make("resnet18", "cpu", [40.0, 40.0])),
        records.write(tmp_path / "r", records.make("resnet18", "cuda", [4.0, 4.0])),
        records.write(tmp_path / "r", records.make("resnet18", "cpu", [20.0, 20.0], variant="tuned")),
        records.write(tmp_path / "r", records.make("resnet18", "cuda", [1.0, 1.0], variant="tuned")),
    ]
    out = run(tmp_path, paths)
    gains = {r["device"]: r["gain"] for r in out["gains"].iter_rows(named=True)}
    assert gains == {"cpu": pytest.approx(2.0), "cuda": pytest.approx(4.0)}
    speedups = {r["variant"]: r["speedup"] for r in out["speedup"].iter_rows(named=True)}
    assert speedups == {"paper": pytest.approx(10.0), "tuned": pytest.approx(20.0)}


def test_compiled_variant_gain_is_told_apart_over_the_run_and_after_the_first_epoch(tmp_path):
    paths = [
        records.write(tmp_path / "r", records.make("resnet50", "cuda", [10.0, 10.0, 10.0])),
        records.write(tmp_path / "r", records.make("resnet50", "cuda", [25.0, 2.5, 2.5], variant="tuned")),
    ]
    row = run(tmp_path, paths)["gains"].row(0, named=True)
    assert row["gain"] == pytest.approx(1.0) and row["steady_gain"] == pytest.approx(4.0)


def test_sampling_table_checks_the_sampled_protocol_on_full_runs(tmp_path):
    # 8 steps per epoch; warm-up 2 steps take 1 s, then 0.5 s a step: the sampled estimate from the first 4 steps
    # of epoch 1 is exact (4.0 s); epoch 2 slows down after step 4 (measured 5.0 s, estimated 4.0 s).
    rec = records.make("simplecnn", "cpu", [4.0, 5.0])
    rec["settings"]["train"]["sample_warmup_steps"] = 2
    rec["epochs"][0]["step_marks"] = [[2, 1.0], [4, 2.0]]
    rec["epochs"][1]["step_marks"] = [[2, 1.0], [4, 2.0]]
    sampling = run(tmp_path, [records.write(tmp_path / "r", rec)])["sampling"]
    row = sampling.row(0, named=True)
    assert (row["sampled_steps"], row["warmup_steps"], row["steps_per_epoch"]) == (4, 2, 8)
    assert row["estimated_total_seconds"] == pytest.approx(8.0) and row["measured_total_seconds"] == pytest.approx(9.0)
    assert row["error"] == pytest.approx(8.0 / 9.0 - 1)
    assert (row["epoch_error_min"], row["epoch_error_max"]) == (pytest.approx(-0.2), pytest.approx(0.0))


def test_sampled_runs_get_no_accuracy_parity(tmp_path):
    cpu = records.make("resnet18", "cpu", [40.0, 40.0], accuracy=0.3)
    cpu["timing"]["extrapolated"] = True
    paths = [
        records.write(tmp_path / "r", cpu),
        records.write(tmp_path / "r", records.make("resnet18", "cuda", [4.0, 4.0], accuracy=0.8)),
    ]
    row = run(tmp_path, paths)["speedup"].row(0, named=True)
    assert row["extrapolated"] and row["accuracy_difference"] is None and row["accuracy_parity"] is None
    assert row["speedup"] == pytest.approx(10.0)
    assert row["cpu_extrapolated"] and not row["gpu_extrapolated"]


def test_thread_sweep_table_and_fit_from_hand_written_records(tmp_path):
    """T(N) = 2 + 8 / N exactly, so P = 8 / 10; on 8 cores with 2 loader workers, 8 threads oversubscribe."""
    paths = []
    for n in (1, 2, 4, 8):
        rec = records.make("simplecnn", "cpu", [2 + 8 / n])
        rec["key"]["sweep"] = {"parameter": "threads", "value": n}
        rec["environment"]["torch_threads"] = n
        rec["settings"]["train"]["loader"] = {"num_workers": 2}
        paths.append(records.write(tmp_path / "r", rec))
    out = run(tmp_path, paths)
    sweeps = out["sweeps"].sort("value")
    assert sweeps["speedup_vs_baseline"].to_list() == pytest.approx([1.0, 10 / 6, 10 / 4, 10 / 3])
    assert sweeps["oversubscribed"].to_list() == [False, False, False, True]
    fit = out["fits"].filter(pl.col("fit").str.starts_with("CPU threads, simplecnn")).row(0, named=True)
    assert fit["estimate"] == pytest.approx(0.8)
