"""`bertjax parity`: compare bertjax with its PyTorch mirror and print a per-tensor table."""

from __future__ import annotations

import argparse

from bertjax.cli.argtypes import int_range, non_negative_int, positive_float, positive_int
from bertjax.cli.errors import CommandError
from bertjax.config import PRESETS
from bertjax.data.pairs import MIN_SEQ_LEN as PAIR_MIN_SEQ_LEN

MIN_SEQ_LEN = 2  # [CLS] and one more token: the rows of random_batch are at least this long


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="tiny", choices=sorted(PRESETS),
                        help="model size to initialise randomly (default: tiny)")
    parser.add_argument("--hf", metavar="DIR", default=None,
                        help="compare a Hugging Face BERT checkpoint directory instead of a preset")
    parser.add_argument("--seed", type=int, default=0, help="parameter and batch seed")
    parser.add_argument("--batch-size", type=positive_int, default=2, help="rows in the test batch")
    parser.add_argument("--seq-len", type=int_range(MIN_SEQ_LEN), default=32,
                        help="sequence length (rows vary), at most the model's maximum")
    parser.add_argument("--num-predictions", type=positive_int, default=8, help="masked positions per row")
    parser.add_argument("--tolerance", type=positive_float, default=1e-5,
                        help="max abs diff allowed for outputs, max relative diff for gradients")
    parser.add_argument("--no-masked-positions", action="store_true",
                        help="run the MLM head at every position (no gradients then)")
    parser.add_argument("--train-steps", type=non_negative_int, default=0, metavar="N",
                        help="also run N AdamW updates in Optax and PyTorch on Shakespeare "
                             "batches (warm-up N/4, linear decay, clip 1.0) and compare losses "
                             "and parameters")
    parser.add_argument("--learning-rate", type=positive_float, default=1e-4,
                        help="peak learning rate of --train-steps (default: BERT's 1e-4)")


def run(args: argparse.Namespace) -> int:
    from bertjax.cli.requirements import require_torch

    if not require_torch("bertjax parity compares bertjax with its PyTorch mirror"):
        return 2
    from flax import nnx

    from bertjax.config import BertConfig
    from bertjax.heads import BertForPreTraining
    from bertjax.pretrained import load_hf
    from bertjax.use.encode import check_max_length
    from parity.tensors import compare, random_batch

    if args.hf:
        model = load_hf(args.hf, seed=args.seed)
        source = args.hf
    else:
        model = BertForPreTraining(BertConfig.from_preset(args.preset), rngs=nnx.Rngs(args.seed))
        source = f"preset {args.preset!r}, random init (seed {args.seed})"
    seq_len, limit = args.seq_len, model.config.max_position_embeddings
    check_max_length(seq_len, limit, "--seq-len")
    if args.train_steps and seq_len < PAIR_MIN_SEQ_LEN:
        raise CommandError(f"--train-steps trains on sentence pairs, which need --seq-len "
                           f"{PAIR_MIN_SEQ_LEN} or more ([CLS] a [SEP] b [SEP]); got {seq_len}")
    batch = random_batch(model.config, batch_size=args.batch_size, seq_len=seq_len,
                         num_predictions=args.num_predictions, seed=args.seed)
    report = compare(model, batch, masked=not args.no_masked_positions,
                     tolerance=args.tolerance, grad_tolerance=args.tolerance)
    print(f"bertjax vs bert_torch: {source}; batch {args.batch_size}x{seq_len}, float32, no dropout")
    print(report.format())
    if args.train_steps <= 0:
        return 0 if report.passed else 1

    from bertjax.train.schedule import OptimConfig
    from parity.training import shakespeare_batches, train_parity

    n = args.train_steps
    optim = OptimConfig(learning_rate=args.learning_rate, warmup_steps=n // 4, total_steps=n,
                        clip_norm=1.0)
    batches = shakespeare_batches(n, vocab_size=model.config.vocab_size, batch_size=args.batch_size,
                                  seq_len=seq_len, max_predictions=args.num_predictions,
                                  seed=args.seed)
    train = train_parity(model.config, optim, batches=batches, model=model)
    print(f"\n{n} AdamW updates (peak lr {optim.learning_rate:g}, warm-up {optim.warmup_steps}, "
          f"clip {optim.clip_norm:g}), Optax vs torch.optim, Shakespeare batches")
    print(train.format())
    return 0 if report.passed and train.passed else 1
