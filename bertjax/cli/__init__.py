"""The `bertjax` command line (the top layer: it imports every other, nothing imports it).

    main.py            the entry point: one sub-command per module below, imported only when run
    pretrain.py, vocab.py, data.py, bench.py                     pre-training and its data
    finetune.py, classify.py, tag.py, answer.py, choose.py       fine-tuning and prediction
    fill_mask.py, nsp.py, embed.py, similarity.py, attention.py  using a BERT
    convert.py, parity.py                                        checkpoints and the PyTorch mirror
    options.py     flags, --config and --print-config from settings dataclasses
    model_options.py, corpus_options.py, argtypes.py, requirements.py   shared option helpers
    outputs.py     the one rule for what a command may write where, applied to its options
    errors.py      exit codes, one-line errors for a user's mistake, bug reports for the rest
    interrupts.py  the one Ctrl-C handler (and the thread that needs)
    compile_cache.py  XLA's programs kept between commands (JAX's persistent cache)

It may import every other layer; nothing imports it. It is the one place that installs signal
handlers, prints one-line errors and sets process-wide options (glibc's allocator, log levels).
"""
