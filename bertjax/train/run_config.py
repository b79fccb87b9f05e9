"""The pre-training run configuration: four sections, each a frozen dataclass.

A run is described by `RunConfig(model, data, optim, train)`. It is read from a TOML, JSON or YAML
file (sections as tables) and then `section.field=value` overrides, validated once, and saved
with every checkpoint so `--resume` can refuse a run that would silently differ.

The defaults are the default recipe of `bertjax pretrain`: the `mini` BERT (L4/H256/A4) on the
bundled Shakespeare corpus, tuned to learn as much as it can in under 10 minutes on 2 CPU cores.
Measured on that machine (held-out MLM accuracy over the most-frequent-token baseline, equal
token budgets): a 512-piece vocabulary beats 1024 and 2048 (x2.34 / x1.99 / x1.86 after 400k
tokens); batches of 8 x 128 beat 16 x 64 and 32 x 64 (x2.51 vs x2.34 after 400 updates of 1k
tokens); a peak rate of 2e-3 stayed on the baseline for 200 updates where 1e-3 had left it.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import tomllib
from pathlib import Path
from typing import Any, get_type_hints

from bertjax.config import ATTENTION_IMPLEMENTATIONS, COMPUTE_DTYPES, PRESETS, BertConfig
from bertjax.train.choices import OPTIMIZERS, PARALLEL_CHOICES, PRNG_IMPLS
from bertjax.train.schedule import OptimConfig


def _f(default: Any, help: str, choices: tuple[str, ...] | None = None) -> Any:  # noqa: A002
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices})


@dataclasses.dataclass(frozen=True)
class ModelSection:
    """Which BERT: a preset size plus the few fields a pre-training run may change."""

    preset: str = _f("mini", "model size from bertjax.config.PRESETS", tuple(sorted(PRESETS)))
    hidden_dropout_prob: float = _f(0.0, "dropout on embeddings and residual branches")
    attention_probs_dropout_prob: float = _f(0.0, "dropout on attention probabilities")
    max_position_embeddings: int = _f(0, "position table size; 0 keeps the preset's")
    dtype: str = _f("float32", "compute dtype of activations and matmuls", COMPUTE_DTYPES)
    attn_implementation: str = _f("auto", "attention: exact einsum + float32 softmax, fused "
                                  "jax.nn.dot_product_attention (cuDNN on GPU in bfloat16; no "
                                  "attention-probability dropout), or auto (fused where cuDNN "
                                  "applies and no such dropout is due)", ATTENTION_IMPLEMENTATIONS)
    scan_layers: bool = _f(False, "run the layers under lax.scan (faster compilation)")
    remat: bool = _f(False, "recompute layer activations in the backward pass (less memory)")


@dataclasses.dataclass(frozen=True)
class DataSection:
    """The corpus, the vocabulary trained on it and how batches are made."""

    corpus: str = _f("shakespeare", "corpus name known to bertjax.data", None)
    vocab_size: int = _f(512, "WordPiece vocabulary size (trained on the training split)")
    seq_len: int = _f(128, "tokens per sequence, [CLS] A [SEP] B [SEP] included")
    max_predictions: int = _f(20, "masked positions per sequence (static shape)")
    mask_prob: float = _f(0.15, "fraction of tokens chosen for prediction (80/10/10)")
    batch_size: int = _f(8, "global batch size (sequences per optimizer step, all processes)")
    eval_batches: int = _f(64, "batches of the held-out split in each evaluation")


@dataclasses.dataclass(frozen=True)
class OptimSection:
    """The optimizer; the schedule's length is train.steps."""

    optimizer: str = _f("adamw", "optimizer", OPTIMIZERS)
    learning_rate: float = _f(1e-3, "peak learning rate (linear warm-up, then linear decay)")
    warmup_steps: int = _f(50, "linear warm-up steps")
    weight_decay: float = _f(0.01, "decoupled weight decay (not on biases and LayerNorm)")
    b1: float = _f(0.9, "Adam beta1")
    b2: float = _f(0.999, "Adam beta2")
    eps: float = _f(1e-6, "Adam epsilon")
    clip_norm: float = _f(1.0, "global gradient-norm clip; 0 disables")
    grad_accum_steps: int = _f(1, "micro-batches accumulated per optimizer step")


@dataclasses.dataclass(frozen=True)
class TrainSection:
    """Length, seeds, evaluation, checkpoints and parallelism."""

    steps: int = _f(1500, "optimizer steps (also the LR schedule length)")
    seed: int = _f(0, "seed of parameters, dropout (folded with the step) and data order")
    eval_every: int = _f(500, "evaluate on the held-out plays every N steps (and at the end)")
    checkpoint_every: int = _f(250, "checkpoint every N steps (and at each eval and the end)")
    keep_checkpoints: int = _f(2, "keep the newest N checkpoints (plus the best by eval loss)")
    log_every: int = _f(10, "refresh the progress bar and TensorBoard every N steps")
    parallel: str = _f("none", "parallel strategy", PARALLEL_CHOICES)
    prng_impl: str = _f("threefry2x32", "PRNG of dropout (rbg/unsafe_rbg: cheaper on GPU/TPU)",
                        PRNG_IMPLS)
    fsdp: int = _f(1, "FSDP (parameter sharding) degree for parallel='mesh'")


SECTIONS: dict[str, type] = {
    "model": ModelSection,
    "data": DataSection,
    "optim": OptimSection,
    "train": TrainSection,
}


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """A whole pre-training run."""

    model: ModelSection = dataclasses.field(default_factory=ModelSection)
    data: DataSection = dataclasses.field(default_factory=DataSection)
    optim: OptimSection = dataclasses.field(default_factory=OptimSection)
    train: TrainSection = dataclasses.field(default_factory=TrainSection)

    def __post_init__(self) -> None:
        validate(self)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}

    def flat(self) -> dict[str, Any]:
        """`{"section.field": value}` for every option."""
        return {f"{s}.{k}": v for s, fields in self.to_dict().items() for k, v in fields.items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "config") -> RunConfig:
        return apply_overrides(cls(), data, source=source)

    def bert_config(self, vocab_size: int | None = None) -> BertConfig:
        """The model's BertConfig; `vocab_size` is the trained tokenizer's actual size."""
        overrides: dict[str, Any] = {
            "vocab_size": vocab_size or self.data.vocab_size,
            "hidden_dropout_prob": self.model.hidden_dropout_prob,
            "attention_probs_dropout_prob": self.model.attention_probs_dropout_prob,
            "dtype": self.model.dtype,
            "attn_implementation": self.model.attn_implementation,
            "scan_layers": self.model.scan_layers,
            "remat": self.model.remat,
        }
        if self.model.max_position_embeddings:
            overrides["max_position_embeddings"] = self.model.max_position_embeddings
        return BertConfig.from_preset(self.model.preset, **overrides)

    def optim_config(self) -> OptimConfig:
        """The optimizer's settings; its schedule runs over `train.steps`."""
        return OptimConfig(total_steps=self.train.steps, **dataclasses.asdict(self.optim))


# --- options: names, types, help ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Option:
    name: str  # "section.field"
    type: type
    default: Any
    help: str
    choices: tuple[str, ...] | None


def options() -> list[Option]:
    """Every option, in section order, with its type, default and help."""
    out = []
    for section, klass in SECTIONS.items():
        hints = get_type_hints(klass)
        for f in dataclasses.fields(klass):
            out.append(
                Option(
                    f"{section}.{f.name}", hints[f.name], f.default, f.metadata["help"],
                    f.metadata["choices"],
                )
            )
    return out


def option_names() -> list[str]:
    return [o.name for o in options()]


def unknown_option(name: str, source: str, valid: list[str] | None = None) -> ValueError:
    """The error for an option name that does not exist, naming the closest valid ones."""
    valid = option_names() if valid is None else valid
    close = difflib.get_close_matches(name, valid, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return ValueError(
        f"{source}: unknown option {name!r}{hint}; valid options are: {', '.join(valid)}"
    )


def parse_value(option: Option, value: Any, source: str = "override") -> Any:
    """Convert a string or loaded value to the option's type, with a clear error."""
    kind = option.type
    try:
        if kind is bool:
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(value)
                return value.lower() in ("true", "1", "yes")
            if not isinstance(value, bool | int) or value not in (0, 1):
                raise ValueError(value)
            return bool(value)
        if kind is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            if isinstance(value, str):
                number = float(value)  # accepts "1e3"
                if not number.is_integer():
                    raise ValueError(value)
                return int(number)
            return int(value)
        if kind is float:
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"{source}: {option.name} must be {kind.__name__}, got {value!r}"
        ) from None


def apply_overrides(
    config: RunConfig, overrides: dict[str, Any], *, source: str = "override"
) -> RunConfig:
    """A copy of `config` with `{"section.field": value}` or nested `{section: {field: v}}` set."""
    flat: dict[str, Any] = {}
    for key, value in overrides.items():
        if isinstance(value, dict):
            if key not in SECTIONS:
                raise ValueError(
                    f"{source}: unknown section {key!r}; valid sections are: {', '.join(SECTIONS)}"
                )
            for sub, v in value.items():
                flat[f"{key}.{sub}"] = v
        else:
            flat[key] = value
    by_name = {o.name: o for o in options()}
    sections = config.to_dict()
    for name, value in flat.items():
        if name not in by_name:
            raise unknown_option(name, source, list(by_name))
        section, field = name.split(".", 1)
        sections[section][field] = parse_value(by_name[name], value, source)
    return RunConfig(**{s: SECTIONS[s](**fields) for s, fields in sections.items()})


def to_toml(config: RunConfig) -> str:
    """The configuration as a TOML file `load_file` reads back (one table per section)."""
    lines = []
    for section, fields in config.to_dict().items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in fields.items()]
        lines.append("")
    return "\n".join(lines)


def load_file(path: str | Path) -> dict[str, Any]:
    """Read a TOML (.toml), JSON (.json) or YAML (.yaml/.yml) config file as nested dicts."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    suffix = path.suffix.lower()
    text = path.read_text()
    try:
        if suffix == ".toml":
            data = tomllib.loads(text)
        elif suffix == ".json":
            data = json.loads(text)
        elif suffix in (".yaml", ".yml"):
            import yaml  # optional dependency

            data = yaml.safe_load(text) or {}
        else:
            raise ValueError(f"config file {path}: use .toml, .json, .yaml or .yml")
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"config file {path} does not parse: {err}") from err
    if not isinstance(data, dict):
        raise ValueError(f"config file {path} must hold a table of sections")
    return data


def load(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Defaults, then the file (if any), then overrides."""
    config = RunConfig()
    if path is not None:
        config = apply_overrides(config, load_file(path), source=f"config file {path}")
    if overrides:
        config = apply_overrides(config, overrides)
    return config


def differences(saved: dict[str, Any], requested: RunConfig) -> list[str]:
    """`"name: saved X, requested Y"` for every option that differs (saved is `to_dict()`)."""
    wanted = requested.flat()
    got = {f"{s}.{k}": v for s, fields in saved.items() for k, v in fields.items()}
    lines = []
    for name in sorted(set(wanted) | set(got)):
        a, b = got.get(name, "<absent>"), wanted.get(name, "<absent>")
        if a != b:
            lines.append(f"{name}: saved {a!r}, requested {b!r}")
    return lines


# --- validation --------------------------------------------------------------------------------


def validate(config: RunConfig) -> None:
    """Raise ValueError naming the option for any setting out of range."""
    for o in options():
        section, field = o.name.split(".")
        value = getattr(getattr(config, section), field)
        if o.choices is not None and value not in o.choices:
            raise ValueError(f"{o.name} is {value!r}; choose one of {list(o.choices)}")
    m, d, op, t = config.model, config.data, config.optim, config.train
    positive = {
        "data.vocab_size": d.vocab_size, "data.seq_len": d.seq_len,
        "data.max_predictions": d.max_predictions, "data.batch_size": d.batch_size,
        "data.eval_batches": d.eval_batches, "optim.grad_accum_steps": op.grad_accum_steps,
        "train.steps": t.steps, "train.eval_every": t.eval_every,
        "train.checkpoint_every": t.checkpoint_every, "train.keep_checkpoints": t.keep_checkpoints,
        "train.log_every": t.log_every, "train.fsdp": t.fsdp,
    }
    for name, value in positive.items():
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    if not 0.0 < d.mask_prob < 1.0:
        raise ValueError(f"data.mask_prob must be in (0, 1), got {d.mask_prob}")
    if d.seq_len < 8:
        raise ValueError(f"data.seq_len must be at least 8, got {d.seq_len}")
    if d.max_predictions > d.seq_len:
        raise ValueError(
            f"data.max_predictions ({d.max_predictions}) exceeds data.seq_len ({d.seq_len})"
        )
    if d.vocab_size < 32:
        raise ValueError(f"data.vocab_size must be at least 32, got {d.vocab_size}")
    if op.learning_rate <= 0 or not math.isfinite(op.learning_rate):
        raise ValueError(f"optim.learning_rate must be positive, got {op.learning_rate}")
    if op.warmup_steps < 0 or op.weight_decay < 0 or op.clip_norm < 0:
        raise ValueError("optim.warmup_steps, weight_decay and clip_norm must be >= 0")
    if m.max_position_embeddings < 0:
        raise ValueError("model.max_position_embeddings must be >= 0")
    positions = m.max_position_embeddings or PRESETS[m.preset].get("max_position_embeddings", 512)
    if d.seq_len > positions:
        raise ValueError(
            f"data.seq_len ({d.seq_len}) exceeds the model's max_position_embeddings ({positions})"
        )
    if t.seed < 0:
        raise ValueError(f"train.seed must be >= 0, got {t.seed}")
    # BertConfig checks the rest (dropout ranges, dtype).
    config.bert_config()
