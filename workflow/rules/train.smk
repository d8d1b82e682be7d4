rule train:
    input:
        data=rules.data.output.prepared,
        host=rules.host.output.host,
        code=CODE["train"],
    output:
        record="results/runs/{model}/{device}/{variant}-seed{seed}.json",
    params:
        # Everything that shapes this run: an edit to one model's params reruns that model only.
        settings=lambda w: gp.run_settings(config, w.model, w.device, w.variant, int(w.seed)),
        label=lambda w: config["study"].get("label"),
        params_args=PARAMS_ARGS,
    log:
        "logs/train/{model}/{device}/{variant}-seed{seed}.log",
    wildcard_constraints:
        device=r"cpu|cuda(-\d+)?|mps",
        seed=r"\d+",
    threads: train_threads
    resources:
        # One timing job at a time on a host: profiles/default sets timing_slot=1.
        timing_slot=1,
    message:
        "Training {wildcards.model} on {wildcards.device} ({wildcards.variant}, seed {wildcards.seed})"
    shell:
        "gpuscale train {params.params_args} --model {wildcards.model} --device {wildcards.device}"
        " --variant {wildcards.variant} --seed {wildcards.seed} --threads {threads}"
        " --data {input.data} --out {output.record} --log {log}"
