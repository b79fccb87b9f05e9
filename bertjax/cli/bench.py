"""`bertjax bench WHAT`: benchmarks. `data`: tokenisation MB/s and masked sequences/s on one core;
`train` / `infer`: the training step / inference forward of bertjax (float32, bfloat16),
transformers (eager, torch.compile) and bert_torch side by side (`bertjax.bench`); `embed`:
sentence-embedding throughput against transformers (packed and in sorted batches); `corpus`:
`bertjax data`'s MB/s and peak memory on large generated corpora; `finetune`: the bundled tasks,
padded batches against packed; `pack`: pre-training on short documents, unpacked against packed.

Each benchmark is a sub-command whose options are the fields of its settings dataclass
(`bertjax.bench.options`), derived as every job's are (`bertjax.cli.options`: `--config FILE`
and `--print-config` too); `--force` replaces an existing `--json` file.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any

from bertjax.bench import options as bench_options
from bertjax.bench.options import (
    BenchSettings,
    CorpusBench,
    DataBench,
    EmbedBench,
    FinetuneBench,
    PackBench,
)
from bertjax.cli.errors import writing
from bertjax.cli.options import (
    add_settings_arguments,
    explain_unknown_in,
    print_config,
    settings_from_args,
)
from bertjax.cli.outputs import check_output_path, model_input
from bertjax.common.options import options, parse_value
from bertjax.config import BertConfig
from bertjax.data.corpus import corpus_paths

# Options a mode does not have (inference runs without dropout).
EXCLUDED = {"train": (), "infer": ("dropout",)}


def parse_override(text: str) -> tuple[str, Any]:
    """`--set NAME=VALUE` -> (BertConfig field, value of the field's type)."""
    fields = {o.name: o for o in options(BertConfig, every_field=True)}
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
        return name, parse_value(fields[name], raw, source=None)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _device_defaults_table(exclude: tuple[str, ...]) -> str:
    """The options whose default depends on the device, as a table for --help."""
    rows = [(o.flag, *(_show(v) for v in o.metadata["device_default"]))
            for o in options(BenchSettings) if "device_default" in o.metadata
            and o.name not in exclude]
    width = max(len(r[0]) for r in [("option",), *rows]) + 2
    lines = [f"{'option':<{width}}{'CPU':<12}GPU / TPU"]
    lines += [f"{flag:<{width}}{cpu:<12}{accelerator}" for flag, cpu, accelerator in rows]
    return "\n".join("    " + line for line in lines)


def _show(value: Any) -> str:
    return ",".join(value) if isinstance(value, tuple) else str(value)


def _epilog(mode: str) -> str:
    """The device-dependent defaults as a table, then the notes of `bertjax.bench.options`."""
    notes = (bench_options.__doc__ or "").split("\n\n")[2:]  # after its summary and field notes
    return "\n\n".join([
        "Defaults follow the device JAX finds (probed in a child process, see bertjax.bench.run):",
        _device_defaults_table(EXCLUDED[mode]), *notes,
    ])


# --- what each benchmark runs -----------------------------------------------------------------


def _run_mode(settings: BenchSettings) -> int:
    """0 when every row ran or was skipped, 1 when one failed."""
    from bertjax.bench.run import run_benchmark

    report = run_benchmark(settings)
    return 1 if report["failed"] else 0


def _run_data(settings: DataBench) -> dict[str, Any]:
    from bertjax.bench.data import run_data_benchmark  # tokenizers: only for this benchmark

    return run_data_benchmark(**_arguments(settings))


def _run_embed(settings: EmbedBench) -> dict[str, Any]:
    # JAX, torch and transformers: imported when this benchmark runs, not for `--help`
    from bertjax.bench.embed import run_embed_benchmark, shakespeare_lines
    from bertjax.use.embed import read_lines

    lines = (read_lines(settings.file)[:settings.lines] if settings.file is not None
             else shakespeare_lines(settings.lines))
    return run_embed_benchmark(lines, batch_size=settings.batch_size, repeats=settings.repeats,
                               model=settings.model,
                               attn_implementation=settings.attn_implementation,
                               max_tokens=settings.max_tokens or None)


def _run_corpus(settings: CorpusBench) -> dict[str, Any]:
    from bertjax.bench.corpus import run_corpus_benchmark

    return run_corpus_benchmark(settings.sizes_mb, settings.formats, vocab=settings.vocab,
                                seq_len=settings.seq_len, cpus=settings.cpus,
                                workdir=settings.workdir)


def _run_finetune(settings: FinetuneBench) -> dict[str, Any]:
    from bertjax.bench.finetune import run_finetune_benchmark

    arguments = _arguments(settings)
    return run_finetune_benchmark(arguments.pop("tasks"), seeds=range(arguments.pop("seeds")),
                                  **arguments)


def _run_pack(settings: PackBench) -> dict[str, Any]:
    from bertjax.bench.packing import run_packing_benchmark

    return run_packing_benchmark(**_arguments(settings))


def _arguments(settings: Any) -> dict[str, Any]:
    """The settings as the benchmark function's keyword arguments (the output file left out)."""
    return {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)
            if f.name != "json_path"}


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """One `bertjax bench` command: its help, settings class and what it runs. `run` returns the
    result to write to --json (stamped), or an exit status where it writes its own."""

    help: str
    settings: type
    run: Callable[[Any], Any]
    exclude: tuple[str, ...] = ()
    inputs: Callable[[Any], dict[str, Any]] = lambda settings: {}  # what it reads, by option


BENCHMARKS: dict[str, Benchmark] = {
    "data": Benchmark("data pipeline: tokenisation MB/s, masked sequences/s (one core)",
                      DataBench, _run_data,
                      inputs=lambda s: {"--corpus": corpus_paths(s.corpus), "--vocab": s.vocab}),
    "train": Benchmark("training step (forward, backward, AdamW) tokens/s and MFU: bertjax "
                       "fp32/bf16, transformers eager/compiled, bert_torch side by side",
                       BenchSettings, _run_mode),
    "infer": Benchmark("inference forward tokens/s and MFU: bertjax fp32/bf16, transformers "
                       "eager/compiled, bert_torch side by side", BenchSettings, _run_mode,
                       exclude=EXCLUDED["infer"]),
    "embed": Benchmark("sentences/s of `bertjax embed` (all-MiniLM-L6-v2, mean pooling) against "
                       "transformers eager with the same batches", EmbedBench, _run_embed,
                       inputs=lambda s: {"--file": s.file, "--model": model_input(s.model)}),
    "corpus": Benchmark("`bertjax data` on generated Parquet / JSON-lines corpora of several "
                        "sizes: input MB/s and peak RSS", CorpusBench, _run_corpus,
                        inputs=lambda s: {"--vocab": s.vocab}),
    "finetune": Benchmark("an epoch of each bundled fine-tuning task, padded batches against "
                          "packed (--max-tokens), two seeds: training wall time and validation "
                          "scores", FinetuneBench, _run_finetune,
                          inputs=lambda s: {"--model": model_input(s.model)}),
    "pack": Benchmark("pre-training on short documents (the plays as speeches): the share of real "
                      "tokens per row and tokens of real text per second, unpacked against "
                      "packed", PackBench, _run_pack),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="subcommand", metavar="WHAT", required=True)
    for name, bench in BENCHMARKS.items():
        command = sub.add_parser(name, help=bench.help, description=bench.help)
        if bench.settings is BenchSettings:
            command.formatter_class = argparse.RawDescriptionHelpFormatter
            command.epilog = _epilog(name)
        add_settings_arguments(command, bench.settings, exclude=bench.exclude,
                               parsers={"overrides": parse_override})
        command.add_argument("--force", action="store_true",
                             help="replace an existing --json file")


def explain_unknown(arguments: list[str]) -> str:
    """The error for options a benchmark does not know: the closest valid names."""
    return explain_unknown_in(arguments, [bench.settings for bench in BENCHMARKS.values()],
                              ("--config", "--print-config", "--force"))


def run(args: argparse.Namespace) -> int:
    bench = BENCHMARKS[args.subcommand]
    base = (BenchSettings(mode=args.subcommand) if bench.settings is BenchSettings
            else bench.settings())
    settings = settings_from_args(args, bench.settings, base=base, exclude=bench.exclude)
    if args.print_config:
        print(print_config(settings, exclude=bench.exclude), end="")
        return 0
    if settings.json_path:  # before the benchmark, not after it
        check_output_path(settings.json_path, "--json", force=args.force,
                          inputs=bench.inputs(settings), example="bench.json")
    result = bench.run(settings)
    if isinstance(result, int):
        return result
    if settings.json_path:
        from bertjax.bench.stamp import write_result

        with writing("--json", settings.json_path):
            write_result(result, settings.json_path, args.subcommand,
                         accelerator=_accelerator(result))
    return 0


def _accelerator(result: dict[str, Any]) -> str | None:
    """The GPU/TPU a result was measured on, None on a CPU (its `device` line names it)."""
    device = str(result.get("device", ""))
    return None if not device or device.lower().startswith("cpu") else device
