import polars as pl
import pytest
import records

from gpuscale.analyze import aggregate
from gpuscale.present import charts
from gpuscale.present.charts import labels as chart_labels
from gpuscale.present.charts import size, style

SPEEDUPS, CPU = records.SPEEDUPS, records.CPU_EPOCH


def test_fitted_line_spans_only_models_measured_on_both_devices(tmp_path):
    paths = records.study(
        tmp_path / "runs",
        {"simplecnn": 2.0, "resnet18": 6.0, "resnet50": 12.0},
        {"simplecnn": 10.0, "resnet18": 40.0, "resnet50": 100.0},
    )
    out = aggregate.run(paths, [], tmp_path / "t", tmp_path / "m.json", 0.02)
    speedup = out["speedup"].vstack(
        out["speedup"]
        .head(1)
        .with_columns(
            pl.lit("resnet152").alias("model"),
            pl.lit(10**9, dtype=pl.Int64).alias("train_flops_per_image"),
            pl.lit(None, dtype=pl.Float64).alias("speedup"),
        )
    )
    lines = size._fit_lines(speedup, out["fits"], "train_flops_per_image", size.FIT_FLOPS)
    assert not lines.is_empty()
    assert lines["train_flops_per_image"].max() <= max(records.FLOPS.values()) * 1.000001


def test_too_few_models_draw_no_fit_for_that_source(tmp_path):
    paths = records.study(tmp_path / "runs", {"simplecnn": 2.0, "resnet18": 6.0}, {"simplecnn": 10.0, "resnet18": 40.0})
    aggregate.run(paths, [], tmp_path / "t", tmp_path / "m.json", 0.02)
    built = charts.build(aggregate.read_tables(tmp_path / "t"), 0.02)
    amdahl = str(built["amdahl"].to_dict())
    assert "this host" not in amdahl and "paper: RTX 3050" in amdahl  # the paper's 3 points fit; our 2 do not
    flops = str(built["speedup_vs_flops"].to_dict())
    assert "no fitted line for this host: fewer than 3" in flops


def test_amdahl_markers_are_hollow_where_k_is_undetermined(tmp_path):
    paths = records.loader_bound_study(tmp_path / "runs")  # this host's k is undetermined, the paper's is not
    aggregate.run(paths, [], tmp_path / "t", tmp_path / "m.json", 0.02)
    spec = charts.build(aggregate.read_tables(tmp_path / "t"), 0.02)["amdahl"].to_dict()
    points = [layer for layer in spec["layer"] if layer["mark"]["type"] == "point"]
    by_fill = {
        layer["mark"]["filled"]: {row["series"] for row in spec["datasets"][layer["data"]["name"]]} for layer in points
    }
    assert by_fill == {True: {"paper: RTX 3050 vs i9-14900K / paper"}, False: {"this host / paper"}}


def test_amdahl_draws_one_curve_per_variant_of_a_model(tmp_path):
    # two variants of the same models in one source: each (variant, model) is its own curve, never one path
    # zig-zagging between two P values
    paths = records.study(tmp_path / "runs", SPEEDUPS, CPU)
    paths += records.study(tmp_path / "runs", {m: 2 * v for m, v in SPEEDUPS.items()}, CPU, variant="tuned")
    aggregate.run(paths, [], tmp_path / "t", tmp_path / "m.json", 0.02)
    spec = charts.build(aggregate.read_tables(tmp_path / "t"), 0.02)["amdahl"].to_dict()
    line = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "line")
    curves = pl.DataFrame(spec["datasets"][line["data"]["name"]]).filter(pl.col("series").str.starts_with("this host"))
    per_group = curves.group_by("group").agg(pl.col("P").n_unique().alias("p_values"), pl.len())
    assert per_group.height == 6 and per_group["p_values"].to_list() == [1] * 6


def test_charts_with_nothing_measured_say_so(tmp_path):
    path = records.write(tmp_path / "runs", records.make("resnet18", "cuda", [1.0], status="not_measured"))
    aggregate.run([path], [], tmp_path / "t", tmp_path / "m.json", 0.02)
    built = charts.build(aggregate.read_tables(tmp_path / "t"), 0.02)
    assert "No model measured on both CPU and GPU yet" in str(built["speedup_vs_flops"].to_dict())
    assert "No measured runs yet" in str(built["epoch_seconds"].to_dict())
    assert "No phase profile" in str(built["phases"].to_dict())


def test_accuracy_chart_leaves_sampled_pairs_out_and_says_so(tmp_path):
    full = [
        records.write(tmp_path / "runs", records.make("simplecnn", device, [10.0, 10.0], accuracy=0.75))
        for device in ("cpu", "cuda")
    ]
    sampled_cpu = records.make("resnet18", "cpu", [40.0, 40.0], accuracy=0.3)
    sampled_cpu["timing"]["extrapolated"] = True
    paths = [
        *full,
        records.write(tmp_path / "runs", sampled_cpu),
        records.write(tmp_path / "runs", records.make("resnet18", "cuda", [4.0, 4.0], accuracy=0.8)),
    ]
    aggregate.run(paths, [], tmp_path / "t", tmp_path / "m.json", 0.02)
    spec = charts.build(aggregate.read_tables(tmp_path / "t"), 0.02)["accuracy"].to_dict()
    drawn = [row["model"] for dataset in spec["datasets"].values() for row in dataset if "model" in row]
    assert "simplecnn" in drawn and "resnet18" not in drawn
    assert "1 pair(s) with a sampled run left out" in str(spec["title"])


def test_accuracy_chart_still_flags_synthetic_data(tmp_path):
    paths = [
        records.write(tmp_path / "runs", records.make("simplecnn", device, [10.0, 10.0], synthetic=True))
        for device in ("cpu", "cuda")
    ]
    aggregate.run(paths, [], tmp_path / "t", tmp_path / "m.json", 0.02)
    title = str(charts.build(aggregate.read_tables(tmp_path / "t"), 0.02)["accuracy"].to_dict()["title"])
    assert "SYNTHETIC DATA" in title


def test_thread_curve_is_drawn_from_the_fits_it_is_given_not_refitted(tmp_path):
    paths = []
    for n in (1, 2, 4, 8):  # T(N) = 2 + 8 / N: aggregation fits P = 0.8
        rec = records.make("simplecnn", "cpu", [2 + 8 / n])
        rec["key"]["sweep"] = {"parameter": "threads", "value": n}
        rec["environment"]["torch_threads"] = n
        paths.append(records.write(tmp_path / "r", rec))
    aggregate.run(paths, [], tmp_path / "t", tmp_path / "m.json", 0.02)
    tables = aggregate.read_tables(tmp_path / "t")
    threads = tables["fits"]["fit"].str.starts_with("CPU threads")
    # a different fit than the points give (a = 5, P = 0.5, so b = 5): the chart must draw this one
    tables["fits"] = tables["fits"].with_columns(
        pl.when(threads).then(pl.lit(0.5)).otherwise(pl.col("estimate")).alias("estimate"),
        pl.when(threads).then(pl.lit(5.0)).otherwise(pl.col("intercept")).alias("intercept"),
    )
    spec = charts.build(tables, 0.02)["threads"].to_dict()
    line = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "line")
    curve = spec["datasets"][line["data"]["name"]]
    last = max(curve, key=lambda row: row["value"])
    assert last["value"] == 8 and last["speedup_vs_baseline"] == pytest.approx((5 + 5) / (5 + 5 / 8))
    assert last["fit"].startswith("P = 0.500")


def test_a_source_keeps_its_colour_and_no_chart_shows_a_column_name(tmp_path):
    paths = records.study(tmp_path / "runs", SPEEDUPS, CPU)
    aggregate.run(paths, [], tmp_path / "t", tmp_path / "m.json", 0.02)
    tables = aggregate.read_tables(tmp_path / "t")
    built = {name: charts.spec(chart) for name, chart in charts.build(tables, 0.02).items()}
    colours = set()

    def walk(node):
        if isinstance(node, dict):
            if node.get("field") == "source" and "scale" in node:
                scale = node["scale"]
                colours.update(zip(scale["domain"], scale["range"], strict=True))
            if "title" in node and isinstance(node["title"], str):
                assert not any(c in node["title"] for c in ("_seconds", "_accuracy", "train_flops", "speedup_ci")), node
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for spec in built.values():
        walk(spec)
    by_source = {}
    for source, colour in colours:
        by_source.setdefault(source, set()).add(colour)
    assert by_source and all(len(c) == 1 for c in by_source.values())
    assert by_source["this host"] != by_source["paper: RTX 3050 vs i9-14900K"]


def test_direct_labels_never_overlap_at_any_width_their_placement_is_drawn_at():
    # 40 points crowded on a diagonal and in one clump: some labels must give way, none may overlap
    points = [(10 ** (6 + i / 10), 2 ** (i / 8), f"model_{i}") for i in range(30)]
    points += [(1e8 * (1 + i / 50), 5.0 * (1 + i / 50), f"clumped_{i}") for i in range(10)]
    plot = chart_labels.Plot((1e5, 1e10), (0.5, 50.0), style.HEIGHT)
    for widths in zip(chart_labels.LABEL_WIDTHS, chart_labels.LABEL_WIDTHS[1:], strict=False):
        placed = chart_labels.place_labels(points, plot, widths)
        boxes = [
            chart_labels._label_box(plot.share(x), plot.row(y), text, p[1], p[0])
            for (x, y, text), p in zip(points, placed, strict=True)
            if p is not None
        ]
        assert 0 < len(boxes) < len(points)
        assert all(
            0 <= b.left(widths[0]) <= widths[0] - b.width and 0 <= b.top < b.bottom <= plot.height for b in boxes
        )
        for width in (widths[0], (widths[0] + widths[1]) / 2, widths[1]):
            spans = [(b.left(width), b.top, b.left(width) + b.width, b.bottom) for b in boxes]
            for i, a in enumerate(spans):
                for b in spans[i + 1 :]:
                    assert min(a[2], b[2]) <= max(a[0], b[0]) or min(a[3], b[3]) <= max(a[1], b[1]), (width, a, b)


def test_labels_facing_each_other_are_apart_only_if_they_never_cross_as_the_plot_widens():
    # a label right of a point at 40% of the width, one left of a point at 42%: they pass each other at 100 px wide
    # (2 px between the points) and overlap at 1000 px (20 px between the points, each label 7 px from its point)
    right = chart_labels._label_box(0.40, 100.0, "x" * 8, left=False, dy=0)
    left = chart_labels._label_box(0.42, 100.0, "y" * 8, left=True, dy=0)
    assert right.apart(left, (100, 100))
    assert not right.apart(left, (100, 1000)) and not left.apart(right, (100, 1000))
    assert right.apart(chart_labels._label_box(0.42, 100.0 + chart_labels.LABEL_HEIGHT, "y" * 8, True, 0), (100, 1000))


def test_every_sweep_chart_is_drawn_by_one_builder_with_end_labels(tmp_path):
    paths = records.study(tmp_path / "runs", SPEEDUPS, CPU)
    aggregate.run(paths, [], tmp_path / "t", tmp_path / "m.json", 0.02)
    tables = aggregate.read_tables(tmp_path / "t")
    rows = [
        {"source": "this host", "model": model, "variant": "paper", "device": f"cuda-ddp{n}", "base_device": "cuda"}
        | {"world_size": n, "global_batch_size": 128 * n, "epoch_seconds": 10.0 / n, "base_epoch_seconds": 10.0}
        | {"speedup": n * 0.9, "efficiency": 0.9, "extrapolated": False}
        for model in ("resnet18", "resnet50")
        for n in (2, 4)
    ]
    tables["scaling"] = pl.DataFrame(rows, schema=tables["scaling"].schema)
    spec = charts.build(tables, 0.02)["scaling"].to_dict()
    ideal, lines, *labels = spec["layer"]
    diagonal = [(r["world_size"], r["speedup"]) for r in spec["datasets"][ideal["data"]["name"]]]
    assert diagonal == [(1, 1), (2, 2), (4, 4)]
    assert lines["mark"] == {"type": "line", "point": True} and lines["encoding"]["detail"]["field"] == "model"
    assert {layer["mark"]["type"] for layer in labels} == {"text"}
    ends = pl.DataFrame(spec["datasets"][labels[0]["data"]["name"]])  # each line labelled at its end, at every width
    per_width = ends.group_by("label_from").agg(pl.col("model").sort(), pl.col("world_size").unique())
    assert per_width["model"].to_list() == [["resnet18", "resnet50"]] * len(chart_labels.LABEL_WIDTHS[1:])
    assert per_width["world_size"].to_list() == [[4]] * len(chart_labels.LABEL_WIDTHS[1:])
    assert spec["description"] == "Data-parallel scaling"


def test_a_row_label_names_the_paper_variant_by_saying_nothing_and_a_source_by_a_short_tag():
    from gpuscale.analyze.tables import LOCAL_SOURCE
    from gpuscale.present.charts.usage import _row_label, source_tags

    frame = pl.DataFrame(
        {
            "model": ["mobilenet_v3_small", "mobilenet_v3_small", "resnet18"],
            "device_kind": ["CPU", "GPU", "CPU"],
            "variant": ["paper", "paper", "tuned"],
            "source": [LOCAL_SOURCE, "reference: h200-2026-12-04", "reference: h200-2026-12-04"],
        }
    )
    got = frame.select(_row_label(frame, "device_kind", "variant").alias("row"))["row"].to_list()
    assert got == [
        "mobilenet_v3_small · CPU · here",
        "mobilenet_v3_small · GPU · h200",
        "resnet18 · CPU · tuned · h200",
    ]
    # two folders of one card keep their whole names, so their rows stay apart
    tags = source_tags(["reference: h200-2026-12-02", "reference: h200-2026-12-04"])
    assert tags == {"reference: h200-2026-12-02": "h200-2026-12-02", "reference: h200-2026-12-04": "h200-2026-12-04"}
