"""Pre-train BERT with your own loop: data -> model -> any Optax optimizer -> jitted step ->
held-out evaluation -> checkpoints (resumable) -> a directory transformers loads.

    python examples/custom_pretraining_loop.py --out runs/custom --steps 300
"""

import argparse
from pathlib import Path

import optax
from flax import nnx

import bertjax
from bertjax import data, train


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("runs/custom"))
    p.add_argument("--corpus", default="shakespeare")  # or files, globs, .jsonl, .parquet
    p.add_argument("--preset", default="mini")
    p.add_argument("--vocab-size", type=int, default=512)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--eval-every", type=int, default=100)
    args = p.parse_args(argv)
    train.keep_freed_memory()  # before JAX starts: on a CPU, steps reuse their memory

    # data: a WordPiece vocabulary and memory-mapped shards of each split (made once)
    tok_dir, shards = args.out / "tokenizer", {s: args.out / "data" / s for s in ("train", "eval")}
    if not tok_dir.exists():
        sentences = (s for d in data.corpus_documents(args.corpus, split="train") for s in d)
        tok = data.Tokenizer.train(sentences, vocab_size=args.vocab_size)
        for split, out in shards.items():
            data.write_shards(data.corpus_documents(args.corpus, split=split), tok, out)
        tok.save(tok_dir)
    tok = data.Tokenizer.load(tok_dir)
    batch_options = dict(seq_len=args.seq_len, global_batch_size=args.batch_size)
    batches = data.PretrainingBatches(shards["train"], seed=0, **batch_options)
    held_out = data.PretrainingBatches(shards["eval"], seed=1, shuffle=False, **batch_options)
    eval_batches = [next(held_out) for _ in range(8)]

    # model and any Optax optimizer (inject_hyperparams: the learning rate is logged)
    config = bertjax.BertConfig.from_preset(args.preset, vocab_size=tok.vocab_size,
                                            pad_token_id=tok.special.pad)
    model = bertjax.BertForPreTraining(config, rngs=nnx.Rngs(0))
    schedule = optax.warmup_cosine_decay_schedule(0.0, 1e-3, args.steps // 10, args.steps)
    optimizer = optax.inject_hyperparams(optax.adamw)(learning_rate=schedule, weight_decay=0.01)
    training = train.assemble(model, optax.chain(optax.clip_by_global_norm(1.0), optimizer))
    state, step = training.strategy.place_state(training.state), 0

    checkpoints = train.Checkpointer(args.out / "checkpoints", keep_last=2)
    restored = checkpoints.restore(state)  # resume where a stopped run left off
    if restored is not None:
        state, step = restored.state, restored.step
        batches.set_state(restored.extra["batches"])
    held = {}
    while step < args.steps:
        state, metrics = training.train_step(state, training.strategy.shard_batch(next(batches)))
        step += 1
        if step % args.eval_every == 0 or step == args.steps:
            sums = [training.eval_step(state.params, b) for b in eval_batches]
            held = train.metrics_from_sums({k: sum(s[k] for s in sums) for k in sums[0]})
            held = {k: float(v) for k, v in held.items()}
            print(f"step {step}: loss {float(metrics['loss']):.3f}, lr "
                  f"{float(metrics['learning_rate']):.2e}; held-out MLM accuracy "
                  f"{held['mlm_accuracy']:.4f}, perplexity {held['perplexity']:.1f}")
            checkpoints.save(step, state, extra={"batches": batches.get_state()})
    checkpoints.close()
    trained = nnx.merge(training.graphdef, state.params)  # the run's own export, made anew
    bertjax.save_pretrained(trained, args.out / "hf", tok, overwrite=True)
    return held


if __name__ == "__main__":
    main()
