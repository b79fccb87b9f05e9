"""The settings of every `bertjax bench` command: `BenchSettings` (`train`, `infer`) with their
device-dependent defaults, and `DataBench`, `EmbedBench`, `CorpusBench`, `FinetuneBench`,
`PackBench`.

Each setting is one dataclass field: its default, help, choices and range are its metadata, from
which `bertjax.cli.bench` derives the options as every job does (`bertjax.cli.options`: `--config`
and `--print-config` too). Settings of `BenchSettings` left None take the default of the device
JAX finds (probed in a child process, see `bertjax.bench.run`): the `device_default` of the
field, for CPU and for GPU/TPU.

Dropout is off by default on the CPU: the CPU run checks the bench and compares the model code
on a development machine, and there dropout's random bits (threefry in XLA, torch's Philox)
would weigh as much as the model. `--dropout 0.1` puts them back.

The model configuration is the preset, then `--dropout`, then `--set NAME=VALUE` overrides of
any `BertConfig` field (so fields added later are reachable too), then each row's dtype.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from bertjax.bench.batch import MIN_SEQ_LEN, default_predictions
from bertjax.common.options import option_field
from bertjax.config import COMPUTE_DTYPES, MAX_VOCAB_SIZE, PRESETS, BertConfig
from bertjax.data.corpus import CORPUS_HELP, SPLITS
from bertjax.data.pairs import MIN_SEQ_LEN as MIN_PAIR_LEN
from bertjax.data.tokenizer import MIN_VOCAB_SIZE
from bertjax.errors import InputError
from bertjax.tasks.registry import BUNDLED
from bertjax.train.choices import PRNG_IMPLS

IMPLS = ("bertjax", "hf-eager", "hf-compiled", "bert_torch")
HF_IMPLS = ("hf-eager", "hf-compiled")
TORCH_IMPLS = (*HF_IMPLS, "bert_torch")
SHORT_DTYPE = {"float32": "fp32", "bfloat16": "bf16"}
INSTALL_HINT = "pip install 'bertjax[bench]'"


class BenchError(InputError):
    """Options that cannot be benchmarked together; the message says what to change."""


@dataclasses.dataclass(frozen=True)
class Row:
    """One implementation at one compute dtype."""

    impl: str
    dtype: str

    @property
    def name(self) -> str:
        return f"{self.impl} {SHORT_DTYPE[self.dtype]}"


def _option(default: Any, help: str, choices: tuple[str, ...] | None = None,  # noqa: A002
            **metadata: Any) -> Any:
    """A setting and its command-line metadata: `check`, `minimum`, `device_default` (CPU,
    GPU/TPU), `flag`, `metavar`, `default_help`, `repeatable`."""
    return option_field(default, help, choices, **metadata)


JSON_HELP = "also write every number as JSON to this new file (--force: replace one)"
DEFAULT_MAX_TOKENS = 2048  # token slots per packed batch of `bench embed`'s packed row
SIZES_MB = (0.1, 100_000.0)  # the corpus sizes `bench corpus` makes, in MB of text


@dataclasses.dataclass(frozen=True)
class BenchSettings:
    """What one benchmark run measures; None means "the default for the device"."""

    mode: str = "train"  # the sub-command, not an option (no help)
    preset: str | None = _option(None, "model size", tuple(sorted(PRESETS)),
                                 device_default=("mini", "base"))
    seq: int = _option(128, "tokens per sequence", minimum=MIN_SEQ_LEN)
    batch: int | None = _option(None, "sequences per step", check="positive",
                                device_default=(32, 256))
    predictions: int | None = _option(None, "masked positions per sequence", check="positive",
                                      default_help="round(0.15 * seq), as BERT")
    dropout: float | None = _option(None, "hidden and attention dropout probability",
                                    check="probability", device_default=(0.0, 0.1))
    steps: int | None = _option(None, "timed steps, also the pipelined run's length",
                                check="positive", device_default=(10, 50))
    warmup: int | None = _option(None, "untimed steps after the first", check="non_negative",
                                 device_default=(2, 10))
    dtypes: tuple[str, ...] = _option(COMPUTE_DTYPES, "compute dtypes of the bertjax rows",
                                      COMPUTE_DTYPES, flag="--dtype")
    hf_dtypes: tuple[str, ...] | None = _option(  # bert_torch runs in float32
        None, "dtypes of the transformers rows; bfloat16 is torch.autocast", COMPUTE_DTYPES,
        flag="--hf-dtype", device_default=(("float32",), ("bfloat16",)))
    impls: tuple[str, ...] = _option(IMPLS, "implementations to run", IMPLS, flag="--impl")
    overrides: tuple[tuple[str, Any], ...] = _option(
        (), "override a BertConfig field of the preset, e.g. --set num_hidden_layers=2 "
        "(repeatable)", flag="--set", metavar="NAME=VALUE", repeatable=True)
    threads: int | None = _option(None, "CPU cores for XLA and torch alike", check="positive",
                                  default_help="every core available")
    seed: int = _option(0, "parameter and batch seed", check="non_negative")
    gemm_size: int | None = _option(None, "side of the reference square matmul",
                                    check="positive", device_default=(4096, 8192))
    gemm_dtype: str | None = _option(None, "dtype of the reference matmul", COMPUTE_DTYPES,
                                     device_default=("float32", "bfloat16"))
    compile_backend: str = _option("inductor", "torch.compile backend of the hf-compiled rows")
    prng_impl: str = _option("threefry2x32", "PRNG of the bertjax rows' dropout", PRNG_IMPLS)
    flat_optimizer: bool = _option(
        False, "bertjax rows: clipping and AdamW's moments over one vector of every gradient "
        "(optim.flatten)")
    json_path: str | None = _option(None, JSON_HELP, flag="--json", metavar="FILE")

    def resolve(self, platform: str) -> BenchSettings:
        """Fill the device-dependent defaults for JAX's platform ('cpu', 'gpu', 'tpu')."""
        pick = 0 if platform == "cpu" else 1
        filled = {name: both[pick] for name, both in DEVICE_DEFAULTS.items()
                  if getattr(self, name) is None}
        if self.mode == "infer":
            filled["dropout"] = 0.0  # inference runs without dropout
        resolved = dataclasses.replace(self, **filled)
        if resolved.predictions is None:
            resolved = dataclasses.replace(resolved, predictions=default_predictions(resolved.seq))
        if resolved.threads is None:
            resolved = dataclasses.replace(resolved, threads=len(available_cores()))
        return resolved

    def cores(self) -> list[int]:
        """The CPU cores every child is pinned to: the first `threads` this process may use."""
        cores = available_cores()
        return cores[: self.threads or len(cores)]

    def bert_config(self, dtype: str = "float32") -> BertConfig:
        """The preset, then dropout, then the --set overrides, then `dtype` (resolved settings)."""
        assert self.preset is not None and self.dropout is not None, "resolve() first"
        model_type = dict(self.overrides).get("model_type", "bert")  # its family's preset
        try:
            config = BertConfig.from_preset(self.preset, model_type=model_type).replace(
                hidden_dropout_prob=self.dropout, attention_probs_dropout_prob=self.dropout)
            config = config.replace(**dict(self.overrides))
        except (TypeError, ValueError) as err:
            raise BenchError(f"--set: {err}") from err
        return config.replace(dtype=dtype)

    def rows(self) -> list[Row]:
        """The rows to run, in order: bertjax per dtype, transformers per dtype, bert_torch."""
        rows = [Row("bertjax", d) for d in self.dtypes if "bertjax" in self.impls]
        rows += [Row(i, d) for d in self.hf_dtypes or () for i in HF_IMPLS if i in self.impls]
        rows += [Row("bert_torch", "float32")] if "bert_torch" in self.impls else []
        return rows

    def validate(self) -> None:
        """Raise BenchError for options that do not fit together (after `resolve`)."""
        assert self.predictions is not None and self.dropout is not None, "resolve() first"
        config = self.bert_config()
        if self.seq > config.max_sequence_length:
            raise BenchError(
                f"--seq {self.seq} is longer than max_position_embeddings="
                f"{config.max_position_embeddings} of preset {self.preset!r}"
                + (f" less {config.model_type}'s {config.position_offset} rows before its first "
                   "position" if config.position_offset else "")
                + f"; use a shorter --seq or --set max_position_embeddings="
                f"{self.seq + config.position_offset}")
        if not 1 <= self.predictions <= self.seq:
            raise BenchError(f"--predictions {self.predictions} must be between 1 and --seq "
                             f"{self.seq}")
        if not 0.0 <= self.dropout < 1.0:
            raise BenchError(f"--dropout {self.dropout} must be in [0, 1)")
        self.check_threads()
        if not self.rows():
            raise BenchError(f"nothing to run: --impl {','.join(self.impls)} with --dtype "
                             f"{','.join(self.dtypes)} and --hf-dtype {','.join(self.hf_dtypes or ())}"
                             " selects no row")

    def check_threads(self) -> None:
        """Raise BenchError unless --threads fits the cores this process may use."""
        if self.threads is not None and not 1 <= self.threads <= len(available_cores()):
            raise BenchError(f"--threads {self.threads} must be between 1 and the "
                             f"{len(available_cores())} cores this process may use")

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["overrides"] = dict(self.overrides)
        return data


# Device-dependent defaults, from the fields: {setting: (CPU, GPU/TPU)}.
DEVICE_DEFAULTS: dict[str, tuple[Any, Any]] = {
    f.name: f.metadata["device_default"] for f in dataclasses.fields(BenchSettings)
    if "device_default" in f.metadata
}


def available_cores() -> list[int]:
    """The CPU cores this process may run on, in order."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


# --- the other benchmarks ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DataBench:
    """`bertjax bench data`: tokenisation and masked batches on one core."""

    corpus: tuple[str, ...] = _option(("shakespeare",), CORPUS_HELP, metavar="SPEC")
    split: str = _option("train", "the Shakespeare plays to use (other corpora: ignored)", SPLITS)
    text_field: str = _option("text", "the JSON field or Parquet/Arrow column of the text")
    vocab: str | None = _option(None, "vocabulary to use", metavar="PATH",
                                default_help="train one of vocab_size first")
    vocab_size: int = _option(8000, "size of the vocabulary trained when --vocab is not given",
                              minimum=MIN_VOCAB_SIZE, maximum=MAX_VOCAB_SIZE)
    seq_len: int = _option(128, "tokens per sequence", minimum=MIN_PAIR_LEN)
    batch_size: int = _option(256, "sequences per batch", check="positive")
    max_predictions: int = _option(20, "masked positions per sequence", check="positive")
    whole_word_mask: bool = _option(False, "mask whole words")
    steps: int = _option(50, "batches per timed repeat", check="positive")
    repeats: int = _option(5, "timed repeats", check="positive")
    warmup: int = _option(1, "untimed repeats first", check="non_negative")
    cpu: int | None = _option(None, "core to pin to, one this process may use",
                              check="non_negative", default_help="the first")
    json_path: str | None = _option(None, JSON_HELP, flag="--json", metavar="FILE")


@dataclasses.dataclass(frozen=True)
class EmbedBench:
    """`bertjax bench embed`: sentences/s of `bertjax embed` against transformers."""

    lines: int = _option(10_000, "Shakespeare sentences to embed", check="positive")
    file: str | None = _option(None, "embed the lines of this UTF-8 file instead (the first "
                                     "--lines)", metavar="FILE")
    model: str | None = _option(None, "Hugging Face BERT directory or `bertjax pretrain` run "
                                      "directory", metavar="DIR", default_help="all-MiniLM-L6-v2")
    batch_size: int = _option(64, "lines per sorted batch, both bertjax's and transformers'",
                              check="positive")
    max_tokens: int = _option(DEFAULT_MAX_TOKENS, "token slots per batch of the packed bertjax "
                                                  "row; 0: no packed row", check="non_negative")
    repeats: int = _option(3, "timed repeats", check="positive")
    attn_implementation: str = _option("sdpa", "transformers' attention (sdpa: its own default)",
                                       ("sdpa", "eager"))
    json_path: str | None = _option(None, JSON_HELP, flag="--json", metavar="FILE")


@dataclasses.dataclass(frozen=True)
class CorpusBench:
    """`bertjax bench corpus`: `bertjax data` on generated corpora of several sizes."""

    sizes_mb: tuple[float, ...] = _option((50.0, 200.0), "corpus sizes in MB of text",
                                          minimum=SIZES_MB[0], maximum=SIZES_MB[1])
    formats: tuple[str, ...] = _option(("parquet",), "corpus formats to generate",
                                       ("parquet", "jsonl", "jsonl.zst"))
    vocab: str | None = _option(None, "vocabulary", metavar="PATH",
                                default_help="train 8,000 tokens on the bundled plays")
    seq_len: int = _option(0, f"also make NSP pairs for this length (at least {MIN_PAIR_LEN}, "
                              "[CLS] a [SEP] b [SEP]); 0: none", check="non_negative")
    cpus: int | None = _option(None, "pin each run to the first N cores", check="positive",
                               default_help="all this process may use")
    workdir: str | None = _option(None, "where the temporary corpora go", metavar="DIR",
                                  default_help="the system's temporary directory")
    json_path: str | None = _option(None, JSON_HELP, flag="--json", metavar="FILE")

    def __post_init__(self) -> None:
        if 0 < self.seq_len < MIN_PAIR_LEN:
            raise InputError(f"seq_len must be 0 (no pairs) or at least {MIN_PAIR_LEN} (the "
                             f"shortest sequence that holds [CLS] a [SEP] b [SEP]), got "
                             f"{self.seq_len}")


@dataclasses.dataclass(frozen=True)
class FinetuneBench:
    """`bertjax bench finetune`: an epoch of each bundled task, padded against packed."""

    tasks: tuple[str, ...] = _option(tuple(BUNDLED), "bundled tasks", tuple(BUNDLED))
    model: str | None = _option(None, "the model to fine-tune", metavar="DIR",
                                default_help="all-MiniLM-L6-v2")
    seeds: int = _option(2, "seeds 0..N-1 of each mode", check="positive")
    epochs: int = _option(1, "epochs", check="positive")
    batch_size: int = _option(32, "examples per padded step", check="positive")
    max_length: int = _option(128, "tokens per example", minimum=8)
    max_tokens: int | None = _option(None, "token slots per packed step", check="positive",
                                     default_help="as many steps as padded")
    limit: int | None = _option(None, "only N training and N validation examples, drawn with a "
                                      "fixed seed (a quick check)", check="positive")
    json_path: str | None = _option(None, JSON_HELP, flag="--json", metavar="FILE")


@dataclasses.dataclass(frozen=True)
class PackBench:
    """`bertjax bench pack`: pre-training on short documents, unpacked against packed."""

    preset: str = _option("mini", "model size (the recipe's)", tuple(sorted(PRESETS)))
    seq_len: int = _option(128, "tokens per row", minimum=16)
    batch_size: int = _option(8, "rows a step (the recipe's)", check="positive")
    steps: int = _option(20, "train steps per timed repeat", check="positive")
    repeats: int = _option(3, "timed repeats", check="positive")
    json_path: str | None = _option(None, JSON_HELP, flag="--json", metavar="FILE")
