# Light rules run where Snakemake runs, never as cluster jobs (SLURM would queue them like a training run).
localrules:
    aggregate,
    charts,
    report,


rule aggregate:
    input:
        records=all_records(),
        sweeps=sweep_records(),
        reference=reference_records(),
        code=CODE["aggregate"],
    output:
        runs="results/tables/runs.csv",
        runs_parquet="results/tables/runs.parquet",
        epochs="results/tables/epochs.csv",
        epochs_parquet="results/tables/epochs.parquet",
        speedup=report("results/tables/speedup.csv", caption="../report/speedup.rst", category="Tables"),
        speedup_parquet="results/tables/speedup.parquet",
        fits="results/tables/fits.csv",
        fits_parquet="results/tables/fits.parquet",
        phases="results/tables/phases.csv",
        phases_parquet="results/tables/phases.parquet",
        gains="results/tables/gains.csv",
        gains_parquet="results/tables/gains.parquet",
        sweeps="results/tables/sweeps.csv",
        sweeps_parquet="results/tables/sweeps.parquet",
        sampling="results/tables/sampling.csv",
        sampling_parquet="results/tables/sampling.parquet",
        scaling="results/tables/scaling.csv",
        scaling_parquet="results/tables/scaling.parquet",
        notes="results/tables/notes.json",
        metrics="results/metrics.json",
    params:
        study=lambda wildcards: config["study"],
        sweeps=lambda wildcards: config["sweeps"],
        report=lambda wildcards: config["report"],
        params_args=PARAMS_ARGS,
    log:
        "logs/aggregate.log",
    message:
        "Aggregating run records into tables"
    shell:
        "gpuscale aggregate {params.params_args} --out results/tables --metrics {output.metrics} --log {log}"


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
        report=lambda wildcards: config["report"],
        params_args=PARAMS_ARGS,
    log:
        "logs/charts.log",
    message:
        "Drawing the charts"
    shell:
        "gpuscale charts {params.params_args} --tables results/tables --out {output.charts} --log {log}"


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
        code=CODE["report"],
    output:
        html=report("reports/index.html", caption="../report/index.rst", category="Report"),
    params:
        report=lambda wildcards: config["report"],
        params_args=PARAMS_ARGS,
    log:
        "logs/report.log",
    message:
        "Writing the HTML report"
    shell:
        "gpuscale report {params.params_args} --tables results/tables --charts {input.charts} --out {output.html} --log {log}"
