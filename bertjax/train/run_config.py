"""The pre-training run configuration: four sections, each a frozen dataclass.

A run is described by `RunConfig(model, data, optim, train)`; its `optim` section is the
optimizer's own `OptimConfig` (one definition of each field), with the run's recipe as defaults
and `total_steps` set from `train.steps`. It is read from a TOML, JSON or YAML
file (sections as tables) and then `section.field=value` overrides, validated once, and saved
with every checkpoint so `--resume` can refuse a run that would silently differ.

The defaults are the default recipe of `bertjax pretrain`: the `mini` BERT (L4/H256/A4) on the
bundled Shakespeare corpus, tuned to learn as much as it can in under 10 minutes on 2 CPU cores.
Measured on that machine (held-out MLM accuracy over the most-frequent-token baseline, equal
token budgets): a 512-piece vocabulary beats 1024 and 2048 (x2.34 / x1.99 / x1.86 after 400k
tokens); batches of 8 x 128 beat 16 x 64 and 32 x 64 (x2.51 vs x2.34 after 400 updates of 1k
tokens); a peak rate of 2e-3 stayed on the baseline for 200 updates where 1e-3 had left it.
Those runs all stopped at the accuracy of a predictor that sees no context (x2.87); with every
layer's heads initialised to read the pieces beside them (`local_attention_layers`,
bertjax.train.local_init) the same 1,500 steps reach x5.7 (docs/research.md), and the
default 2,500 steps x6.8 in 5.5-7 minutes there, fine-tuning better than 1,500
(docs/pretraining.md, "Longer runs"). Next-sentence prediction stays at chance in this budget,
even trained alone (`train.mlm_loss_weight=0`); the recipe draws NotNext from the other half of
the corpus (`data.not_next`), as BERT's pairs carry another subject (docs/research.md).
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from pathlib import Path
from typing import Any

from bertjax.config import (
    ATTENTION_IMPLEMENTATIONS,
    COMPUTE_DTYPES,
    MAX_VOCAB_SIZE,
    PRESETS,
    BertConfig,
)
from bertjax.errors import InputError
from bertjax.files import read_text
from bertjax.settings import Option, field_options, parse_value
from bertjax.settings import option_field as _f
from bertjax.settings import unknown_option as settings_unknown_option
from bertjax.train.choices import PARALLEL_CHOICES, PRNG_IMPLS
from bertjax.train.schedule import OptimConfig


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
    local_attention_layers: int | None = _f(
        None, "initialise the heads of the first N layers (all, if the model has fewer) to attend "
        "to the pieces 1 and 2 to either side (bertjax.train.local_init); 0: BERT's random init; "
        "default: 4 for the mini preset (the default recipe, tuned for it), 0 for the others")
    match_heads: int = _f(0, "in each layer local_attention_layers initialises, start the last N "
                          "heads as match heads instead: each piece attends to the other "
                          "occurrences of itself, a comparison of the pair's two segments "
                          "(bertjax.train.local_init)")
    compare_heads: bool = _f(False, "after the local-attention init, start the last head of "
                             "layers 1 and 2 as a circuit that gives every token, [CLS] included, "
                             "the share of segment B's pieces also found in segment A (the signal "
                             "next-sentence prediction starts from; bertjax.train.local_init)")
    scan_layers: bool = _f(False, "run the layers under lax.scan (faster compilation)")
    remat: bool = _f(False, "recompute layer activations in the backward pass (less memory)")

    @property
    def local_layers(self) -> int:
        """`local_attention_layers`, its default resolved for the preset (`RECIPE_LOCAL_LAYERS`)."""
        if self.local_attention_layers is not None:
            return self.local_attention_layers
        return RECIPE_LOCAL_LAYERS.get(self.preset, 0)


# The local-attention initialisation is part of the default recipe, measured on `mini` only: any
# other preset starts from BERT's initialisation unless a run asks for it.
RECIPE_LOCAL_LAYERS: dict[str, int] = {"mini": 4}


# `data.packing`'s choices: `bertjax.data.pair_packing.PACKINGS`, written out here so that reading
# options imports no data module (tokenizers); a test holds the two equal.
PACKINGS = ("auto", "none", "best-fit")
# `data.not_next`'s choices: `bertjax.data.pairs.NOT_NEXT_CHOICES` (held equal by a test, as above).
NOT_NEXT_CHOICES = ("any", "far")


@dataclasses.dataclass(frozen=True)
class DataSection:
    """The corpus, the vocabulary trained on it and how batches are made."""

    corpus: str = _f("shakespeare", "'shakespeare', or files, directories or globs of text, JSON "
                     "lines, Parquet or Arrow (compressed too: .gz, .bz2, .zst)", None)
    text_field: str = _f("text", "the JSON field or Parquet/Arrow column that holds the text")
    vocab_size: int = _f(512, "WordPiece vocabulary size (trained on the training split)")
    seq_len: int = _f(128, "tokens per sequence, [CLS] A [SEP] B [SEP] included")
    max_predictions: int = _f(20, "masked positions per row (static shape); each sequence keeps "
                              "its own 15%, up to this many")
    mask_prob: float = _f(0.15, "fraction of tokens chosen for prediction (80/10/10); held-out "
                             "evaluation masks 15% (BERT's rate), and this rate too if it differs")
    batch_size: int = _f(8, "global batch size (rows of seq_len tokens per optimizer step, all "
                         "processes; a packed row holds several sequences)")
    eval_batches: int = _f(64, "batches of the held-out split in each evaluation (the pairs of "
                           "that many unpacked batches, packed or not)")
    packing: str = _f("auto", "several [CLS] A [SEP] B [SEP] pairs per row, packed by best-fit "
                      "decreasing, each masked as alone (max_predictions per row); auto: best-fit "
                      "where the pairs fill under 80% of their unpacked rows (short documents), "
                      "none otherwise (the bundled plays)", PACKINGS)
    not_next: str = _f("far", "where a NotNext pair's B comes from: 'far', a document of the other "
                       "half of the corpus (a distant part, another play for the bundled ones); "
                       "'any', any other document (BERT's rule, often the same play here)",
                       NOT_NEXT_CHOICES)


@dataclasses.dataclass(frozen=True)
class TrainSection:
    """Length, seeds, evaluation, checkpoints and parallelism."""

    steps: int = _f(2500, "optimizer steps (also the LR schedule length)")
    seed: int = _f(0, "seed of parameters, dropout (folded with the step) and data order")
    eval_every: int = _f(500, "evaluate on the held-out plays every N steps (and at the end)")
    checkpoint_every: int = _f(250, "checkpoint every N steps (and at each eval and the end)")
    keep_checkpoints: int = _f(2, "keep the newest N checkpoints (plus the best by eval loss)")
    log_every: int = _f(10, "refresh the progress bar and TensorBoard every N steps")
    parallel: str = _f("none", "parallel strategy", PARALLEL_CHOICES)
    prng_impl: str = _f("threefry2x32", "PRNG of dropout (rbg/unsafe_rbg: cheaper on GPU/TPU)",
                        PRNG_IMPLS)
    fsdp: int = _f(1, "FSDP (parameter sharding) degree for parallel='mesh'")
    mlm_loss_weight: float = _f(1.0, "weight of the masked-LM loss in the loss trained on (0: "
                                "next-sentence prediction alone; MLM is still evaluated)")
    nsp_loss_weight: float = _f(1.0, "weight of the next-sentence-prediction loss in the loss "
                                "trained on (0: masked LM alone; NSP is still evaluated)")


SECTIONS: dict[str, type] = {
    "model": ModelSection,
    "data": DataSection,
    "optim": OptimConfig,
    "train": TrainSection,
}
# Each section's defaults: the run's recipe. The optimizer's differ from OptimConfig's own
# (BERT's fine-tuning-sized 1e-4, no warm-up): a small model from scratch learns faster with these.
DEFAULTS: dict[str, Any] = {
    "model": ModelSection(),
    "data": DataSection(),
    "optim": OptimConfig(learning_rate=1e-3, warmup_steps=50),
    "train": TrainSection(),
}
# Fields of a section that are not options: RunConfig sets optim.total_steps to train.steps.
DERIVED = ("optim.total_steps",)
# Options added after runs were saved without them, with the value those runs were made with:
# a saved configuration that lacks one reads as that value (so such a run still resumes).
ADDED_LATER: dict[str, Any] = {"model.local_attention_layers": 0, "data.text_field": "text",
                               "data.packing": "none", "optim.flatten": False,
                               "train.mlm_loss_weight": 1.0, "train.nsp_loss_weight": 1.0,
                               "data.not_next": "any", "model.match_heads": 0,
                               "model.compare_heads": False}


def complete_saved(saved: dict[str, Any]) -> dict[str, Any]:
    """A saved `{section: {field: value}}` with every ADDED_LATER option it lacks filled in."""
    out = {section: dict(fields) for section, fields in saved.items()}
    for name, value in ADDED_LATER.items():
        section, field = name.split(".")
        if isinstance(out.get(section), dict):
            out[section].setdefault(field, value)
    return out


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """A whole pre-training run."""

    model: ModelSection = DEFAULTS["model"]
    data: DataSection = DEFAULTS["data"]
    optim: OptimConfig = DEFAULTS["optim"]
    train: TrainSection = DEFAULTS["train"]

    def __post_init__(self) -> None:
        validate(self)
        # the schedule spans the run (DERIVED)
        object.__setattr__(self, "optim", dataclasses.replace(self.optim, total_steps=self.train.steps))

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """`{section: {field: value}}` for every option (derived fields left out, defaults that
        depend on another option resolved): what run_config.json and a checkpoint hold."""
        sections = self.fields()
        sections["model"]["local_attention_layers"] = self.model.local_layers
        return sections

    def __eq__(self, other: object) -> bool:
        """Equal when every option resolves to the same value (an unset default and the value
        it resolves to are the same run)."""
        return isinstance(other, RunConfig) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    def fields(self) -> dict[str, dict[str, Any]]:
        """`{section: {field: value}}` as set, unresolved defaults as None (derived fields left
        out): what overrides start from, so a changed preset brings its own defaults."""
        return {
            name: {k: v for k, v in dataclasses.asdict(getattr(self, name)).items()
                   if f"{name}.{k}" not in DERIVED}
            for name in SECTIONS
        }

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
        """The optimizer's settings (the `optim` section); its schedule runs over `train.steps`."""
        return self.optim


# --- options: names, types, help ---------------------------------------------------------------


def options() -> list[Option]:
    """Every option of a run, in section order, with its type, default and help."""
    return [option for section, klass in SECTIONS.items()
            for option in field_options(klass, prefix=f"{section}.", defaults=DEFAULTS[section],
                                        skip=DERIVED)]


def option_names() -> list[str]:
    return [o.name for o in options()]


def unknown_option(name: str, source: str, valid: list[str] | None = None) -> ValueError:
    """The error for an option name that does not exist, naming the closest valid ones."""
    return settings_unknown_option(name, source, option_names() if valid is None else valid)


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
    sections = config.fields()
    for name, value in flat.items():
        if name not in by_name:
            raise unknown_option(name, source, list(by_name))
        section, field = name.split(".", 1)
        sections[section][field] = parse_value(by_name[name], value, source)
    return RunConfig(**{s: _section(s, fields) for s, fields in sections.items()})


def _section(name: str, fields: dict[str, Any]) -> Any:
    """`SECTIONS[name](**fields)`; a section that checks itself (OptimConfig) has the errors
    name its field, and the section is prefixed here ("optim.learning_rate must be ...")."""
    try:
        return SECTIONS[name](**fields)
    except ValueError as err:
        raise ValueError(f"{name}.{err}") from None


def to_toml(config: RunConfig) -> str:
    """The configuration as a TOML file `load_file` reads back (one table per section)."""
    lines = []
    for section, fields in config.to_dict().items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in fields.items()]
        lines.append("")
    return "\n".join(lines)


CONFIG_SUFFIXES = {".toml": "TOML", ".json": "JSON", ".yaml": "YAML", ".yml": "YAML"}


def load_file(path: str | Path, what: str = "--config") -> dict[str, Any]:
    """Read a TOML (.toml), JSON (.json) or YAML (.yaml/.yml) config file as nested dicts; any
    problem is one ValueError naming `what`, the file and the fix."""
    path = Path(path)
    text = read_text(path, what=what)  # missing, a directory, binary or not UTF-8: ValueError
    kind = CONFIG_SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise ValueError(f"{what} {path}: unknown format {path.suffix or '(no suffix)'!r}; give a "
                         ".toml, .json, .yaml or .yml file")
    parse, errors = _parser(kind, f"{what} {path}")
    try:
        data = parse(text)
    except errors as err:
        reason = " ".join(str(err).split())  # YAML's are several lines
        raise ValueError(f"{what} {path} is not valid {kind} ({reason}); fix the file") from None
    if data is None and kind == "YAML":
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"{what} {path} must hold a table of sections ({', '.join(SECTIONS)}), "
                         f"not a {type(data).__name__}")
    return data


def _parser(kind: str, where: str) -> tuple[Any, tuple[type[Exception], ...]]:
    """(parse(text), the errors it raises for bad text) of a config format."""
    if kind == "TOML":
        return tomllib.loads, (tomllib.TOMLDecodeError,)
    if kind == "JSON":
        return json.loads, (json.JSONDecodeError,)
    try:
        import yaml  # optional dependency
    except ImportError:
        raise ValueError(f"{where}: reading YAML needs PyYAML (pip install pyyaml); or give a "
                         ".toml or .json file") from None
    return yaml.safe_load, (yaml.YAMLError,)


def load(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Defaults, then the file (if any), then overrides."""
    config = RunConfig()
    if path is not None:
        config = apply_overrides(config, load_file(path), source=f"--config {path}")
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
    m, d, t = config.model, config.data, config.train  # optim checks itself (OptimConfig)
    positive = {
        "data.vocab_size": d.vocab_size, "data.seq_len": d.seq_len,
        "data.max_predictions": d.max_predictions, "data.batch_size": d.batch_size,
        "data.eval_batches": d.eval_batches,
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
    if not 32 <= d.vocab_size <= MAX_VOCAB_SIZE:
        raise ValueError(f"data.vocab_size must be from 32 to {MAX_VOCAB_SIZE:,}, got "
                         f"{d.vocab_size:,}")
    if m.max_position_embeddings < 0:
        raise ValueError("model.max_position_embeddings must be >= 0")
    positions = m.max_position_embeddings or PRESETS[m.preset].get("max_position_embeddings", 512)
    if d.seq_len > positions:
        raise ValueError(
            f"data.seq_len ({d.seq_len}) exceeds the model's max_position_embeddings ({positions})"
        )
    if t.seed < 0:
        raise ValueError(f"train.seed must be >= 0, got {t.seed}")
    if t.fsdp > 1 and t.parallel != "mesh":
        raise ValueError(f"train.fsdp={t.fsdp} shards parameters over a mesh, which "
                         f"train.parallel={t.parallel!r} does not use; pass --train.parallel mesh "
                         "or leave out --train.fsdp")
    if t.fsdp > 1 and config.optim.flatten:
        raise ValueError("optim.flatten puts every gradient in one vector, which train.fsdp="
                         f"{t.fsdp} would gather from its shards on each step; leave one of them "
                         "out")
    _check_loss_weights(t)
    # BertConfig checks the rest (dropout ranges, dtype).
    config.bert_config()
    if m.local_layers < 0:
        raise ValueError(f"model.local_attention_layers must be >= 0, got {m.local_attention_layers}")
    heads = PRESETS[m.preset]["num_attention_heads"]
    if not 0 <= m.match_heads <= heads:
        raise InputError(f"model.match_heads must be from 0 to the preset's {heads} heads, got "
                         f"{m.match_heads}")
    if m.compare_heads and not m.local_layers:
        raise InputError("model.compare_heads builds on the local-attention init, and "
                         "model.local_attention_layers is 0: give it a number of layers, or "
                         "leave out model.compare_heads")
    if m.match_heads and not m.local_layers:
        raise InputError("model.match_heads sets heads of the layers model.local_attention_layers "
                         "initialises, and it is 0: give it a number of layers, or leave out "
                         "model.match_heads")


def _check_loss_weights(t: TrainSection) -> None:
    """Each loss weight finite and >= 0, and not both 0 (nothing to train)."""
    for name, value in (("mlm_loss_weight", t.mlm_loss_weight),
                        ("nsp_loss_weight", t.nsp_loss_weight)):
        if not math.isfinite(value) or value < 0:
            raise InputError(f"train.{name} must be a finite number >= 0, got {value}")
    if t.mlm_loss_weight == 0 and t.nsp_loss_weight == 0:
        raise InputError("train.mlm_loss_weight and train.nsp_loss_weight are both 0: nothing "
                         "would be trained; give one of them a positive weight")
