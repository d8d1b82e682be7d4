# Prediction: a probe per device (about a minute each, one timing job at a time), then this host's predicted
# epochs and speedups with their bands; and, before the first training job, each pending timing job's predicted
# duration (onstart). docs/prediction.md explains them; how far they err is research/prediction/'s to measure.

PREDICT_CODE = {stage: CODE[stage] for stage in ("probe", "predict")}  # computed, as for every stage (common.smk)
PREDICT_TABLES = ["host", "constants", "skipped"]


def probe_records():
    """One probe per device a process trains on (a data-parallel cpu-ddp2 is probed as cpu)."""
    devices = {typed.DeviceSpec.parse(device).per_process for device in config["study"]["devices"]}
    return [f"results/probe/{device}.json" for device in sorted(devices)]


def predict_targets():
    return [f"results/predict/{name}.{ext}" for name in PREDICT_TABLES for ext in ("csv", "json")]


rule probe:
    input:
        host=rules.host.output.host,
        data=rules.data.output.prepared,
        code=PREDICT_CODE["probe"],
        models=spec_files(),  # the layer table times the study's own models
    output:
        probe="results/probe/{device}.json",
    params:
        seconds=lambda wildcards: config["predict"]["probe_seconds"],
        train=lambda wildcards: config["train"],
        params_args=PARAMS_ARGS,
    log:
        "logs/probe/{device}.log",
    wildcard_constraints:
        device=typed.PROCESS_DEVICE_PATTERN,
    threads: train_threads
    resources:
        timing_slot=1,
    message:
        "Probing {wildcards.device}: layer rates, step costs, input pipeline"
    shell:
        "gpuscale probe {params.params_args} --device {wildcards.device:q} --threads {threads} --data {input.data:q}"
        " --out {output.probe:q} --log {log:q}"


rule predict:
    input:
        probes=probe_records(),
        reference=reference_records(),
        code=PREDICT_CODE["predict"],
        models=spec_files(),  # their facts are counted again after an edit
    output:
        tables=predict_targets(),
    params:
        devices=lambda wildcards: config["study"]["devices"],
        reference=lambda wildcards: config["report"]["reference"],
        params_args=PARAMS_ARGS,
    log:
        "logs/predict.log",
    message:
        "Predicting this host's epochs and speedups, each with its band"
    shell:
        "gpuscale predict {params.params_args} --probes results/probe --out results/predict --log {log:q}"


onstart:
    # After Snakemake's own lock (two Snakemake runs are its to judge): this run holds the folder against stage
    # commands started by DVC or by hand, and DVC's own lock (so `dvc repro` stops before it removes an output),
    # or ends in one line while one works here (gpuscale.contract.runlock).
    try:
        runlock.hold_workflow()
    except runlock.RunLockError as err:
        sys.exit(f"gpuscale: error: {err}")  # before any job; Snakemake frees its own lock and ends with this line
    # Before the first training job: what each pending timing job should cost, and past an hour the faster routes.
    if not config["predict"]["only"]:
        plan = os.path.abspath("logs/study-plan.json")
        done = subprocess.run(["gpuscale", "estimate", *shlex.split(PARAMS_ARGS), "--plan", plan], check=False)
        os.environ["GPUSCALE_STUDY_PLAN"] = plan  # training jobs started from here add the jobs still to come
        if done.returncode:
            print("gpuscale: the duration estimate failed (see above); the study runs anyway", file=sys.stderr)
