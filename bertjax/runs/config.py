"""The pre-training run configuration: four sections, each a frozen settings dataclass.

A run is `RunConfig(model, data, optim, train)`; its `optim` section is the optimizer's own
`OptimConfig` (one definition of each field, `bertjax finetune` takes the same), with the run's
recipe as defaults; its schedule spans `train.steps`. `bertjax pretrain` derives its options from these fields
(`bertjax.common.options`): defaults, then `--config FILE` (TOML, JSON or YAML, a table per
section), then `--section.field` options. The resolved configuration is saved as run_config.json
and with every checkpoint, so `--resume` can refuse a run that would silently differ.

The defaults are the default recipe of `bertjax pretrain`: the `mini` BERT (L4/H256/A4) on the
bundled Shakespeare corpus, tuned to learn as much as it can in about 6 minutes of training on 2
CPU cores (docs/pretraining.md, "The default recipe, and why"; the study in docs/research.md).
Next-sentence prediction stays at chance in this budget, even trained alone
(`train.mlm_loss_weight=0`); the recipe draws NotNext from the other half of the corpus
(`data.not_next`), as BERT's pairs carry another subject.

`train.objective=mlm` pre-trains a masked LM alone, RoBERTa's recipe (full-sentence segments,
no pairs, no NSP head: `bertjax.data.segments`), for any family of `PRETRAIN_FAMILIES`
(`model.model_type`); a family pre-trained without a next-sentence head (RoBERTa) needs it. A
family with a recipe of its own (ModernBERT's: `bertjax.runs.recipes`) takes it for the options
a run leaves out (`recipe`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_type_hints

from bertjax.common.options import as_values, build, check, flatten, load_file
from bertjax.common.options import option_field as _f
from bertjax.config import (
    MAX_VOCAB_SIZE,
    PRESETS,
    BertConfig,
)
from bertjax.config.families import FAMILIES, Family
from bertjax.config.heads import DISCRIMINATOR, MODELS, pretraining_class
from bertjax.data.pair_packing import PACKINGS
from bertjax.data.pairs import NOT_NEXT_CHOICES
from bertjax.errors import InputError
from bertjax.runs.recipes import RECIPE_OPTIONS, asked_recipe, recipe_values
from bertjax.train.choices import OBJECTIVES, PARALLEL_CHOICES, PRNG_IMPLS
from bertjax.train.schedule import OptimConfig

BERT_FIELDS = {f.name: f for f in dataclasses.fields(BertConfig)}
# The families `bertjax pretrain` trains (`bertjax.config.families.FAMILIES`), each with a
# WordPiece vocabulary of its special tokens (`Tokenizer.train`); DistilBERT's and
# ELECTRA's architectures as masked LMs (not distillation, not replaced-token detection).
PRETRAIN_FAMILIES = tuple(FAMILIES)


# BertConfig's fields a run decides itself rather than takes as options: the vocabulary and its
# padding (the tokenizer the run trains), the token types (the family's), a classifier's labels
# and dropout (fine-tuning's); `model_type` is the run's own option (the families it trains).
RUN_DECIDES = ("vocab_size", "pad_token_id", "type_vocab_size", "id2label", "classifier_dropout",
               "model_type")
_BERT_HINTS = get_type_hints(BertConfig)
# Every other BertConfig field is an option of the [model] section, as BertConfig defines it (its
# help, type and range): None, its default, takes the preset's value (BertConfig's where the preset
# has none; a RoBERTa's position table gets the rows before its first position too).
PRESET_FIELDS = tuple(f.name for f in dataclasses.fields(BertConfig) if f.name not in RUN_DECIDES)
_ModelFields = dataclasses.make_dataclass("_ModelFields", [
    ("preset", str, _f("mini", "model size from bertjax.config.PRESETS; the fields below change "
                       "it", tuple(sorted(PRESETS)))),
    ("model_type", str | None, _f(
        None, "the family (bertjax.config.families): bert; roberta or xlm-roberta (RoBERTa's "
        "architecture: positions from pad + 1, one token type, special tokens <s> </s> <pad> "
        "<unk> <mask> in a WordPiece vocabulary, not their byte-level BPE or SentencePiece), "
        "distilbert and electra (their architectures as masked LMs) have no next-sentence head "
        "and train with train.objective=mlm; electra with train.objective=electra too; "
        "modernbert takes ModernBERT's recipe for the options left out (bertjax.runs.recipes)",
        PRETRAIN_FAMILIES, default_help="bert; electra for train.objective=electra")),
    ("generator_size", float | None, _f(
        None, "train.objective=electra: the generator's hidden size (and heads) as a share of "
        "the discriminator's, its feed-forward 4x its hidden size; ELECTRA's 1/4 for small "
        "models, 1/3 for base", check="open_fraction", default_help="0.25")),
    ("local_attention_layers", int | None, _f(
        None, "initialise the heads of the first N layers (all, if the model has fewer) to "
        "attend to the pieces 1 and 2 to either side (bertjax.train.local_init); 0: BERT's "
        "random init", check="non_negative",
        default_help="4 for the mini preset (the default recipe, tuned for it), 0 for the others "
        "and for a family without a position table (modernbert)")),
    *((name, _BERT_HINTS[name] | None, dataclasses.field(default=None, metadata={
        **BERT_FIELDS[name].metadata,
        "default_help": BERT_FIELDS[name].metadata.get("default_help") or "the preset's"}))
      for name in PRESET_FIELDS),
], frozen=True)


class ModelSection(_ModelFields):  # type: ignore[misc,valid-type]  # made from BertConfig's fields
    """Which BERT: a preset size, the family, and any BertConfig field that changes either
    (`PRESET_FIELDS`, each None for the preset's value)."""

    if TYPE_CHECKING:  # what the fields made above are, for the type checker
        preset: str
        model_type: str
        local_attention_layers: int | None

        def __init__(self, **fields: Any) -> None: ...

    @property
    def local_layers(self) -> int:
        """`local_attention_layers`, its default resolved for the preset (`RECIPE_LOCAL_LAYERS`;
        0 for a family whose positions are not a table: ModernBERT's are rotary)."""
        if self.local_attention_layers is not None:
            return self.local_attention_layers
        family = FAMILIES.get(self.model_type or "bert")
        if family is not None and not family.position_table:
            return 0
        return RECIPE_LOCAL_LAYERS.get(self.preset, 0)

    def bert_fields(self) -> dict[str, Any]:
        """The BertConfig fields this section sets (those not None)."""
        return {name: value for name in PRESET_FIELDS
                if (value := getattr(self, name)) is not None}


# The local-attention initialisation is part of the default recipe, measured on `mini` only: any
# other preset starts from BERT's initialisation unless a run asks for it.
RECIPE_LOCAL_LAYERS: dict[str, int] = {"mini": 4}
MIN_SEQ_LEN = 8  # the shortest sequence a run trains on


@dataclasses.dataclass(frozen=True)
class DataSection:
    """The corpus, the vocabulary trained on it and how batches are made."""

    corpus: str = _f("shakespeare", "'shakespeare', or files, directories or globs of text, JSON "
                     "lines, Parquet or Arrow (compressed too: .gz, .bz2, .zst)")
    text_field: str = _f("text", "the JSON field or Parquet/Arrow column that holds the text")
    vocab_size: int = _f(512, "WordPiece vocabulary size (trained on the training split)",
                         minimum=32, maximum=MAX_VOCAB_SIZE)
    seq_len: int = _f(128, "tokens per sequence, [CLS] A [SEP] B [SEP] included ([CLS] text "
                      "[SEP] for train.objective=mlm)", minimum=MIN_SEQ_LEN)
    max_predictions: int | None = _f(
        None, "masked positions per row (static shape); each sequence keeps its own mask_prob "
        "of its tokens, up to this many", check="positive",
        default_help="ceil(seq_len x mask_prob), BERT's rule: 52 at 128 tokens and 40%")
    mask_prob: float = _f(0.4, "fraction of tokens chosen for prediction (80/10/10); held-out "
                             "evaluation masks 15% (BERT's rate), and at the last step this "
                             "rate too if it differs", check="open_fraction")
    batch_size: int = _f(8, "global batch size (rows of seq_len tokens per optimizer step, all "
                         "processes; a packed row holds several sequences)", check="positive")
    eval_batches: int = _f(64, "batches of the held-out split in each evaluation (the pairs of "
                           "that many unpacked batches, packed or not)", check="positive")
    packing: str = _f("auto", "several [CLS] A [SEP] B [SEP] pairs (or train.objective=mlm's "
                      "segments) per row, packed by best-fit decreasing, each masked as alone "
                      "(max_predictions per row); auto: best-fit where they fill under 80% of "
                      "their unpacked rows (short documents), none otherwise (the bundled plays)",
                      PACKINGS)
    not_next: str = _f("far", "where a NotNext pair's B comes from: 'far', a document of the other "
                       "half of the corpus (a distant part, another play for the bundled ones); "
                       "'any', any other document (BERT's rule, often the same play here); "
                       "train.objective=mlm has no NotNext", NOT_NEXT_CHOICES)

    @property
    def predictions(self) -> int:
        """`max_predictions`, its default resolved: ceil(seq_len x mask_prob) (BERT: 20 at 128
        tokens and 15%)."""
        if self.max_predictions is not None:
            return self.max_predictions
        return math.ceil(self.seq_len * self.mask_prob - 1e-9)


@dataclasses.dataclass(frozen=True)
class TrainSection:
    """Length, seeds, evaluation, checkpoints and parallelism."""

    steps: int = _f(1600, "optimizer steps (also the LR schedule length)", check="positive")
    seed: int = _f(0, "seed of parameters, dropout (folded with the step) and data order",
                   check="non_negative")
    eval_every: int = _f(400, "evaluate on the held-out plays every N steps (and at the end)",
                         check="positive")
    checkpoint_every: int = _f(250, "checkpoint every N steps (and at each eval and the end)",
                               check="positive")
    keep_checkpoints: int = _f(2, "keep the newest N checkpoints (plus the best by eval loss)",
                               check="positive")
    log_every: int = _f(10, "refresh the progress bar and TensorBoard every N steps",
                        check="positive")
    parallel: str = _f("none", "parallel strategy", PARALLEL_CHOICES)
    prng_impl: str = _f("threefry2x32", "PRNG of dropout (rbg/unsafe_rbg: cheaper on GPU/TPU)",
                        PRNG_IMPLS)
    fsdp: int = _f(1, "FSDP (parameter sharding) degree for parallel='mesh'", check="positive")
    objective: str = _f("mlm+nsp", "what is pre-trained: mlm+nsp, BERT's masked LM and "
                        "next-sentence prediction on pairs (BertForPreTraining); mlm, RoBERTa's "
                        "masked LM alone on full-sentence segments (BertForMaskedLM, no NSP head; "
                        "what roberta and xlm-roberta need); electra, ELECTRA's generator (a "
                        "small masked LM) and discriminator (BertForReplacedTokenDetection, "
                        "which learns from every token) on those segments", OBJECTIVES)
    mlm_loss_weight: float = _f(1.0, "weight of the masked-LM loss in the loss trained on (0: "
                                "next-sentence prediction alone; MLM is still evaluated); "
                                "train.objective=mlm+nsp only", check="non_negative")
    nsp_loss_weight: float = _f(1.0, "weight of the next-sentence-prediction loss in the loss "
                                "trained on (0: masked LM alone, NSP still evaluated and its "
                                "head kept); train.objective=mlm+nsp only", check="non_negative")
    rtd_loss_weight: float = _f(50.0, "ELECTRA's lambda: the weight of the discriminator's "
                                "replaced-token loss beside the generator's masked-LM loss; "
                                "train.objective=electra only", check="positive")


SECTIONS: dict[str, type] = {
    "model": ModelSection,
    "data": DataSection,
    "optim": OptimConfig,
    "train": TrainSection,
}
# Each section's defaults: the run's recipe. The optimizer's differ from OptimConfig's own
# (BERT's fine-tuning-sized 1e-4, no warm-up): a small model from scratch learns faster with these.
DEFAULTS: dict[str, Any] = {
    "model": ModelSection(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
    "data": DataSection(),
    "optim": OptimConfig(learning_rate=1e-3, warmup_steps=250),
    "train": TrainSection(),
}
# Options added after runs were saved without them, with the value those runs were made with:
# a saved configuration that lacks one reads as that value (so such a run still resumes).
ADDED_LATER: dict[str, Any] = {"model.local_attention_layers": 0, "data.text_field": "text",
                               "data.packing": "none", "optim.flatten": False,
                               "train.mlm_loss_weight": 1.0, "train.nsp_loss_weight": 1.0,
                               "data.not_next": "any", "model.model_type": "bert",
                               "train.objective": "mlm+nsp", "optim.warmup_fraction": None,
                               "model.generator_size": None, "train.rtd_loss_weight": 50.0,
                               "optim.schedule": "linear", "optim.decay_fraction": None}
# ELECTRA's generator: its size as a share of the discriminator's, where a run leaves it out
GENERATOR_SIZE = 0.25


def complete_saved(saved: dict[str, Any]) -> dict[str, Any]:
    """A saved `{section: {field: value}}` with every ADDED_LATER option it lacks filled in (and
    a position table of 0, which runs saved before [model] took every BertConfig field meant the
    preset's, as None)."""
    out = {section: dict(fields) for section, fields in saved.items()}
    if isinstance(out.get("model"), dict) and out["model"].get("max_position_embeddings") == 0:
        out["model"]["max_position_embeddings"] = None
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

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """`{section: {field: value}}` for every option (defaults that depend on another option
        resolved): what run_config.json, a checkpoint and --print-config hold."""
        sections = as_values(self)
        bert = self.bert_config()
        sections["model"] |= {name: getattr(bert, name) for name in PRESET_FIELDS}
        sections["model"]["local_attention_layers"] = self.model.local_layers
        sections["model"]["model_type"] = self.model_type
        if self.electra:
            sections["model"]["generator_size"] = self.model.generator_size or GENERATOR_SIZE
        sections["data"]["max_predictions"] = self.data.predictions
        sections["optim"]["decay_fraction"] = self.optim.decay_share
        return sections

    def __eq__(self, other: object) -> bool:
        """Equal when every option resolves to the same value (an unset default and the value
        it resolves to are the same run)."""
        return isinstance(other, RunConfig) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    def flat(self) -> dict[str, Any]:
        """`{"section.field": value}` for every option."""
        return flatten(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str | None = None) -> RunConfig:
        """A run from `{section: {field: value}}` (run_config.json, a config file) over the
        defaults (`recipe`: its family's recipe where it has one); every name and value
        checked."""
        values = flatten(data)
        return build(cls, values, base=recipe(*asked_recipe(values)), source=source)

    @property
    def model_type(self) -> str:
        """`model.model_type`, its default resolved: BERT's, ELECTRA's for its objective."""
        if self.model.model_type is not None:
            return self.model.model_type
        return "electra" if self.electra else "bert"

    @property
    def family(self) -> Family:
        """The model's family (`model_type`)."""
        return FAMILIES[self.model_type]

    @property
    def electra(self) -> bool:
        """Whether the run pre-trains ELECTRA's generator and discriminator."""
        return self.train.objective == "electra"

    @property
    def next_sentence(self) -> bool:
        """Whether the run pre-trains next-sentence prediction (train.objective=mlm+nsp)."""
        return self.train.objective == "mlm+nsp"

    @property
    def model_class(self) -> str:
        """The name of the class the run trains and its checkpoints hold (`bertjax.heads`): an
        ELECTRA run's is its discriminator (its generator beside it, `generator_config`)."""
        return DISCRIMINATOR if self.electra else pretraining_class(self.next_sentence)

    def bert_config(self, vocab_size: int | None = None, pad_token_id: int = 0) -> BertConfig:
        """The model's BertConfig: the preset, changed by the section's fields; `vocab_size` and
        `pad_token_id` are the trained tokenizer's (its [PAD] or <pad> is id 0), the token types
        one per segment type the family uses (RoBERTa: 1). A family whose positions start at
        pad + 1 gets that many rows more than the preset's table, unless
        `max_position_embeddings` (the whole table) is given."""
        family = self.family
        config = BertConfig.from_preset(
            self.model.preset, model_type=family.model_type, pad_token_id=pad_token_id,
            type_vocab_size=family.second_segment_type + 1,
            vocab_size=vocab_size or self.data.vocab_size, **self.model.bert_fields())
        if self.model.max_position_embeddings is not None or not config.position_offset:
            return config
        return config.replace(  # the preset's positions, after the rows before the first one
            max_position_embeddings=config.max_position_embeddings + config.position_offset)


def generator_config(config: RunConfig, discriminator: BertConfig) -> BertConfig:
    """ELECTRA's generator beside `discriminator` (an ELECTRA run's model, `bert_config`): the
    same vocabulary, positions and embedding width (the two share their embeddings), hidden size
    and heads scaled by `model.generator_size`, feed-forward 4x its hidden size. An InputError
    names a size whose hidden size is no whole number of heads."""
    size = config.model.generator_size or GENERATOR_SIZE
    hidden = discriminator.hidden_size * size
    heads = max(1, round(discriminator.num_attention_heads * size))
    if not hidden.is_integer() or hidden < 1 or int(hidden) % heads:
        raise InputError(
            f"model.generator_size={size:g} gives the generator a hidden size of {hidden:g} "
            f"(of the discriminator's {discriminator.hidden_size}) for {heads} head(s): choose a "
            f"size that makes it a whole number of heads, e.g. "
            f"{discriminator.head_dim / discriminator.hidden_size:g} per head")
    return discriminator.replace(
        hidden_size=int(hidden), num_attention_heads=heads, intermediate_size=4 * int(hidden),
        embedding_size=discriminator.embedding_width)


def recipe(model_type: object = None, objective: object = None) -> RunConfig:
    """A run's defaults: `DEFAULTS`, with the recipes of `model_type`'s family and of
    `objective` where they have one (`bertjax.runs.recipes`: ModernBERT's, ELECTRA's), what the
    options given are read over."""
    values = recipe_values(model_type, objective)
    if not values:
        return RunConfig()
    asked = dict(zip(RECIPE_OPTIONS, (model_type, objective), strict=True))
    return build(RunConfig, {**{k: v for k, v in asked.items() if v is not None}, **values})


def load(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Defaults (`recipe`, for the family the file or the overrides name), then the file (if
    any), then `{"section.field": value}` overrides."""
    values = load_file(path, RunConfig) if path is not None else {}
    config = recipe(*asked_recipe(values, overrides))
    if path is not None:
        config = build(RunConfig, values, base=config, source=f"--config {path}")
    return build(RunConfig, overrides, base=config) if overrides else config


def differences(saved: dict[str, Any], requested: RunConfig) -> list[str]:
    """`"name: saved X, requested Y"` for every option that differs (saved is `to_dict()`, of
    this or an earlier version: read as a RunConfig first where it can be, so an option it lacks
    compares as the value it stands for)."""
    try:
        saved = RunConfig.from_dict(complete_saved(saved)).to_dict()
    except InputError:
        pass  # compared as saved: every name it holds that is not an option differs
    wanted, got = requested.flat(), flatten(saved)
    lines = []
    for name in sorted(set(wanted) | set(got)):
        a, b = got.get(name, "<absent>"), wanted.get(name, "<absent>")
        if a != b:
            lines.append(f"{name}: saved {a!r}, requested {b!r}")
    return lines


def _validate_electra(config: RunConfig) -> None:
    """ELECTRA's options with train.objective=electra only, its family one with the
    discriminator's head (one line at parse time)."""
    discriminator = MODELS[DISCRIMINATOR]
    if config.electra and config.model_type not in discriminator.families:
        raise InputError(f"train.objective=electra trains {DISCRIMINATOR}, a head of "
                         f"{', '.join(discriminator.families)} models only, not of a "
                         f"{config.model_type}: leave out model.model_type (or pass electra)")
    if not config.electra:
        given = [name for name, unset in (("model.generator_size", config.model.generator_size
                                           is None),
                                          ("train.rtd_loss_weight",
                                           config.train.rtd_loss_weight == 50.0)) if not unset]
        if given:
            raise InputError(f"{', '.join(given)} set ELECTRA's generator and loss, which "
                             f"train.objective={config.train.objective!r} does not train: leave "
                             "them out (or pass --train.objective electra)")
        return
    generator_config(config, config.bert_config())


def validate(config: RunConfig) -> None:
    """Raise InputError naming the options for settings that do not fit together (each option's
    own type, choices and range are checked as it is read: `bertjax.common.options`)."""
    check(config)
    d, t = config.data, config.train
    model_type = config.model_type
    if config.next_sentence and not config.family.next_sentence:
        raise InputError(f"model.model_type={model_type!r} has no next-sentence head ("
                         f"{model_type} is pre-trained as a masked LM alone), so "
                         "train.objective='mlm+nsp' cannot train it; pass --train.objective mlm")
    if not config.next_sentence and (t.mlm_loss_weight, t.nsp_loss_weight) != (1.0, 1.0):
        raise InputError("train.mlm_loss_weight and train.nsp_loss_weight weigh the parts of "
                         f"train.objective='mlm+nsp', not of {t.objective!r}: leave them out")
    _validate_electra(config)
    if config.model.local_attention_layers and not config.family.position_table:
        raise InputError(f"model.local_attention_layers={config.model.local_attention_layers} "
                         f"initialises heads through a position table, which {model_type} "
                         "(rotary positions) has none of: leave it out")
    if d.predictions > d.seq_len:
        raise InputError(
            f"data.max_predictions ({d.predictions}) exceeds data.seq_len ({d.seq_len})")
    bert = config.bert_config()  # BertConfig checks the rest (dropout ranges, dtype)
    if d.seq_len > bert.max_sequence_length:
        raise InputError(f"data.seq_len ({d.seq_len}) exceeds the model's {bert.positions_limit}"
                         + (f"; set model.max_position_embeddings to at least "
                            f"{d.seq_len + bert.position_offset}" if bert.position_offset
                            else ""))
    if t.fsdp > 1 and t.parallel != "mesh":
        raise InputError(f"train.fsdp={t.fsdp} shards parameters over a mesh, which "
                         f"train.parallel={t.parallel!r} does not use; pass --train.parallel mesh "
                         "or leave out --train.fsdp")
    if t.mlm_loss_weight == 0 and t.nsp_loss_weight == 0:
        raise InputError("train.mlm_loss_weight and train.nsp_loss_weight are both 0: nothing "
                         "would be trained; give one of them a positive weight")
    if t.fsdp > 1 and config.optim.flatten:
        raise InputError("optim.flatten puts every gradient in one vector, which train.fsdp="
                         f"{t.fsdp} would gather from its shards on each step; leave one of them "
                         "out")
