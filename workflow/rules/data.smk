# The host probe describes the machine Snakemake runs on, as the fingerprint it is checked against does.
localrules:
    host,


rule host:
    output:
        host="results/host.json",
    params:
        # A different machine changes this param, so the host rule and every timing after it rerun.
        fingerprint=HOST_FINGERPRINT,
    input:
        code=CODE["host"],
    log:
        "logs/host.log",
    message:
        "Fingerprinting this host's hardware"
    shell:
        "gpuscale host --out {output.host:q} --log {log:q}"


rule data:
    input:
        source=data_inputs,
        code=CODE["data"],
    output:
        prepared=directory("data/prepared"),
    params:
        data=lambda wildcards: config["data"],
        params_args=PARAMS_ARGS,
    log:
        "logs/data.log",
    message:
        "Preparing the {params.data[source]} dataset"
    shell:
        "gpuscale data {params.params_args} --out {output.prepared:q} --log {log:q}"
