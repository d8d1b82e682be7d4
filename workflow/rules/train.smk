rule train:
    input:
        data=rules.data.output.prepared,
        host=rules.host.output.host,
        code=CODE["train"],
        model=model_files,
    output:
        # rounds after the first (study.rounds) end in -roundN (gpuscale.contract.record.round_suffix)
        record="results/runs/{model}/{device}/{variant}-seed{seed}{rsuffix}.json",
    params:
        # Everything that shapes this run: an edit to one model's params reruns that model only.
        settings=lambda w: gp.run_settings(PARAMS, model_of(w), w.device, w.variant, int(w.seed)),
        model=model_of,
        label=lambda w: config["study"].get("label"),
        # rounds after the first only: the first round's command is the DVC stage's (dvc.yaml runs one round)
        round_arg=lambda w: f" --round {round_of(w.rsuffix)}" if w.rsuffix else "",
        params_args=PARAMS_ARGS,
    log:
        "logs/train/{model}/{device}/{variant}-seed{seed}{rsuffix}.log",
    # wall time, peak memory (max_rss) and CPU time of the whole job, by Snakemake (not a DVC output)
    benchmark:
        "logs/benchmarks/train/{model}/{device}/{variant}-seed{seed}{rsuffix}.tsv",
    wildcard_constraints:
        device=typed.DEVICE_PATTERN,
        variant=r"[a-z][a-z0-9_]*",
        seed=r"\d+",
        rsuffix=ROUND_SUFFIX_PATTERN,
    threads: train_threads
    resources:
        # One timing job at a time on a host: profiles/default sets timing_slot=1.
        timing_slot=1,
    # The interleaved order (study.order, gpuscale.contract.params.timing_order): the first job in it runs first.
    priority: timing_priority
    message:
        "Training {wildcards.model} on {wildcards.device} ({wildcards.variant}, seed {wildcards.seed}{wildcards.rsuffix})"
    shell:
        "gpuscale train {params.params_args} --model {params.model:q} --device {wildcards.device:q}"
        " --variant {wildcards.variant:q} --seed {wildcards.seed:q}{params.round_arg} --threads {threads}"
        " --data {input.data:q} --out {output.record:q} --log {log:q}"


rule sweep_threads:
    input:
        data=rules.data.output.prepared,
        host=rules.host.output.host,
        code=CODE["train"],
        model=model_files,
    output:
        record="results/runs/{model}/cpu/threads{value}-{variant}-seed{seed}.json",
    params:
        settings=lambda w: gp.sweep_settings(PARAMS, model_of(w), "cpu", "threads", int(w.value), w.variant, int(w.seed)),
        model=model_of,
        params_args=PARAMS_ARGS,
    log:
        "logs/sweeps/{model}/cpu/threads{value}-{variant}-seed{seed}.log",
    benchmark:
        "logs/benchmarks/sweeps/{model}/cpu/threads{value}-{variant}-seed{seed}.tsv",
    wildcard_constraints:
        value=r"\d+",
        variant=r"[a-z][a-z0-9_]*",
        seed=r"\d+",
    threads: lambda w: min(int(w.value), workflow.cores)
    resources:
        timing_slot=1,
    message:
        "Thread sweep: {wildcards.model} on cpu with {wildcards.value} threads"
    shell:
        "gpuscale train {params.params_args} --model {params.model:q} --device cpu --variant {wildcards.variant:q}"
        " --seed {wildcards.seed:q} --sweep threads={wildcards.value:q}"
        " --data {input.data:q} --out {output.record:q} --log {log:q}"


rule sweep_batch:
    input:
        data=rules.data.output.prepared,
        host=rules.host.output.host,
        code=CODE["train"],
        model=model_files,
    output:
        record="results/runs/{model}/{device}/batch{value}-{variant}-seed{seed}.json",
    params:
        settings=lambda w: gp.sweep_settings(PARAMS, model_of(w), w.device, "batch", int(w.value), w.variant, int(w.seed)),
        model=model_of,
        params_args=PARAMS_ARGS,
    log:
        "logs/sweeps/{model}/{device}/batch{value}-{variant}-seed{seed}.log",
    benchmark:
        "logs/benchmarks/sweeps/{model}/{device}/batch{value}-{variant}-seed{seed}.tsv",
    wildcard_constraints:
        device=typed.GPU_DEVICE_PATTERN,
        variant=r"[a-z][a-z0-9_]*",
        value=r"\d+",
        seed=r"\d+",
    threads: train_threads
    resources:
        timing_slot=1,
    message:
        "Batch sweep: {wildcards.model} on {wildcards.device} at batch {wildcards.value}"
    shell:
        "gpuscale train {params.params_args} --model {params.model:q} --device {wildcards.device:q}"
        " --variant {wildcards.variant:q} --seed {wildcards.seed:q} --sweep batch={wildcards.value:q} --threads {threads}"
        " --data {input.data:q} --out {output.record:q} --log {log:q}"
