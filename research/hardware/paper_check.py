"""Check the transfer where the truth was measured (issue 49, item 3), from the shipped records and datasheets alone.

1. Card to card: the H100 predicted from the H200's records and the H200 from the H100's, every model both have
   (`paper` variant); the host CPU as the catalog has it (the two hosts are one catalog entry, so the host terms
   stay put) and, beside it, with each lease's host pace as its sentinels measured it (what `gpuscale sentinel`
   gives a user on their own host: the GPU alone is never measured).
2. Host CPU to host CPU: the H100 lease host's CPU epochs from the H200 host's and back.
3. The paper's table: the RTX 3050 and the i9-14900K (10 epochs, batch 128, Adam), simplecnn, resnet18, resnet50,
   predicted from each reference's records (geometric mean of the two) and the two datasheets; each band from the
   errors of checks 1-2 of the same device kind; the three speedups against 2.0x / 7.3x / 40.6x.

The reference hosts are VMs whose model string hides the part: the figures the datasheets cannot give (clock,
memory bandwidth) are stated as assumptions in research/hardware/assumptions.yaml, a user's hardware file.
Writes research/hardware/results/paper_check.{json,md}.  Run: python research/hardware/paper_check.py
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

from gpuscale.contract import record
from gpuscale.hardware import catalog, transfer
from gpuscale.hardware.transfer import Machine, Measured, ModelCost, ProbeRates

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
REFERENCES = {
    "H200": ("reference/h200-2026-12-04", "H200 SXM 141 GB"),
    "H100": ("reference/h100-2026-12-05", "H100 SXM5 80 GB"),
}
HOST = "Reference GPU host (Intel Xeon, 16 vCPU)"
PAPER_GPU, PAPER_CPU = "GeForce RTX 3050 8 GB", "Intel Core i9-14900K"
PAPER_EPOCHS = 10
ASSUMED = ("performance_boost_ghz", "all_core_ghz", "memory_bandwidth_gb_s")
# The paper's totals over 10 epochs (docs: ../shared/PAPER.md), seconds
PAPER = {
    "simplecnn": {"cpu": 114.94, "cuda": 57.99, "speedup": 2.0},
    "resnet18": {"cpu": 463.63, "cuda": 63.77, "speedup": 7.3},
    "resnet50": {"cpu": 5443.67, "cuda": 134.08, "speedup": 40.6},
}


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def load_reference(folder: str) -> tuple[dict, dict, dict]:
    """(measured by (model, device), probe rates by device, host pace by device) over every lease of a reference."""
    runs: dict[tuple, list[dict]] = {}
    for path in sorted((ROOT / folder).glob("leases/*/runs/*/*/paper-seed0*.json")):
        r = record.load(path)
        if r["status"] == "measured" and r["key"]["variant"] == "paper" and r.get("phase_profile"):
            runs.setdefault((r["key"]["model"], r["key"]["device"]), []).append(r)
    measured, pace = {}, {"cpu": [], "cuda": []}
    for (model, device), rs in runs.items():
        fr = [r["phase_profile"]["phase_fractions"] for r in rs]
        workers = []
        for r in rs:
            cond = r.get("conditions") or {}
            rates = [
                (cond.get(w) or {}).get("components", {}).get("pipeline_workers", {}).get("value")
                for w in ("before", "after")
            ]
            workers.append(_median(rates))
            one = [
                (cond.get(w) or {}).get("components", {}).get("pipeline_one_process", {}).get("value")
                for w in ("before", "after")
            ]
            pace[device].append(_median(one))
        train = rs[0]["settings"]["train"]
        images = rs[0]["data"]["train_images"]
        measured[(model, device)] = Measured(
            model=model,
            device=catalog.GPU if device == "cuda" else catalog.CPU,
            epoch_seconds=_median([r["timing"]["steady_epoch_seconds_median"] for r in rs]),
            steps=math.ceil(images / train["batch_size"]),
            batch_size=train["batch_size"],
            wait_fraction=_median([f["data_wait"] for f in fr]),
            copy_fraction=_median([f.get("host_to_device", 0.0) for f in fr]),
            loader_workers=train["loader"]["num_workers"],
            threads=rs[0]["environment"].get("torch_threads"),
            workers_images_per_second=_median(workers),
            precision=transfer.precision_of(rs[0]["variant"]["effective"]) if device == "cuda" else {},
        )
    probes = {}
    for device in ("cuda", "cpu"):
        ps = [json.loads(p.read_text()) for p in sorted((ROOT / folder).glob(f"leases/*/probe/{device}.json"))]
        ps = [p for p in ps if p.get("status") == "measured"]
        kinds = {k for p in ps for k in p["kinds"]}
        probes[device] = ProbeRates(
            flops_per_second={k: _median([p["kinds"].get(k, {}).get("flops_per_second") for p in ps]) for k in kinds},
            fixed_step_seconds=_median([p["fixed_step_seconds"] for p in ps]),
            op_seconds=_median([p["op_seconds"] for p in ps]),
        )
    return measured, probes, {d: _median(v) for d, v in pace.items()}


def model_costs() -> dict[str, ModelCost]:
    doc = json.loads((ROOT / "src/gpuscale/models/modelfacts.json").read_text())
    return {
        n: ModelCost(n, m["flops_by_kind"], m["ops_per_step"])
        for n, m in doc["models"].items()
        if m.get("ops_per_step")
    }


def with_clock(host: catalog.Device, scale: float) -> catalog.Device:
    """The host with its single-thread clock scaled by a measured pace ratio (the sentinel's one-process rate)."""
    figures = dict(host.figures, performance_boost_ghz=host.figure("performance_boost_ghz") * scale)
    if host.has("all_core_ghz"):
        figures["all_core_ghz"] = host.figure("all_core_ghz") * scale
    return catalog.Device(host.name, host.kind, figures, host.sources, host.source, host.aliases, host.origin)


def row(model, source, target, predicted, measured_value, factor=None):
    out = {
        "model": model,
        "source": source,
        "target": target,
        "predicted_epoch_seconds": round(predicted, 3),
        "measured_epoch_seconds": round(measured_value, 3),
        "error": round(predicted / measured_value - 1, 4),
    }
    if factor:
        out["band"] = [round(predicted / factor, 3), round(predicted * factor, 3)]
        out["inside_band"] = transfer.inside(predicted, measured_value, factor)
    return out


def summary(rows: list[dict]) -> dict:
    errors = [abs(r["error"]) for r in rows]
    out = {
        "n": len(rows),
        "median_abs_error": round(statistics.median(errors), 4),
        "worst_abs_error": round(max(errors), 4),
    }
    if rows and "inside_band" in rows[0]:
        out["inside"] = sum(r["inside_band"] for r in rows)
    if rows and "band_width" in rows[0]:
        out["median_band_width"] = statistics.median(r["band_width"] for r in rows)
    return out


def paper_table(cat, refs, cards, host, costs, factors, cpu_threads=None) -> tuple[list, list, dict]:
    """The paper's six epochs (10-epoch totals) and three speedups, each source's prediction geometric-meaned."""
    gpu_t = Machine(cat.lookup(PAPER_GPU, catalog.GPU), cat.lookup(PAPER_CPU, catalog.CPU))
    cpu_t = Machine(cat.lookup(PAPER_CPU, catalog.CPU), cat.lookup(PAPER_CPU, catalog.CPU), threads=cpu_threads)
    paper_rows, speedups, terms = [], [], {}
    for model, truth in PAPER.items():
        epochs = {}
        for device, target in (("cuda", gpu_t), ("cpu", cpu_t)):
            preds = []
            for name, (meas, probes, _) in refs.items():
                source = Machine(cards[name], host) if device == "cuda" else Machine(host, host)
                p = transfer.transfer_epoch(meas[(model, device)], costs[model], probes[device], source, target)
                preds.append(p["predicted_epoch_seconds"])
                terms[f"{model}/{device}/{name}"] = {
                    "bound": p["bound"],
                    "correction": round(p["correction"], 3),
                    "source_terms": {k: round(v, 5) for k, v in p["source_terms"].items()},
                    "target_terms": {k: round(v, 5) for k, v in p["target_terms"].items()},
                }
            epochs[device] = transfer.geometric_mean(preds) * PAPER_EPOCHS
            label = PAPER_GPU if device == "cuda" else PAPER_CPU
            paper_rows.append(row(model, "H200+H100 records", label, epochs[device], truth[device], factors[device]))
        predicted = epochs["cpu"] / epochs["cuda"]
        factor = math.exp(math.hypot(math.log(factors["cpu"]), math.log(factors["cuda"])))
        speedups.append(
            {
                "model": model,
                "predicted_speedup": round(predicted, 2),
                "paper_speedup": truth["speedup"],
                "error": round(predicted / truth["speedup"] - 1, 4),
                "band": [round(predicted / factor, 2), round(predicted * factor, 2)],
                "inside_band": transfer.inside(predicted, truth["speedup"], factor),
            }
        )
    return paper_rows, speedups, terms


def main() -> int:
    cat = catalog.load(HERE / "assumptions.yaml")
    host = cat.lookup(HOST, catalog.CPU)
    costs = model_costs()
    refs = {name: load_reference(folder) for name, (folder, _) in REFERENCES.items()}
    cards = {name: cat.lookup(card, catalog.GPU) for name, (_, card) in REFERENCES.items()}
    result: dict = {"assumptions": {k: host.figures[k] for k in ASSUMED}}
    result["assumption_sources"] = {k: host.source_of(k) for k in ASSUMED}

    # 1 and 2: where the truth was measured
    checks: dict[str, list[dict]] = {
        "card_to_card": [],
        "card_to_card_host_paced": [],
        "host_cpu_to_host_cpu": [],
        "host_cpu_to_host_cpu_paced": [],
    }
    for src, dst in (("H200", "H100"), ("H100", "H200")):
        meas_s, probes_s, pace_s = refs[src]
        meas_t, _, pace_t = refs[dst]
        for (model, device), m in sorted(meas_s.items()):
            if (model, device) not in meas_t or model not in costs:
                continue
            truth = meas_t[(model, device)].epoch_seconds
            if device == "cuda":
                s_machine, t_machine = Machine(cards[src], host), Machine(cards[dst], host)
                p = transfer.transfer_epoch(m, costs[model], probes_s["cuda"], s_machine, t_machine)
                checks["card_to_card"].append(row(model, src, dst, p["predicted_epoch_seconds"], truth))
                paced = Machine(cards[dst], with_clock(host, pace_t["cuda"] / pace_s["cuda"]))
                p = transfer.transfer_epoch(m, costs[model], probes_s["cuda"], s_machine, paced)
                checks["card_to_card_host_paced"].append(row(model, src, dst, p["predicted_epoch_seconds"], truth))
            else:
                cpu = Machine(host, host)
                p = transfer.transfer_epoch(m, costs[model], probes_s["cpu"], cpu, cpu)
                checks["host_cpu_to_host_cpu"].append(
                    row(model, f"{src} host", f"{dst} host", p["predicted_epoch_seconds"], truth)
                )
                paced_host = with_clock(host, pace_t["cpu"] / pace_s["cpu"])
                p = transfer.transfer_epoch(m, costs[model], probes_s["cpu"], cpu, Machine(paced_host, paced_host))
                checks["host_cpu_to_host_cpu_paced"].append(
                    row(model, f"{src} host", f"{dst} host", p["predicted_epoch_seconds"], truth)
                )
    factors = {
        "cuda": transfer.band_factor([math.log(1 + r["error"]) for r in checks["card_to_card"]]),
        "cpu": transfer.band_factor([math.log(1 + r["error"]) for r in checks["host_cpu_to_host_cpu"]]),
    }
    for rows in checks.values():
        for r in rows:  # each check's band from the errors of its group's other models: coverage out of sample
            others = [math.log(1 + o["error"]) for o in rows if o["model"] != r["model"]]
            factor = transfer.band_factor(others)
            r["band"] = [
                round(r["predicted_epoch_seconds"] / factor, 3),
                round(r["predicted_epoch_seconds"] * factor, 3),
            ]
            r["inside_band"] = transfer.inside(r["predicted_epoch_seconds"], r["measured_epoch_seconds"], factor)
            r["band_width"] = round(factor * factor, 3)
    result["checks"] = {k: {"rows": v, "summary": summary(v)} for k, v in checks.items()}
    result["band_factors"] = {k: round(v, 4) for k, v in factors.items()}
    result["band_widths_high_over_low"] = {k: round(v * v, 3) for k, v in factors.items()}

    # 3: the paper's table, then what two unverified choices move it (docs/hardware.md)
    paper_rows, speedups, terms = paper_table(cat, refs, cards, host, costs, factors)
    sensitivity = []
    for label, fraction, threads in (
        ("saturated fraction 0.4", 0.4, None),
        ("saturated fraction 0.2", 0.2, None),
        ("i9 on its 8 P-cores alone", transfer.SATURATED_FRACTION, 8),
    ):
        kept, transfer.SATURATED_FRACTION = transfer.SATURATED_FRACTION, fraction
        try:
            rows_, speedups_, _ = paper_table(cat, refs, cards, host, costs, factors, cpu_threads=threads)
        finally:
            transfer.SATURATED_FRACTION = kept
        sensitivity.append({"what": label, "rows": rows_, "speedups": speedups_})
    result["paper"] = {"rows": paper_rows, "summary": summary(paper_rows), "speedups": speedups, "terms": terms}
    result["paper_sensitivity"] = sensitivity
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results/paper_check.json").write_text(json.dumps(result, indent=1) + "\n")
    md = markdown(result)
    (HERE / "results/paper_check.md").write_text(md)
    print(md)
    return 0


def _table(rows: list[dict], total: bool = False) -> list[str]:
    unit = "10-epoch total (s)" if total else "epoch (s)"
    out = [
        f"| model | from | to | predicted {unit} | measured {unit} | error | band | inside |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        band = r.get("band")
        out.append(
            f"| {r['model']} | {r['source']} | {r['target']} | {r['predicted_epoch_seconds']:.2f} | "
            f"{r['measured_epoch_seconds']:.2f} | {r['error']:+.1%} | "
            + (f"{band[0]:.2f}-{band[1]:.2f} | {'yes' if r.get('inside_band') else 'no'} |" if band else "- | - |")
        )
    return out


def markdown(result: dict) -> str:
    lines = ["# The transfer checked where the truth was measured", ""]
    lines.append(
        "Generated by research/hardware/paper_check.py from the shipped records and the datasheets; "
        "the reference host's hidden figures are the assumptions in research/hardware/assumptions.yaml: "
        + ", ".join(f"{k} = {v}" for k, v in result["assumptions"].items())
        + "."
    )
    lines.append("")
    names = {
        "card_to_card": "Card to card (host as the catalog has it)",
        "card_to_card_host_paced": "Card to card, each lease host's pace from its sentinels",
        "host_cpu_to_host_cpu": "Host CPU to host CPU (the H200 lease host and the H100 lease host)",
        "host_cpu_to_host_cpu_paced": "Host CPU to host CPU, each lease host's pace from its sentinels",
    }
    for key, title in names.items():
        c = result["checks"][key]
        s = c["summary"]
        lines += [f"## {title}", "", *_table(c["rows"]), ""]
        lines.append(
            f"{s['n']} epochs: median |error| {s['median_abs_error']:.1%}, worst {s['worst_abs_error']:.1%}, "
            f"{s.get('inside', '-')} of {s['n']} inside the band (each from the group's other models' errors; "
            f"median width x{s['median_band_width']:.2f} high/low)."
        )
        lines.append("")
    w = result["band_widths_high_over_low"]
    lines.append(
        f"The paper's bands come from the datasheet-only groups (no sentinel ran on the paper's host): "
        f"GPU x{w['cuda']:.2f}, CPU x{w['cpu']:.2f} (high/low)."
    )
    lines += [
        "",
        "## The paper's table (RTX 3050 and i9-14900K, 10 epochs)",
        "",
        *_table(result["paper"]["rows"], total=True),
        "",
    ]
    lines += ["| model | predicted speedup | paper's | error | band | inside |", "|---|---|---|---|---|---|"]
    for s in result["paper"]["speedups"]:
        lines.append(
            f"| {s['model']} | {s['predicted_speedup']:.1f}x | {s['paper_speedup']}x | {s['error']:+.1%} | "
            f"{s['band'][0]:.1f}-{s['band'][1]:.1f}x | {'yes' if s['inside_band'] else 'no'} |"
        )
    lines += ["", "### What two unverified choices move", ""]
    lines += [
        "| choice | "
        + " | ".join(
            f"{r['model']} {'GPU' if r['target'] == PAPER_GPU else 'CPU'} (s)" for r in result["paper"]["rows"]
        )
        + " | speedups |",
        "|---|" + "---|" * (len(result["paper"]["rows"]) + 1),
    ]
    for case in [
        {"what": "as above", "rows": result["paper"]["rows"], "speedups": result["paper"]["speedups"]},
        *result["paper_sensitivity"],
    ]:
        lines.append(
            f"| {case['what']} | "
            + " | ".join(f"{r['predicted_epoch_seconds']:.0f}" for r in case["rows"])
            + " | "
            + " / ".join(f"{x['predicted_speedup']:.1f}x" for x in case["speedups"])
            + " |"
        )
    lines.append(
        "| the paper | "
        + " | ".join(f"{r['measured_epoch_seconds']:.0f}" for r in result["paper"]["rows"])
        + " | "
        + " / ".join(f"{x['paper_speedup']}x" for x in result["paper"]["speedups"])
        + " |"
    )
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
