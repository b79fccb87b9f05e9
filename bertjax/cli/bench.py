"""`bertjax bench WHAT`: benchmarks. `data`: tokenisation MB/s and masked sequences/s on one core;
`train` / `infer`: the training step / inference forward of bertjax (float32, bfloat16),
transformers (eager, torch.compile) and bert_torch side by side (`bertjax.bench`); `embed`:
sentence-embedding throughput against transformers (packed and in sorted batches); `corpus`:
`bertjax data`'s MB/s and peak memory on large generated corpora; `finetune`: the bundled tasks,
padded batches against packed; `pack`: pre-training on short documents, unpacked against packed.

Each benchmark is a sub-command with its own options: an entry of BENCHMARKS. The options of
`train` and `infer` are derived from the fields of `BenchSettings` (`bertjax.cli.fields`).
"""

from __future__ import annotations

import argparse
import functools
import inspect
from typing import Any

from bertjax.bench import corpus as corpus_bench
from bertjax.bench import options as bench_options
from bertjax.bench.options import BenchSettings
from bertjax.bench.run import run_benchmark
from bertjax.cli.argtypes import (
    float_range,
    int_range,
    non_negative_int,
    positive_int,
    subset_of,
)
from bertjax.cli.corpus_options import add_corpus_arguments
from bertjax.cli.errors import writing
from bertjax.cli.fields import add_field_arguments, device_defaults_table, settings_from_args
from bertjax.cli.outputs import check_output_path, model_input
from bertjax.config import BertConfig
from bertjax.data.corpus import corpus_paths
from bertjax.settings import field_options, parse_value

# Options a mode does not have (inference runs without dropout).
EXCLUDED = {"train": (), "infer": ("dropout",)}
EMBED_DEFAULT_LINES = 10_000  # bertjax.bench.embed.DEFAULT_LINES, without importing JAX for --help
EMBED_MAX_TOKENS = 2048  # bertjax.bench.embed.DEFAULT_MAX_TOKENS (a test holds them equal)


# --- data -------------------------------------------------------------------------------------


def _add_data_arguments(parser: argparse.ArgumentParser) -> None:
    from bertjax.bench.data import run_data_benchmark  # tokenizers: only for this benchmark

    default = {k: p.default for k, p in inspect.signature(run_data_benchmark).parameters.items()}
    add_corpus_arguments(parser)
    parser.add_argument("--vocab", default=None, metavar="PATH",
                        help="vocabulary to use (default: train one of --vocab-size first)")
    from bertjax.config import MAX_VOCAB_SIZE
    from bertjax.data.pairs import MIN_SEQ_LEN
    from bertjax.data.tokenizer import MIN_VOCAB_SIZE

    for flag, kind, help_text in (
        ("vocab-size", int_range(MIN_VOCAB_SIZE, MAX_VOCAB_SIZE),
         "size of the vocabulary trained when --vocab is not given"),
        ("seq-len", int_range(MIN_SEQ_LEN), "tokens per sequence"),
        ("batch-size", positive_int, "sequences per batch"),
        ("max-predictions", positive_int, "masked positions per sequence"),
        ("steps", positive_int, "batches per timed repeat"),
        ("repeats", positive_int, "timed repeats"),
        ("warmup", non_negative_int, "untimed repeats first"),
    ):
        name = flag.replace("-", "_")
        parser.add_argument(f"--{flag}", type=kind, default=default[name],
                            help=f"{help_text} (default: {default[name]})")
    parser.add_argument("--whole-word-mask", action="store_true")
    parser.add_argument("--cpu", type=non_negative_int, default=None,
                        help="core to pin to, one this process may use (default: the first)")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the numbers here")
    parser.add_argument("--force", action="store_true", help="replace an existing --json file")


def _run_data(args: argparse.Namespace) -> int:
    from bertjax.bench.data import run_data_benchmark

    if args.json:  # before the benchmark, not after it
        check_output_path(args.json, "--json", force=args.force, example="bench.json",
                          inputs={"--corpus": corpus_paths(args.corpus), "--vocab": args.vocab})
    result = run_data_benchmark(
        corpus=args.corpus, split=args.split, text_field=args.text_field, vocab=args.vocab,
        vocab_size=args.vocab_size, seq_len=args.seq_len, batch_size=args.batch_size,
        max_predictions=args.max_predictions, whole_word_mask=args.whole_word_mask,
        steps=args.steps, repeats=args.repeats, warmup=args.warmup, cpu=args.cpu,
    )
    if args.json:
        from bertjax.bench.stamp import write_result

        with writing("--json", args.json):
            write_result(result, args.json, "data")
    return 0


# --- train, infer -----------------------------------------------------------------------------


def parse_override(text: str) -> tuple[str, Any]:
    """`--set NAME=VALUE` -> (BertConfig field, value of the field's type)."""
    fields = {o.name: o for o in field_options(BertConfig)}
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    if name == "dtype":
        raise argparse.ArgumentTypeError("set the compute dtype with --dtype (bertjax rows) and "
                                         "--hf-dtype (transformers rows), not --set dtype=")
    if name not in fields:
        raise argparse.ArgumentTypeError(f"{name!r} is not a BertConfig field; fields: "
                                         f"{', '.join(sorted(set(fields) - {'dtype'}))}")
    try:
        return name, parse_value(fields[name], raw, source="--set")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _epilog(mode: str) -> str:
    """The device-dependent defaults as a table, then the notes of `bertjax.bench.options`."""
    notes = (bench_options.__doc__ or "").split("\n\n")[2:]  # after its summary and field notes
    return "\n\n".join([
        "Defaults follow the device JAX finds (probed in a child process, see bertjax.bench.run):",
        device_defaults_table(BenchSettings, EXCLUDED[mode]), *notes,
    ])


def _add_mode_arguments(parser: argparse.ArgumentParser, mode: str) -> None:
    """The options of `bertjax bench train` or `bertjax bench infer`: BenchSettings' fields."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _epilog(mode)
    parser.allow_abbrev = False
    add_field_arguments(parser, BenchSettings, exclude=EXCLUDED[mode],
                        parsers={"overrides": parse_override})
    parser.add_argument("--force", action="store_true", help="replace an existing --json file")


def _run_mode(args: argparse.Namespace, mode: str) -> int:
    """0 when every row ran or was skipped, 1 when one failed (options that do not fit raise
    BenchError: exit status 2 from `bertjax.cli.main`)."""
    settings = settings_from_args(BenchSettings, args, mode=mode)
    if settings.json_path:  # before the benchmark, not after it
        check_output_path(settings.json_path, "--json", force=args.force, example="bench.json")
    report = run_benchmark(settings)
    return 1 if report["failed"] else 0


# --- embed ------------------------------------------------------------------------------------


def _add_embed_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lines", type=positive_int, default=EMBED_DEFAULT_LINES, metavar="N",
                        help=f"Shakespeare sentences to embed (default: {EMBED_DEFAULT_LINES})")
    parser.add_argument("--file", default=None, metavar="FILE",
                        help="embed the lines of this UTF-8 file instead (the first --lines)")
    parser.add_argument("--model", default=None, metavar="DIR",
                        help="Hugging Face BERT directory or `bertjax pretrain` run directory "
                             "(default: all-MiniLM-L6-v2)")
    parser.add_argument("--batch-size", type=positive_int, default=64, metavar="N",
                        help="lines per sorted batch, both bertjax's and transformers' (default: 64)")
    parser.add_argument("--max-tokens", type=non_negative_int, default=EMBED_MAX_TOKENS,
                        metavar="N", help="token slots per batch of the packed bertjax row; 0: "
                                          f"no packed row (default: {EMBED_MAX_TOKENS})")
    parser.add_argument("--repeats", type=positive_int, default=3, help="timed repeats (default: 3)")
    parser.add_argument("--attn-implementation", choices=("sdpa", "eager"), default="sdpa",
                        help="transformers' attention (default: sdpa, its own default)")
    parser.add_argument("--json", default=None, metavar="FILE",
                        help="also write the numbers to this new file")
    parser.add_argument("--force", action="store_true", help="replace an existing --json file")


def _run_embed(args: argparse.Namespace) -> int:
    """`bertjax bench embed` (bad input raises: exit status 2 from `bertjax.cli.main`)."""
    # JAX, torch and transformers: imported when this benchmark runs, not for `--help`
    from bertjax.bench.embed import run_embed_benchmark, shakespeare_lines
    from bertjax.bench.stamp import write_result
    from bertjax.use.embed import read_lines

    if args.json:  # before the benchmark, not after it
        check_output_path(args.json, "--json", force=args.force, example="bench.json",
                          inputs={"--file": args.file, "--model": model_input(args.model)})
    if args.file is not None:
        lines = read_lines(args.file)[:args.lines]
    else:
        lines = shakespeare_lines(args.lines)
    result = run_embed_benchmark(lines, batch_size=args.batch_size, repeats=args.repeats,
                                 model=args.model, attn_implementation=args.attn_implementation,
                                 max_tokens=args.max_tokens or None)
    if args.json:
        with writing("--json", args.json):
            write_result(result, args.json, "embed", accelerator=_accelerator(result))
    return 0


# --- corpus -----------------------------------------------------------------------------------


def _add_corpus_arguments(parser: argparse.ArgumentParser) -> None:
    from bertjax.cli.data import seq_len_or_zero

    parser.add_argument("--sizes-mb", type=float_range(*corpus_bench.SIZES_MB), nargs="+",
                        default=[50, 200], metavar="MB",
                        help="corpus sizes in MB of text, each from "
                             f"{corpus_bench.SIZES_MB[0]:g} to {corpus_bench.SIZES_MB[1]:g} "
                             "(default: 50 200)")
    parser.add_argument("--formats", nargs="+", choices=corpus_bench.FORMATS, default=["parquet"],
                        help="corpus formats to generate (default: parquet)")
    parser.add_argument("--vocab", default=None, help="vocabulary (default: train 8,000 tokens "
                                                      "on the bundled plays)")
    parser.add_argument("--seq-len", type=seq_len_or_zero, default=0,
                        help="also make NSP pairs for this length (default: 0, none)")
    parser.add_argument("--cpus", type=positive_int, default=None,
                        help="pin each run to the first N cores (default: all this process may use)")
    parser.add_argument("--workdir", default=None, help="where the temporary corpora go "
                                                        "(default: the system's temporary directory)")
    _add_json_arguments(parser)


def _run_corpus(args: argparse.Namespace) -> int:
    """`bertjax bench corpus [--sizes-mb 50 200] [--formats parquet jsonl] ...`; --json is
    checked before the benchmark runs, and written aside then renamed."""
    if args.json:
        check_output_path(args.json, "--json", force=args.force, example="bench.json",
                          inputs={"--vocab": args.vocab})
    result = corpus_bench.run_corpus_benchmark(args.sizes_mb, args.formats, vocab=args.vocab,
                                               seq_len=args.seq_len, cpus=args.cpus,
                                               workdir=args.workdir)
    _write_json(args, result, "corpus")
    return 0


# --- finetune, pack ------------------------------------------------------------------------


def _add_finetune_arguments(parser: argparse.ArgumentParser) -> None:
    from bertjax.tasks.registry import BUNDLED  # no framework

    parser.add_argument("--tasks", type=subset_of(tuple(BUNDLED)), default=tuple(BUNDLED),
                        metavar="A,B", help=f"bundled tasks (default: all: {', '.join(BUNDLED)})")
    parser.add_argument("--model", default=None, metavar="DIR",
                        help="the model to fine-tune (default: all-MiniLM-L6-v2)")
    parser.add_argument("--seeds", type=positive_int, default=2,
                        help="seeds 0..N-1 of each mode (default: 2)")
    parser.add_argument("--epochs", type=positive_int, default=1, help="(default: 1)")
    parser.add_argument("--batch-size", type=positive_int, default=32,
                        help="examples per padded step (default: 32)")
    parser.add_argument("--max-length", type=int_range(8), default=128, help="(default: 128)")
    parser.add_argument("--max-tokens", type=positive_int, default=None, metavar="N",
                        help="token slots per packed step (default: as many steps as padded)")
    parser.add_argument("--limit", type=positive_int, default=None, metavar="N",
                        help="only N training and N validation examples, drawn with a fixed seed "
                             "(a quick check)")
    _add_json_arguments(parser)


def _add_json_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", default=None, metavar="FILE",
                        help="also write the numbers to this new file")
    parser.add_argument("--force", action="store_true", help="replace an existing --json file")


def _write_json(args: argparse.Namespace, result: dict[str, Any], kind: str) -> None:
    """The result, stamped (`bench.stamp`), to --json if given (checked before the run)."""
    from bertjax.bench.stamp import write_result

    if args.json:
        with writing("--json", args.json):
            write_result(result, args.json, kind, accelerator=_accelerator(result))


def _run_finetune(args: argparse.Namespace) -> int:
    from bertjax.bench.finetune import run_finetune_benchmark

    if args.json:  # before the benchmark, not after it
        check_output_path(args.json, "--json", force=args.force, example="bench.json",
                          inputs={"--model": model_input(args.model)})
    result = run_finetune_benchmark(args.tasks, model=args.model, seeds=range(args.seeds),
                                    epochs=args.epochs, batch_size=args.batch_size,
                                    max_length=args.max_length, max_tokens=args.max_tokens,
                                    limit=args.limit)
    _write_json(args, result, "finetune")
    return 0


def _add_pack_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="mini", help="model size (default: mini, the recipe's)")
    parser.add_argument("--seq-len", type=int_range(16), default=128, help="(default: 128)")
    parser.add_argument("--batch-size", type=positive_int, default=8,
                        help="rows a step (default: 8, the recipe's)")
    parser.add_argument("--steps", type=positive_int, default=20,
                        help="train steps per timed repeat (default: 20)")
    parser.add_argument("--repeats", type=positive_int, default=3, help="(default: 3)")
    _add_json_arguments(parser)


def _run_pack(args: argparse.Namespace) -> int:
    from bertjax.bench.packing import run_packing_benchmark

    if args.json:  # before the benchmark, not after it
        check_output_path(args.json, "--json", force=args.force, example="bench.json")
    result = run_packing_benchmark(preset=args.preset, seq_len=args.seq_len,
                                   batch_size=args.batch_size, steps=args.steps,
                                   repeats=args.repeats)
    _write_json(args, result, "pack")
    return 0


def _accelerator(result: dict[str, Any]) -> str | None:
    """The GPU/TPU a result was measured on, None on a CPU (its `device` line names it)."""
    device = str(result.get("device", ""))
    return None if not device or device.lower().startswith("cpu") else device


# name -> (help, add_arguments, run)
BENCHMARKS = {
    "data": ("data pipeline: tokenisation MB/s, masked sequences/s (one core)",
             _add_data_arguments, _run_data),
    "train": ("training step (forward, backward, AdamW) tokens/s and MFU: bertjax fp32/bf16, "
              "transformers eager/compiled, bert_torch side by side",
              functools.partial(_add_mode_arguments, mode="train"),
              functools.partial(_run_mode, mode="train")),
    "infer": ("inference forward tokens/s and MFU: bertjax fp32/bf16, transformers "
              "eager/compiled, bert_torch side by side",
              functools.partial(_add_mode_arguments, mode="infer"),
              functools.partial(_run_mode, mode="infer")),
    "embed": ("sentences/s of `bertjax embed` (all-MiniLM-L6-v2, mean pooling) against "
              "transformers eager with the same batches", _add_embed_arguments, _run_embed),
    "corpus": ("`bertjax data` on generated Parquet / JSON-lines corpora of several sizes: input "
               "MB/s and peak RSS", _add_corpus_arguments, _run_corpus),
    "finetune": ("an epoch of each bundled fine-tuning task, padded batches against packed "
                 "(--max-tokens), two seeds: training wall time and validation scores",
                 _add_finetune_arguments, _run_finetune),
    "pack": ("pre-training on short documents (the plays as speeches): the share of real "
             "tokens per row and tokens of real text per second, unpacked against packed",
             _add_pack_arguments, _run_pack),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="subcommand", metavar="WHAT", required=True)
    for name, (help_text, add, _) in BENCHMARKS.items():
        add(sub.add_parser(name, help=help_text, description=help_text))


def run(args: argparse.Namespace) -> int:
    return BENCHMARKS[args.subcommand][2](args)
