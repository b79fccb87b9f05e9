"""Benchmarks. `bertjax bench train` / `bertjax bench infer`: implementations of BERT timed side
by side (the modules below); `embed.py`: sentence-embedding throughput (`bertjax bench embed`);
`data.py`: the input pipeline's throughput (`bertjax bench data`); `corpus.py`: `bertjax data`'s
input MB/s and peak memory on a large generated corpus (`bertjax bench corpus`).

One run times the same configuration on the same batch in every implementation: bertjax in
float32 and bfloat16, transformers' `BertForPreTraining` eager (SDPA attention) and under
`torch.compile`, and the `bert_torch` mirror. Each row runs in its own subprocess, one after the
other, so thread pools, compile caches and peak memory never mix; the parent collects their JSON.

    options.py    the settings (`BenchSettings`): defaults, device-dependent defaults and the
                  metadata `bertjax.cli.bench` derives the command's options from
    batch.py      the pre-training batch every row sees (numpy, one seed)
    flops.py      the model-FLOP formula and the table of datasheet peaks
    timing.py     the step-timing loop and the child-process protocol: typed jobs as JSON
    jax_rows.py   child: the reference GEMM and the bertjax rows (imports JAX)
    torch_rows.py child: the transformers and bert_torch rows (imports torch)
    report.py     tokens/s, ratios, MFU from the raw timings; the table and the JSON
    run.py        orchestration: probe the device, run each row's subprocess, report
    finetune.py, packing.py   `bench finetune` and `bench pack`: the jobs timed end to end
    stamp.py      provenance (machine, command, commit, date) of every benchmark JSON
    tables.py     the docs' tables rendered from that JSON (and checked by CI)

The parent imports neither JAX nor torch: initialising JAX's GPU backend there would take the
memory the children need. The package may import the jobs (`bench finetune`, `bench pack` run
them) and every layer below; only the command line imports it.
"""
