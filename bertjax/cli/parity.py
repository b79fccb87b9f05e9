"""`bertjax parity`: compare bertjax with its PyTorch mirror and print a per-tensor table: a random
preset of a family (`--model-type`) as the class it pre-trains (BERT's BertForPreTraining, a
masked LM for the families without next-sentence prediction), or any model (`--hf`: a Hugging
Face directory, a Hub id or a run) as the class it is."""

from __future__ import annotations

import argparse
from typing import Any

from bertjax.cli.argtypes import int_range, non_negative_int, positive_float, positive_int
from bertjax.cli.errors import CommandError, describe
from bertjax.config import PRESETS
from bertjax.config.families import FAMILIES
from bertjax.data.pairs import MIN_SEQ_LEN as PAIR_MIN_SEQ_LEN
from bertjax.errors import InputError
from parity.noise import NOISE_FACTOR

MIN_SEQ_LEN = 2  # [CLS] and one more token: the rows of random_batch are at least this long
DEFAULT_PREDICTIONS = 8


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default=None, choices=sorted(PRESETS),
                        help="model size to initialise randomly (default: tiny; not with --hf, "
                             "whose model has its own size)")
    parser.add_argument("--model-type", default=None, choices=sorted(FAMILIES),
                        help="the family of the random preset (default: bert); a family with "
                             "shapes of its own (modernbert: base and large as released) gets "
                             "them; not with --hf")
    parser.add_argument("--hf", metavar="MODEL", default=None,
                        help="compare this model instead of a random preset, whatever its class: "
                             "a Hugging Face BERT directory, a Hub id (organisation/name) or a "
                             "`bertjax pretrain` run directory (its best checkpoint)")
    parser.add_argument("--step", type=non_negative_int, default=None, metavar="N",
                        help="with a run directory: this checkpoint step instead of the best")
    parser.add_argument("--revision", default=None, metavar="REV",
                        help="with a Hub id: this branch, tag or commit instead of main")
    parser.add_argument("--seed", type=non_negative_int, default=0,
                        help="parameter and batch seed (default: 0)")
    parser.add_argument("--batch-size", type=positive_int, default=2, help="rows in the test batch")
    parser.add_argument("--seq-len", type=int_range(MIN_SEQ_LEN), default=32,
                        help="sequence length (rows vary), at most the model's maximum")
    parser.add_argument("--num-predictions", type=positive_int, default=None, metavar="N",
                        help="masked positions per row, fewer than --seq-len (default: "
                             f"{DEFAULT_PREDICTIONS}, or --seq-len - 1 if that is fewer; masked-LM "
                             "classes only)")
    parser.add_argument("--tolerance", type=positive_float, default=1e-5,
                        help="max abs diff allowed for outputs, max relative diff for gradients, "
                             "unless the PyTorch mirror's own float32 noise (its distance from a "
                             f"float64 run of itself) is larger: then {NOISE_FACTOR} times that "
                             "noise (default: 1e-5)")
    parser.add_argument("--no-masked-positions", action="store_true",
                        help="run the MLM head at every position (no gradients then)")
    parser.add_argument("--train-steps", type=non_negative_int, default=0, metavar="N",
                        help="also run N AdamW updates in Optax and PyTorch on Shakespeare "
                             "batches (warm-up N/4, linear decay, clip 1.0) and compare losses "
                             "and parameters")
    parser.add_argument("--learning-rate", type=positive_float, default=1e-4,
                        help="peak learning rate of --train-steps (default: BERT's 1e-4)")


def _load(args: argparse.Namespace) -> tuple[Any, str]:
    """(model, what it is) for --hf: any class, as the checkpoint says (a run: BertForPreTraining)."""
    from bertjax.cli.model_options import one_line
    from bertjax.io.source import RUN, locate
    from bertjax.pretrained import checkpoint_class, from_pretrained, load_hf

    try:
        source = locate(args.hf, revision=args.revision)
        if source.kind == RUN:
            model, _, report = from_pretrained(source, step=args.step, seed=args.seed,
                                               output_loading_info=True)
            return model, f"{args.hf} (step {report.step})"
        if args.step is not None:
            raise CommandError(f"--step chooses a checkpoint of a `bertjax pretrain` run; "
                               f"{args.hf} is not one: leave out --step")
        return load_hf(source, model_cls=checkpoint_class(source), seed=args.seed), str(args.hf)
    except (OSError, InputError) as err:
        raise CommandError(one_line(describe(err))) from err


def _check_options(args: argparse.Namespace, model: Any, seq_len: int) -> int:
    """The number of masked positions; options that do nothing for `model`'s class refused."""
    from bertjax.use.encode import check_max_length
    from parity.tensors import masked_lm

    check_max_length(seq_len, model.config.max_sequence_length, "--seq-len")
    name = model.config.family.class_name(type(model).__name__)  # transformers' name
    what = args.hf or f"the {model.config.model_type} preset"
    if args.train_steps and not type(model).spec.pretraining:
        raise CommandError(f"--train-steps trains BERT's pre-training objective (masked LM and "
                           f"next sentence); {what} is a {name}: leave out --train-steps, "
                           "or pass a BERT pre-training checkpoint (a `bertjax pretrain` run)")
    if not masked_lm(model):
        unused = [o for o, given in (("--num-predictions", args.num_predictions is not None),
                                     ("--no-masked-positions", args.no_masked_positions)) if given]
        if unused:
            raise CommandError(f"{' and '.join(unused)} {'set' if len(unused) > 1 else 'sets'} "
                               "the masked-LM head's positions; "
                               f"{what} is a {name}, which has none: leave "
                               f"{'them' if len(unused) > 1 else 'it'} out")
        return 1
    predictions = args.num_predictions or min(DEFAULT_PREDICTIONS, seq_len - 1)
    if predictions > seq_len - 1:
        raise CommandError(f"--num-predictions {predictions} is more than the {seq_len - 1} "
                           f"positions after [CLS] of --seq-len {seq_len}; pass "
                           f"--num-predictions {seq_len - 1} or less, or a longer --seq-len")
    if args.train_steps and seq_len < PAIR_MIN_SEQ_LEN:
        raise CommandError(f"--train-steps trains on sentence pairs, which need --seq-len "
                           f"{PAIR_MIN_SEQ_LEN} or more ([CLS] a [SEP] b [SEP]); got {seq_len}")
    return predictions


def run(args: argparse.Namespace) -> int:
    from bertjax.cli.model_options import run_command
    from bertjax.cli.requirements import require_torch

    if not require_torch("bertjax parity compares bertjax with its PyTorch mirror"):
        return 2
    if args.hf is None and (args.step is not None or args.revision is not None):
        raise CommandError("--step and --revision choose a checkpoint of --hf MODEL; pass --hf "
                           "too, or leave them out")
    if args.hf is not None and args.preset is not None:
        raise CommandError(f"--preset sets the size of a randomly initialised model; --hf "
                           f"{args.hf} is compared at its own size: leave out --preset (or --hf)")
    if args.hf is not None and args.model_type is not None:
        raise CommandError(f"--model-type sets the family of a randomly initialised model; --hf "
                           f"{args.hf} has its own: leave out --model-type (or --hf)")
    return run_command("parity", _parity, args)


def _parity(args: argparse.Namespace) -> int:
    from flax import nnx

    from bertjax.config import BertConfig
    from bertjax.heads import model_class
    from parity.tensors import compare, random_batch

    if args.hf:
        model, source = _load(args)
        source += f", {type(model).__name__}"
    else:
        preset, model_type = args.preset or "tiny", args.model_type or "bert"
        config = BertConfig.from_preset(preset, model_type=model_type)
        cls = model_class(config.family.pretraining_class, model_type)
        model = cls(config, rngs=nnx.Rngs(args.seed))
        name = config.family.class_name(cls.__name__)
        source = (f"{model_type} preset {preset!r} ({config.num_hidden_layers} layers, hidden "
                  f"{config.hidden_size}), {name}, random init (seed {args.seed})")
    seq_len = args.seq_len
    predictions = _check_options(args, model, seq_len)
    batch = random_batch(model.config, batch_size=args.batch_size, seq_len=seq_len,
                         num_predictions=predictions, seed=args.seed)
    report = compare(model, batch, masked=not args.no_masked_positions,
                     tolerance=args.tolerance, grad_tolerance=args.tolerance)
    print(f"bertjax vs bert_torch: {source}; batch {args.batch_size}x{seq_len}, float32, no dropout; "
          f"a tensor passes within max(--tolerance, {NOISE_FACTOR} x f32 noise), the noise the "
          "mirror's float32 distance from its own float64 run")
    print(report.format())
    if not report.passed and report.first_divergence is not None:
        print(f"first divergence: {report.first_divergence}, the first layer whose output is "
              "outside its bar while its input was inside")
    if args.train_steps <= 0:
        return 0 if report.passed else 1

    from bertjax.train.schedule import OptimConfig
    from parity.training import shakespeare_batches, train_parity

    n = args.train_steps
    optim = OptimConfig(learning_rate=args.learning_rate, warmup_steps=n // 4,
                        clip_norm=1.0)
    batches = shakespeare_batches(n, vocab_size=model.config.vocab_size, batch_size=args.batch_size,
                                  seq_len=seq_len, max_predictions=predictions, seed=args.seed)
    train = train_parity(model.config, optim, batches=batches, model=model)
    print(f"\n{n} AdamW updates (peak lr {optim.learning_rate:g}, warm-up {optim.warmup_steps}, "
          f"clip {optim.clip_norm:g}), Optax vs torch.optim, Shakespeare batches")
    print(train.format())
    return 0 if report.passed and train.passed else 1
