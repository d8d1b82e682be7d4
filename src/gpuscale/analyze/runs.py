"""The per-run tables of the aggregation: one row per record (runs), per run and epoch, per run and phase, the
sampled protocol checked on full runs, and the machine state of every run (conditions)."""

from __future__ import annotations

import polars as pl

from gpuscale.analyze import analysis, tables
from gpuscale.analyze.tables import EPOCH_SCHEMA, KEY_COLUMNS, PHASE_SCHEMA, RUN_SCHEMA, SAMPLING_SCHEMA
from gpuscale.contract import fsutil, record, sampling


def host_label(rec: dict) -> str:
    env = rec["environment"]
    return f"{env['host']} ({env['gpu']['name'] if env.get('gpu') else env['cpu_model']})"


def runs_frame(loaded) -> pl.DataFrame:
    rows = []
    for source, path, rec in loaded:
        env, timing, quality = rec["environment"], rec["timing"] or {}, rec["quality"] or {}
        recorded = rec["settings"]["train"]  # the record's copy (JSON, any readable schema version), not params
        epochs = rec["epochs"]
        distributed = rec["distributed"] or {}
        rows.append(
            {
                "source": source,
                **flat_key(rec),
                "status": rec["status"],
                "not_measured_reason": rec["not_measured_reason"],
                "drifted": rec["conditions"]["drifted"],
                "label": rec["label"],
                "host": host_label(rec),
                "hostname": env["host"],
                "cpu_model": env["cpu_model"],
                "cpu_logical_cores": env["cpu_logical_cores"],
                "torch_threads": env["torch_threads"],
                "loader_workers": loader_workers(rec),
                "oversubscribed": oversubscribed(rec),
                **compile_cache_columns(rec),
                "gpu_name": (env.get("gpu") or {}).get("name"),
                "gpu_driver": (env.get("gpu") or {}).get("driver_version"),
                "torch_version": env["torch_version"],
                "cuda_version": env["cuda_version"],
                "cudnn_version": env["cudnn_version"],
                "git_commit": env["git"].get("commit"),
                "parameters": rec["model"]["parameters"],
                "train_flops_per_image": rec["model"]["train_flops_per_image"],
                "epochs": recorded["epochs"],
                "batch_size": recorded["batch_size"],
                "world_size": distributed.get("world_size", 1),
                "global_batch_size": distributed.get("global_batch_size", recorded["batch_size"]),
                "data_source": rec["data"]["source"],
                "synthetic": rec["data"]["synthetic"],
                "train_images": rec["data"]["train_images"],
                "test_images": rec["data"]["test_images"],
                "manifest_sha256": rec["data"]["manifest_sha256"],
                "total_train_seconds": timing.get("total_train_seconds"),
                "epoch_seconds_mean": (timing["total_train_seconds"] / len(epochs)) if epochs else None,
                "warmup_epoch_seconds": timing.get("warmup_epoch_seconds"),
                "steady_epoch_seconds_median": timing.get("steady_epoch_seconds_median"),
                "steady_epoch_log_sd": analysis.log_sd(e["train_seconds"] for e in epochs if not e["warmup"]),
                "total_eval_seconds": timing.get("total_eval_seconds"),
                "train_images_per_second": timing.get("train_images_per_second"),
                "steady_images_per_second": timing.get("steady_images_per_second"),
                "extrapolated": timing.get("extrapolated", False),
                "final_test_accuracy": quality.get("final_test_accuracy"),
                **energy_columns(rec["energy"]),
                "phase_overhead_fraction": (rec["phase_profile"] or {}).get("overhead_fraction"),
                "started_at": rec["started_at"],
                "finished_at": rec["finished_at"],
                "record_path": str(path),
                "record_sha256": fsutil.sha256_file(path),
            }
        )
    return pl.DataFrame(rows, schema=RUN_SCHEMA).sort(KEY_COLUMNS)


def loader_workers(rec: dict) -> int | None:
    """DataLoader worker processes beside the training process (0 for the device loader; None if not recorded)."""
    if ((rec["variant"] or {}).get("knobs") or {}).get("loader") == "device":
        return 0
    return (rec["settings"]["train"].get("loader") or {}).get("num_workers")


def oversubscribed(rec: dict) -> bool:
    """A CPU run whose torch threads plus DataLoader workers outnumber the host's logical cores: they compete."""
    env, workers = rec["environment"], loader_workers(rec)
    return (
        rec["key"]["device"] == "cpu"
        and workers is not None
        and env["torch_threads"] + workers > env["cpu_logical_cores"]
    )


def compile_cache_columns(rec: dict) -> dict:
    """For a compiled run: which torch.compile cache it started with (cold, shared, or unknown in records made
    before gpuscale recorded it) and how many files that cache held; nulls for an uncompiled run."""
    effective = (rec["variant"] or {}).get("effective") or {}
    if effective.get("compile", "none") == "none":
        return {"compile_cache": None, "compile_cache_files_at_start": None}
    return {
        "compile_cache": effective.get("compile_cache", "unknown"),
        "compile_cache_files_at_start": effective.get("compile_cache_files_at_start"),
    }


def flat_key(rec: dict) -> dict:
    """The record's key as columns, with its round (1 where it has none) and lease; a sweep becomes sweep_parameter /
    sweep_value (null on study runs)."""
    sweep = rec["key"].get("sweep") or {}
    return {
        **{k: v for k, v in rec["key"].items() if k != "sweep"},
        "round": rec["key"].get("round", 1),
        "lease": rec["conditions"]["lease"],
        "sweep_parameter": sweep.get("parameter"),
        "sweep_value": sweep.get("value"),
    }


def energy_columns(energy: dict | None) -> dict:
    if not energy:
        return {
            "gpu_joules_per_epoch": None,
            "cpu_joules_per_epoch": None,
            "gpu_images_per_joule": None,
            "energy_note": "not recorded (record schema 1 or not measured)",
        }
    notes = [f"{k}: {v['reason']}" for k, v in energy.items() if not v["available"]]
    return {
        "gpu_joules_per_epoch": energy["gpu"]["joules_per_epoch"],
        "cpu_joules_per_epoch": energy["cpu"]["joules_per_epoch"],
        "gpu_images_per_joule": energy["gpu"]["images_per_joule"],
        "energy_note": "; ".join(notes),
    }


PHASE_ORDER = record.PHASES


def phases_frame(loaded) -> pl.DataFrame:
    """Per run and phase: seconds per step, share of the step, and that share of a steady epoch."""
    rows = []
    for source, _, rec in loaded:
        profile = rec["phase_profile"]
        if not profile:
            continue
        epochs = rec["epochs"]
        steady = [e["train_seconds"] for e in (epochs[1:] or epochs)]
        epoch_seconds = sorted(steady)[len(steady) // 2]
        for phase in PHASE_ORDER:
            fraction = profile["phase_fractions"][phase]
            rows.append(
                {
                    "source": source,
                    **flat_key(rec),
                    "phase": phase,
                    "seconds_per_step": profile["phase_seconds_per_step"][phase],
                    "fraction": fraction,
                    "seconds_per_epoch": fraction * epoch_seconds,
                    "overhead_fraction": profile["overhead_fraction"],
                    "profile_steps": profile["steps"],
                }
            )
    return pl.DataFrame(rows, schema=PHASE_SCHEMA).sort([*KEY_COLUMNS, "phase"])


def sampling_frame(loaded) -> pl.DataFrame:
    """The sampled protocol checked on full runs: for each run timed in full whose epochs carry step marks, what
    timing only the first N steps of every epoch would have estimated for the total, against the measured total."""
    rows = []
    for source, _, rec in loaded:
        epochs = rec["epochs"]
        if not epochs or any(e["extrapolated"] or not e["step_marks"] for e in epochs):
            continue
        warmup = rec["settings"]["train"]["sample_warmup_steps"]
        marks = [{step: seconds for step, seconds in e["step_marks"]} for e in epochs]
        common = set.intersection(*(set(m) for m in marks))
        if warmup not in common:
            continue
        measured = sum(e["train_seconds"] for e in epochs)
        for n in sorted(s for s in common if s > warmup):
            estimates = [
                sampling.extrapolate(m[warmup], m[n], warmup, n, e["steps"]) for m, e in zip(marks, epochs, strict=True)
            ]
            errors = [est / e["train_seconds"] - 1 for est, e in zip(estimates, epochs, strict=True)]
            rows.append(
                {
                    "source": source,
                    **flat_key(rec),
                    "sampled_steps": n,
                    "warmup_steps": warmup,
                    "steps_per_epoch": epochs[0]["steps"],
                    "epochs": len(epochs),
                    "estimated_total_seconds": sum(estimates),
                    "measured_total_seconds": measured,
                    "error": sum(estimates) / measured - 1,
                    "epoch_error_min": min(errors),
                    "epoch_error_max": max(errors),
                }
            )
    return pl.DataFrame(rows, schema=SAMPLING_SCHEMA).sort([*KEY_COLUMNS, "sampled_steps"])


def conditions_frame(loaded) -> pl.DataFrame:
    """The machine state of every run: one row per record, sentinel (before / after its job) and component. Records
    made before schema 4 have no sentinel and no rows here (their lease is in the runs table)."""
    rows = [
        {
            "source": source,
            **flat_key(rec),
            "when": when,
            "component": name,
            **{k: component.get(k) for k in ("value", "unit", "faster", "spread")},
        }
        for source, _, rec in loaded
        for when in ("before", "after")
        for name, component in ((rec["conditions"].get(when) or {}).get("components") or {}).items()
    ]
    return pl.DataFrame(rows, schema=tables.CONDITIONS_SCHEMA).sort([*KEY_COLUMNS, "when", "component"])


def epochs_frame(loaded) -> pl.DataFrame:
    rows = [
        {"source": source, **flat_key(rec), **{k: e[k] for k in EPOCH_SCHEMA if k in e}}
        for source, _, rec in loaded
        for e in rec["epochs"]
    ]
    return pl.DataFrame(rows, schema=EPOCH_SCHEMA).sort([*KEY_COLUMNS, "epoch"])
