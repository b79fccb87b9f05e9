"""Settings of `bertjax bench train|infer` (`BenchSettings`) and their device-dependent defaults.

Each setting is one dataclass field: its default, help, choices and command-line name are its
metadata, from which `bertjax.cli.bench` derives the options (`bertjax.cli.fields`). Settings left
None take the default of the device JAX finds (probed in a child process, see
`bertjax.bench.run`): the `device_default` of the field, for CPU and for GPU/TPU.

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
from bertjax.config import COMPUTE_DTYPES, PRESETS, BertConfig
from bertjax.train.choices import PRNG_IMPLS

IMPLS = ("bertjax", "hf-eager", "hf-compiled", "bert_torch")
HF_IMPLS = ("hf-eager", "hf-compiled")
TORCH_IMPLS = (*HF_IMPLS, "bert_torch")
SHORT_DTYPE = {"float32": "fp32", "bfloat16": "bf16"}
INSTALL_HINT = "pip install 'bertjax[bench]'"


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


def _option(default: Any, help: str, **metadata: Any) -> Any:  # noqa: A002
    """A setting and its command-line metadata (`bertjax.cli.fields` reads it): `choices`,
    `device_default` (CPU, GPU/TPU), `check`, `flag`, `metavar`, `default_help`, `repeatable`."""
    return dataclasses.field(default=default, metadata={"help": help, **metadata})


@dataclasses.dataclass(frozen=True)
class BenchSettings:
    """What one benchmark run measures; None means "the default for the device"."""

    mode: str = "train"  # the sub-command, not an option (no help)
    preset: str | None = _option(None, "model size", choices=tuple(sorted(PRESETS)),
                                 device_default=("mini", "base"))
    seq: int = _option(128, "tokens per sequence", check="positive")
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
                                      choices=COMPUTE_DTYPES, flag="--dtype")
    hf_dtypes: tuple[str, ...] | None = _option(  # bert_torch runs in float32
        None, "dtypes of the transformers rows; bfloat16 is torch.autocast", choices=COMPUTE_DTYPES,
        flag="--hf-dtype", device_default=(("float32",), ("bfloat16",)))
    impls: tuple[str, ...] = _option(IMPLS, "implementations to run", choices=IMPLS, flag="--impl")
    overrides: tuple[tuple[str, Any], ...] = _option(
        (), "override a BertConfig field of the preset, e.g. --set num_hidden_layers=2 "
        "(repeatable)", flag="--set", metavar="NAME=VALUE", repeatable=True)
    threads: int | None = _option(None, "CPU cores for XLA and torch alike", check="positive",
                                  default_help="every core available")
    seed: int = _option(0, "parameter and batch seed", check="non_negative")
    gemm_size: int | None = _option(None, "side of the reference square matmul",
                                    check="positive", device_default=(4096, 8192))
    gemm_dtype: str | None = _option(None, "dtype of the reference matmul", choices=COMPUTE_DTYPES,
                                     device_default=("float32", "bfloat16"))
    compile_backend: str = _option("inductor", "torch.compile backend of the hf-compiled rows")
    prng_impl: str = _option("threefry2x32", "PRNG of the bertjax rows' dropout",
                             choices=PRNG_IMPLS, flag="--prng")
    flat_optimizer: bool = _option(
        False, "bertjax rows: clipping and AdamW's moments over one vector of every gradient "
        "(optim.flatten)")
    json_path: str | None = _option(None, "also write every number as JSON to PATH",
                                    flag="--json", metavar="PATH")

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
        if self.seq < MIN_SEQ_LEN:
            raise BenchError(f"--seq {self.seq} is too short; a row needs at least {MIN_SEQ_LEN} "
                             "tokens ([CLS] and one to mask)")
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
