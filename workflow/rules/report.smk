# Light rules run where Snakemake runs, never as cluster jobs (SLURM would queue them like a training run).
localrules:
    aggregate,
    charts,
    report,


PREDICT_ONLY = config["predict"]["only"]  # config/predict.yaml: the report shows the reference studies, no local runs


rule aggregate:
    input:
        records=[] if PREDICT_ONLY else all_records(),
        sweeps=[] if PREDICT_ONLY else sweep_records(),
        reference=reference_records(),
        code=CODE["aggregate"],
    output:
        # runs, runs_parquet, ..., notes: gpuscale.analyze.tables.outputs(); the speedup table shows in Snakemake's report
        **AGGREGATE_OUTPUTS,
        metrics="results/metrics.json",
    params:
        stage_params=lambda wildcards: gp.select(config, deps.STAGE_PARAMS["aggregate"]),
        params_args=PARAMS_ARGS,
        only=" --reference-only" if PREDICT_ONLY else "",
    log:
        "logs/aggregate.log",
    message:
        "Aggregating run records into tables"
    shell:
        "gpuscale aggregate {params.params_args}{params.only} --out results/tables --metrics {output.metrics:q}"
        " --log {log:q}"


rule charts:
    input:
        speedup=rules.aggregate.output.speedup_parquet,
        fits=rules.aggregate.output.fits_parquet,
        phases=rules.aggregate.output.phases_parquet,
        gains=rules.aggregate.output.gains_parquet,
        sweeps=rules.aggregate.output.sweeps_parquet,
        scaling=rules.aggregate.output.scaling_parquet,
        runs=rules.aggregate.output.runs_parquet,
        epochs=rules.aggregate.output.epochs_parquet,
        notes=rules.aggregate.output.notes,
        code=CODE["charts"],
    output:
        charts=report(directory("reports/charts"), patterns=["{name}.svg"], caption="../report/charts.rst",
                      category="Charts"),
    params:
        stage_params=lambda wildcards: gp.select(config, deps.STAGE_PARAMS["charts"]),
        params_args=PARAMS_ARGS,
    log:
        "logs/charts.log",
    message:
        "Drawing the charts"
    shell:
        "gpuscale charts {params.params_args} --tables results/tables --out {output.charts:q} --log {log:q}"


rule report:
    input:
        charts=rules.charts.output.charts,
        speedup=rules.aggregate.output.speedup_parquet,
        fits=rules.aggregate.output.fits_parquet,
        phases=rules.aggregate.output.phases_parquet,
        gains=rules.aggregate.output.gains_parquet,
        sweeps=rules.aggregate.output.sweeps_parquet,
        sampling=rules.aggregate.output.sampling_parquet,
        scaling=rules.aggregate.output.scaling_parquet,
        runs=rules.aggregate.output.runs_parquet,
        epochs=rules.aggregate.output.epochs_parquet,
        notes=rules.aggregate.output.notes,
        predictions=predict_targets(),  # the 'Predicted before measuring' section (predict.smk)
        code=CODE["report"],
    output:
        html=report("reports/index.html", caption="../report/index.rst", category="Report"),
    params:
        stage_params=lambda wildcards: gp.select(config, deps.STAGE_PARAMS["report"]),
        params_args=PARAMS_ARGS,
    log:
        "logs/report.log",
    message:
        "Writing the HTML report"
    shell:
        "gpuscale report {params.params_args} --tables results/tables --charts {input.charts:q}"
        " --predict results/predict"
        " --out {output.html:q} --log {log:q}"
