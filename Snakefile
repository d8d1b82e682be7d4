# gpuscale: GPU-over-CPU training speedup as the network grows.
# Reads like a table of contents: config, its validation, the rule files, the target.
# Logic lives in the `gpuscale` command; README.md explains how Snakemake and DVC share the work.

from snakemake.utils import min_version, validate

from gpuscale.contract import params as gp

min_version("9.0")


configfile: "params.yaml"


include: "workflow/rules/common.smk"


validate(config, "workflow/schemas/params.schema.yaml", set_default=False)


include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/predict.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        # predict.only (config/predict.yaml): the probe, the predictions and a report of the reference studies
        # beside them; no training.
        records=[] if config["predict"]["only"] else all_records(),
        report="reports/index.html",
        predictions=predict_targets(),
