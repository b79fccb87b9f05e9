"""Options of `bertjax bench train|infer` and their device-dependent defaults.

Defaults follow the device JAX finds (probed in a child process, see `bertjax.bench.run`):

    option         CPU                         GPU / TPU
    --preset       mini                        base
    --batch        32                          256
    --seq          128                         128
    --predictions  round(0.15 * seq)           round(0.15 * seq)
    --dropout      0.0                         0.1 (as in real training)
    --steps        10 (+ 2 warm-up)            50 (+ 10 warm-up)
    --hf-dtype     float32                     bfloat16 (torch.autocast)

Dropout is off by default on the CPU: the CPU run checks the bench and compares the model code
on a development machine, and there dropout's random bits (threefry in XLA, torch's Philox)
would weigh as much as the model. `--dropout 0.1` puts them back.

The model configuration is the preset, then `--dropout`, then `--set NAME=VALUE` overrides of
any `BertConfig` field (so fields added later are reachable too), then each row's dtype.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from bertjax.bench.batch import default_predictions
from bertjax.cli.argtypes import positive_int
from bertjax.config import COMPUTE_DTYPES, PRESETS, BertConfig

IMPLS = ("bertjax", "hf-eager", "hf-compiled", "bert_torch")
HF_IMPLS = ("hf-eager", "hf-compiled")
TORCH_IMPLS = (*HF_IMPLS, "bert_torch")
MODES = ("train", "infer")
SHORT_DTYPE = {"float32": "fp32", "bfloat16": "bf16"}
INSTALL_HINT = "pip install 'bertjax[bench]'"

# Device-dependent defaults: (CPU, accelerator).
DEFAULTS: dict[str, tuple[Any, Any]] = {
    "preset": ("mini", "base"),
    "batch": (32, 256),
    "dropout": (0.0, 0.1),
    "steps": (10, 50),
    "warmup": (2, 10),
    "hf_dtypes": (("float32",), ("bfloat16",)),
}


class BenchError(ValueError):
    """Options that cannot be benchmarked together; the message says what to change."""


@dataclasses.dataclass(frozen=True)
class Row:
    """One implementation at one compute dtype."""

    impl: str
    dtype: str

    @property
    def name(self) -> str:
        return f"{self.impl} {SHORT_DTYPE[self.dtype]}"


@dataclasses.dataclass(frozen=True)
class BenchSettings:
    """What one benchmark run measures; None means "the default for the device"."""

    mode: str = "train"
    preset: str | None = None
    seq: int = 128
    batch: int | None = None
    predictions: int | None = None
    dropout: float | None = None
    steps: int | None = None
    warmup: int | None = None
    dtypes: tuple[str, ...] = COMPUTE_DTYPES  # bertjax rows
    hf_dtypes: tuple[str, ...] | None = None  # transformers rows (bert_torch is float32)
    impls: tuple[str, ...] = IMPLS
    overrides: tuple[tuple[str, Any], ...] = ()  # (BertConfig field, value) from --set
    threads: int | None = None  # None: every core this process may use
    seed: int = 0
    gemm_size: int | None = None  # None: 4096 on CPU, 8192 on accelerators
    gemm_dtype: str | None = None  # None: float32 on CPU, bfloat16 on accelerators
    compile_backend: str = "inductor"
    prng_impl: str = "threefry2x32"  # of the bertjax rows' dropout (bertjax.train.step)
    json_path: str | None = None

    def resolve(self, platform: str) -> BenchSettings:
        """Fill the device-dependent defaults for JAX's platform ('cpu', 'gpu', 'tpu')."""
        pick = 0 if platform == "cpu" else 1
        filled = {name: DEFAULTS[name][pick] for name in DEFAULTS if getattr(self, name) is None}
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
        config = BertConfig.from_preset(self.preset).replace(
            hidden_dropout_prob=self.dropout, attention_probs_dropout_prob=self.dropout)
        try:
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
        config = self.bert_config()
        if self.seq > config.max_position_embeddings:
            raise BenchError(
                f"--seq {self.seq} is longer than max_position_embeddings="
                f"{config.max_position_embeddings} of preset {self.preset!r}; use a shorter --seq "
                f"or --set max_position_embeddings={self.seq}")
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


def available_cores() -> list[int]:
    """The CPU cores this process may run on, in order."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


# --- argparse ---------------------------------------------------------------------------------


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1), got {text!r}")
    return value


def _choices(allowed: tuple[str, ...]) -> Any:
    def parse(text: str) -> tuple[str, ...]:
        items = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
        bad = [t for t in items if t not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"{', '.join(map(repr, bad)) or 'nothing'} given; choose a comma-separated subset "
                f"of {', '.join(allowed)}")
        return items
    return parse


def parse_override(text: str) -> tuple[str, Any]:
    """`NAME=VALUE` -> (BertConfig field, value of the field's type)."""
    fields = {f.name: f for f in dataclasses.fields(BertConfig)}
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
    default = fields[name].default
    kind = type(default) if default is not dataclasses.MISSING and default is not None else str
    try:
        if kind is bool:
            if raw.lower() not in ("true", "false", "1", "0"):
                raise ValueError(raw)
            value: Any = raw.lower() in ("true", "1")
        else:
            value = kind(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--set {name}: expected a {kind.__name__}, got {raw!r}") from None
    return name, value


def add_arguments(parser: argparse.ArgumentParser, mode: str) -> None:
    """The options of `bertjax bench train` (mode 'train') or `bertjax bench infer`."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n", 2)[2]
    parser.allow_abbrev = False
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None,
                        help="model size (default: mini on CPU, base on GPU/TPU)")
    parser.add_argument("--seq", type=positive_int, default=128, help="tokens per sequence (default: 128)")
    parser.add_argument("--batch", type=positive_int, default=None,
                        help="sequences per step (default: 32 on CPU, 256 on GPU/TPU)")
    parser.add_argument("--predictions", type=positive_int, default=None,
                        help="masked positions per sequence (default: round(0.15 * seq), as BERT)")
    if mode == "train":
        parser.add_argument("--dropout", type=_probability, default=None,
                            help="hidden and attention dropout probability (default: 0.0 on CPU, "
                                 "0.1 on GPU/TPU)")
    parser.add_argument("--steps", type=positive_int, default=None,
                        help="timed steps, also the pipelined run's length (default: 10 on CPU, 50 "
                             "on GPU/TPU)")
    parser.add_argument("--warmup", type=_non_negative, default=None,
                        help="untimed steps after the first (default: 2 on CPU, 10 on GPU/TPU)")
    parser.add_argument("--dtype", type=_choices(COMPUTE_DTYPES), default=COMPUTE_DTYPES,
                        help="compute dtypes of the bertjax rows (default: float32,bfloat16)")
    parser.add_argument("--hf-dtype", type=_choices(COMPUTE_DTYPES), default=None,
                        help="dtypes of the transformers rows; bfloat16 is torch.autocast "
                             "(default: float32 on CPU, bfloat16 on GPU)")
    parser.add_argument("--impl", type=_choices(IMPLS), default=IMPLS,
                        help=f"implementations to run (default: {','.join(IMPLS)})")
    parser.add_argument("--set", dest="overrides", type=parse_override, action="append",
                        default=[], metavar="NAME=VALUE",
                        help="override a BertConfig field of the preset, e.g. --set "
                             "num_hidden_layers=2 (repeatable)")
    parser.add_argument("--threads", type=positive_int, default=None,
                        help="CPU cores for XLA and torch alike (default: every core available)")
    parser.add_argument("--seed", type=int, default=0, help="parameter and batch seed (default: 0)")
    parser.add_argument("--gemm-size", type=positive_int, default=None,
                        help="side of the reference square matmul (default: 4096 CPU, 8192 GPU/TPU)")
    parser.add_argument("--gemm-dtype", choices=COMPUTE_DTYPES, default=None,
                        help="dtype of the reference matmul (default: float32 CPU, bfloat16 GPU/TPU)")
    parser.add_argument("--compile-backend", default="inductor",
                        help="torch.compile backend of the hf-compiled rows (default: inductor)")
    parser.add_argument("--prng", dest="prng_impl", default="threefry2x32",
                        choices=("threefry2x32", "rbg", "unsafe_rbg"),
                        help="PRNG of the bertjax rows' dropout (default: threefry2x32)")
    parser.add_argument("--json", dest="json_path", metavar="PATH", default=None,
                        help="also write every number as JSON to PATH")


def settings_from_args(args: argparse.Namespace, mode: str) -> BenchSettings:
    """The parsed command line as BenchSettings (defaults still unresolved)."""
    return BenchSettings(
        mode=mode, preset=args.preset, seq=args.seq, batch=args.batch,
        predictions=args.predictions, dropout=getattr(args, "dropout", None), steps=args.steps,
        warmup=args.warmup, dtypes=tuple(args.dtype), hf_dtypes=args.hf_dtype,
        impls=tuple(args.impl), overrides=tuple(args.overrides), threads=args.threads,
        seed=args.seed, gemm_size=args.gemm_size, gemm_dtype=args.gemm_dtype,
        compile_backend=args.compile_backend, prng_impl=args.prng_impl, json_path=args.json_path,
    )
