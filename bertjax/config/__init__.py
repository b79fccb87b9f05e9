"""BertConfig: the one configuration shared by bertjax, bert_torch and parity.

This package imports no framework, so `bert_torch` can use it without pulling in JAX. Field names
follow Hugging Face's `BertConfig`, so `config.json` files read and write as-is; `model_type` names
the family, whose differences from BERT are data (`bertjax.config.families`).

Modules: `__init__` (BertConfig, presets, parameter paths), `families` (the BERT family table),
`modernbert` (ModernBERT's config.json: how each setting transformers reads is taken), `heads`
(the model classes and their heads as data), `checks` (the checks and messages both trees make
on a class's family and a model's inputs; NumPy).
Imports: `bertjax.errors` and `bertjax.common.fields` (how a setting is declared); `checks` NumPy.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bertjax.common.fields import option_field as _f
from bertjax.config import modernbert
from bertjax.config.families import FAMILIES, Family, foreign_fields
from bertjax.config.modernbert import LOCAL, POOLINGS, layer_pattern
from bertjax.errors import InputError

# Activations both frameworks implement identically. "gelu" is the exact (erf) GELU, as in the
# original BERT and transformers; "gelu_new"/"gelu_pytorch_tanh" are the tanh approximation.
ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")
COMPUTE_DTYPES = ("float32", "bfloat16")
# "exact": einsum scores, float32 softmax, attention-probability dropout (the parity reference);
# "fused": jax.nn.dot_product_attention (cuDNN on NVIDIA GPUs with bfloat16, XLA otherwise), no
# probability dropout; "auto": fused where cuDNN applies and no probability dropout is due.
ATTENTION_IMPLEMENTATIONS = ("auto", "exact", "fused")
# Fields of BertConfig that are bertjax's own (how to compute), not Hugging Face's (what to
# compute): never written to or read from config.json.
COMPUTE_FIELDS = ("dtype", "attn_implementation", "scan_layers", "remat")
# The fields that set the weights' shapes: a checkpoint's config.json decides them, a loader's
# overrides may not (they change only how the model computes: dtype, dropout, ...).
SHAPE_FIELDS = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers",
                "num_attention_heads", "intermediate_size", "max_position_embeddings",
                "type_vocab_size", "embedding_size", "norm_bias", "attention_bias", "mlp_bias",
                "decoder_bias", "classifier_bias")
# The MLM loss divides by max(sum of masked_weights, this): a batch with no real prediction has
# loss 0, not NaN. Shared by bertjax.losses and bert_torch.losses.
LOSS_WEIGHT_FLOOR = 1e-5
# Question answering's outputs per token: Hugging Face's BertForQuestionAnswering splits its
# `qa_outputs` layer into start and end logits, and its config says num_labels=2.
QA_OUTPUTS = ("start", "end")


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """Shape and numerics of a BERT model (Hugging Face field names); `model_type` is its
    family (`FAMILIES`). Each field's help is written here once: the options of a pre-training
    run's [model] section (`bertjax.runs.config`) and `bertjax bench --set` read it."""

    vocab_size: int = _f(30522, "rows of the word-embedding table: the tokenizer's vocabulary",
                         check="positive")
    hidden_size: int = _f(768, "width of the hidden states", check="positive")
    num_hidden_layers: int = _f(12, "encoder layers", check="positive")
    num_attention_heads: int = _f(12, "attention heads per layer (they divide hidden_size)",
                                  check="positive")
    intermediate_size: int = _f(3072, "width of the feed-forward layer", check="positive")
    hidden_act: str = _f("gelu", "feed-forward activation: gelu (exact, erf), gelu_new or "
                         "gelu_pytorch_tanh (the tanh approximation), relu", ACTIVATIONS)
    hidden_dropout_prob: float = _f(0.1, "dropout on embeddings and residual branches "
                                    "(ModernBERT: its embeddings alone, `embedding_dropout`)",
                                    check="probability")
    attention_probs_dropout_prob: float = _f(0.1, "dropout on attention probabilities "
                                             "(ModernBERT: and the attention's output, "
                                             "`attention_dropout`)", check="probability")
    max_position_embeddings: int = _f(512, "rows of the position table (a RoBERTa's holds "
                                      "pad_token_id + 1 rows before its first position)",
                                      check="positive")
    type_vocab_size: int = _f(2, "token types (segments A and B)", check="positive")
    initializer_range: float = _f(0.02, "standard deviation of the initial weights",
                                  check="positive")
    layer_norm_eps: float = _f(1e-12, "LayerNorm epsilon", check="positive")
    pad_token_id: int = _f(0, "the padding token's id", check="non_negative")
    # Sequence and token classification: the label names, in id order, and the dropout before
    # the classifier (None: hidden_dropout_prob; multiple choice uses it too), as in Hugging Face.
    id2label: tuple[str, ...] = _f(("LABEL_0", "LABEL_1"), "a classifier's labels, in id order")
    classifier_dropout: float | None = _f(None, "dropout before a classifier",
                                          check="probability", default_help="hidden_dropout_prob")
    model_type: str = _f("bert", "the family (bertjax.config.families)", tuple(FAMILIES))
    # the embeddings' width where it is not hidden_size (ELECTRA's): then `embeddings_project`
    # takes them to hidden_size and the masked-LM head back; None: hidden_size
    embedding_size: int | None = _f(None, "ELECTRA's embedding width, where it is not "
                                    "hidden_size", check="positive", default_help="hidden_size")
    # ModernBERT's alone (`config.modernbert.FIELDS`; its config.json's names and defaults), each
    # refused for the other families unless at its default
    norm_bias: bool = _f(False, "ModernBERT: its LayerNorms have a bias")
    attention_bias: bool = _f(False, "ModernBERT: its attention's wqkv and wo have biases")
    mlp_bias: bool = _f(False, "ModernBERT: its feed-forward's wi and wo have biases")
    decoder_bias: bool = _f(True, "ModernBERT: its masked-LM decoder has a bias")
    classifier_bias: bool = _f(False, "ModernBERT: its heads' dense layer has a bias (a "
                               "classifier's last layer always has one)")
    classifier_pooling: str = _f("cls", "ModernBERT: what its sequence classifier and multiple "
                                 "choice read: [CLS] (cls) or the mean of the tokens (mean)",
                                 POOLINGS)
    classifier_activation: str = _f("gelu", "ModernBERT: its heads' activation (masked LM "
                                    "included)", ACTIVATIONS)
    layer_types: tuple[str, ...] | None = _f(
        None, "ModernBERT: each layer's attention, full_attention (every token) or "
        "sliding_attention (a window of local_attention tokens)",
        default_help="every third layer full from the first (global_attn_every_n_layers=3)")
    global_rope_theta: float = _f(160_000.0, "ModernBERT: the rotary base of its full-attention "
                                  "layers", check="positive")
    local_rope_theta: float = _f(10_000.0, "ModernBERT: the rotary base of its sliding-window "
                                 "layers", check="positive")
    local_attention: int = _f(128, "ModernBERT: the sliding window of its local layers: a token "
                              "attends to local_attention // 2 tokens on either side",
                              check="positive")
    mlp_dropout: float = _f(0.0, "ModernBERT: dropout inside its feed-forward",
                            check="probability")
    initializer_cutoff_factor: float = _f(2.0, "ModernBERT: initial weights are normal, cut off "
                                          "at this many standard deviations", check="positive")
    # Not Hugging Face fields (COMPUTE_FIELDS): how bertjax computes, never what.
    # The dtype of activations and matmuls; parameters, softmax, LayerNorm statistics and logits
    # stay float32 whatever this says.
    dtype: str = _f("float32", "compute dtype of activations and matmuls (parameters, softmax, "
                    "LayerNorm statistics and logits stay float32)", COMPUTE_DTYPES)
    attn_implementation: str = _f(
        "auto", "attention: exact einsum + float32 softmax, fused jax.nn.dot_product_attention "
        "(cuDNN on GPU in bfloat16; no attention-probability dropout), or auto (fused where "
        "cuDNN applies and no such dropout is due)", ATTENTION_IMPLEMENTATIONS)
    scan_layers: bool = _f(False, "run the layers under lax.scan (one layer traced: faster "
                           "compilation)")
    remat: bool = _f(False, "recompute each layer's activations in the backward pass (less "
                     "memory)")

    def __post_init__(self) -> None:
        if self.model_type not in FAMILIES:
            raise InputError(f"BertConfig.model_type {self.model_type!r} is not a family bertjax "
                             f"has; use one of {', '.join(FAMILIES)}")
        for name in (
            "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "intermediate_size", "max_position_embeddings", "type_vocab_size",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InputError(f"BertConfig.{name} must be a positive integer, got {value!r}")
        if self.embedding_size is not None and (
                not isinstance(self.embedding_size, int) or isinstance(self.embedding_size, bool)
                or self.embedding_size <= 0):
            raise InputError(f"BertConfig.embedding_size must be None or a positive integer, got "
                             f"{self.embedding_size!r}")
        self._check_foreign_fields()
        if self.hidden_size % self.num_attention_heads:
            raise InputError(
                f"BertConfig.hidden_size ({self.hidden_size}) must be divisible by "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        for name in ("hidden_act", "classifier_activation"):
            if getattr(self, name) not in ACTIVATIONS:
                raise InputError(f"BertConfig.{name} {getattr(self, name)!r} is not supported; use "
                                 f"one of {ACTIVATIONS}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise InputError(f"BertConfig.{name} must be in [0, 1), got {value!r}")
        for name in ("initializer_range", "layer_norm_eps"):
            value = getattr(self, name)
            if not 0 < value < math.inf:  # NaN too
                raise InputError(f"BertConfig.{name} must be a finite number above 0, got {value!r}")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise InputError(
                f"BertConfig.pad_token_id ({self.pad_token_id}) must be in [0, vocab_size="
                f"{self.vocab_size})"
            )
        if self.max_sequence_length < 1:
            raise InputError(
                f"BertConfig.max_position_embeddings ({self.max_position_embeddings}) leaves no "
                f"position for a token: {self.model_type} positions start at pad_token_id + 1 "
                f"= {self.position_offset}")
        if not self.id2label or len(set(self.id2label)) != len(self.id2label):
            raise InputError(f"BertConfig.id2label must name each label once, got {self.id2label!r}")
        if self.classifier_dropout is not None and not 0.0 <= self.classifier_dropout < 1.0:
            raise InputError(
                f"BertConfig.classifier_dropout must be None or in [0, 1), got {self.classifier_dropout!r}")
        if self.dtype not in COMPUTE_DTYPES:
            raise InputError(f"BertConfig.dtype {self.dtype!r} is not one of {COMPUTE_DTYPES}")
        if self.attn_implementation not in ATTENTION_IMPLEMENTATIONS:
            raise InputError(f"BertConfig.attn_implementation {self.attn_implementation!r} is not one "
                             f"of {ATTENTION_IMPLEMENTATIONS}")
        if self.family.encoder == "modernbert":
            modernbert.check_config(self)

    def _check_foreign_fields(self) -> None:
        """Another family's fields (`Family.own_fields`) at their defaults: a BERT has no
        embedding_size (ELECTRA's) and no ModernBERT switch."""
        for name in foreign_fields(self.family):
            default = _FIELDS[name].default
            if getattr(self, name) != default:
                owner = next(f.model_type for f in FAMILIES.values() if name in f.own_fields)
                raise InputError(f"BertConfig.{name} is {owner}'s setting; a {self.model_type} "
                                 f"has none: leave it at {default!r}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def family(self) -> Family:
        return FAMILIES[self.model_type]

    @property
    def embedding_width(self) -> int:
        """The width of the embeddings: `embedding_size`, or `hidden_size`."""
        return self.embedding_size or self.hidden_size

    @property
    def position_offset(self) -> int:
        """The first position row of a sequence: 0, or pad_token_id + 1 (RoBERTa)."""
        return self.pad_token_id + 1 if self.family.offset_positions else 0

    @property
    def max_sequence_length(self) -> int:
        """The longest sequence the position table holds: max_position_embeddings less the
        rows before the first position (RoBERTa's 514 rows hold 512 tokens)."""
        return self.max_position_embeddings - self.position_offset

    @property
    def positions_limit(self) -> str:
        """How messages name the longest sequence: max_position_embeddings (N), and for a
        family whose positions start later, the rows before the first one."""
        limit = f"max_position_embeddings ({self.max_position_embeddings})"
        if self.position_offset:
            limit += (f" less the {self.position_offset} rows before {self.model_type}'s first "
                      f"position: {self.max_sequence_length} tokens")
        return limit

    @property
    def attention_types(self) -> tuple[str, ...]:
        """Each layer's attention (ModernBERT's `layer_types`, the default pattern where None;
        every layer full for the other families)."""
        if self.family.encoder != "modernbert":
            return layer_pattern(self.num_hidden_layers, 1)
        return self.layer_types or layer_pattern(self.num_hidden_layers)

    @property
    def attention_windows(self) -> tuple[int | None, ...]:
        """How far each layer's queries see: None for every token (a global layer), or the
        tokens on either side of a sliding-window layer (`local_attention // 2`, transformers'
        `sliding_window`, as ModernBERT's encoders compute it)."""
        return tuple(self.local_attention // 2 if kind == LOCAL else None
                     for kind in self.attention_types)

    @property
    def num_labels(self) -> int:
        return len(self.id2label)

    @property
    def classifier_dropout_prob(self) -> float:
        """The classifier's dropout: `classifier_dropout`, or `hidden_dropout_prob` if None."""
        return self.hidden_dropout_prob if self.classifier_dropout is None else self.classifier_dropout

    def replace(self, **changes: Any) -> BertConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> BertConfig:
        """One of PRESETS (tiny, mini, small, medium, base, large), with optional overrides; a
        `model_type` among them whose family has presets of its own (`Family.preset`:
        ModernBERT's released shapes) gets its family's preset of that size."""
        if name not in PRESETS:
            raise InputError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
        model_type = overrides.get("model_type", "bert")
        family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
        sizes = PRESETS[name]
        if family is not None and family.preset is not None:
            sizes = family.preset(name, sizes)
        return cls(**{**sizes, **overrides})

    # --- Hugging Face config.json -------------------------------------------------------------

    def to_hf_dict(self, architecture: str = "BertForPreTraining") -> dict[str, Any]:
        """The fields transformers' config of the family reads, for a checkpoint of
        `architecture` (bertjax's class name: BertForMaskedLM is a RobertaForMaskedLM in a
        RoBERTa's config.json)."""
        family = self.family
        names = dict(family.config_names)
        left_out = (*COMPUTE_FIELDS, "id2label", *family.absent_fields, *foreign_fields(family))
        fields = {names.get(f.name, f.name): getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name not in left_out}
        if "embedding_size" in fields:  # ELECTRA's: written even when it is hidden_size (its
            fields["embedding_size"] = self.embedding_width  # config's default is 128)
        if "layer_types" in fields:  # ModernBERT's: written out (transformers 5 reads the list)
            fields["layer_types"] = list(self.attention_types)
        if self.classifier_dropout is None and (
                "classifier_dropout" in names or "classifier_dropout" in dict(family.config_defaults)):
            # no None there (DistilBERT's seq_classif_dropout, ModernBERT's number)
            fields[names.get("classifier_dropout", "classifier_dropout")] = self.classifier_dropout_prob
        positions = {"position_embedding_type": "absolute"} if family.position_table else {}
        return {
            "architectures": [family.class_name(architecture)],
            **positions,
            **fields,
            "id2label": {str(i): name for i, name in enumerate(self.id2label)},
            "label2id": {name: i for i, name in enumerate(self.id2label)},
        }

    @classmethod
    def from_hf_dict(cls, data: dict[str, Any], **overrides: Any) -> BertConfig:
        """Read the fields we model; refuse settings that would change the architecture."""
        model_type = data.get("model_type", "bert")
        if model_type not in FAMILIES:
            raise InputError(f"config.json has model_type {model_type!r}, a family bertjax does "
                             f"not have; it loads {', '.join(FAMILIES)}")
        position_type = data.get("position_embedding_type", "absolute")
        if position_type != "absolute":
            raise InputError(
                f"config.json has position_embedding_type {position_type!r}; only 'absolute' "
                "is supported"
            )
        if data.get("is_decoder") or data.get("add_cross_attention"):
            raise InputError("config.json describes a decoder / cross-attention BERT; not supported")
        family = FAMILIES[model_type]
        data = {**dict(family.config_defaults), **data}  # transformers' defaults that differ
        if family.config_reader is not None:  # ModernBERT's layer types and RoPE bases
            data = family.config_reader(data)
        data = {**data, **{ours: data[theirs] for ours, theirs in family.config_names
                           if theirs in data}}
        known = {f.name for f in dataclasses.fields(cls)} - {
            *COMPUTE_FIELDS, "id2label", *family.absent_fields, *foreign_fields(family)}
        kwargs = {k: v for k, v in data.items() if k in known}
        if not family.token_types:
            kwargs["type_vocab_size"] = 1
        if kwargs.get("embedding_size") == kwargs.get("hidden_size", cls.hidden_size):
            kwargs["embedding_size"] = None  # the same width: no projection, as transformers
        if isinstance(data.get("id2label"), dict) and data["id2label"]:
            labels = {int(i): str(name) for i, name in data["id2label"].items()}
            if sorted(labels) != list(range(len(labels))):
                raise InputError(f"config.json's id2label ids must be 0..n-1, got {sorted(labels)}")
            kwargs["id2label"] = tuple(labels[i] for i in range(len(labels)))
        if kwargs.get("pad_token_id") is None:
            kwargs.pop("pad_token_id", None)
        return cls(**{**kwargs, **overrides})

    def save_hf_json(self, path: str | Path, architecture: str = "BertForPreTraining", *,
                     token_ids: dict[str, int] | None = None) -> None:
        """config.json for a checkpoint of `architecture`; `token_ids`: special tokens' ids its
        family's config names (ModernBERT's cls_token_id, ...), from the tokenizer."""
        data = {**self.to_hf_dict(architecture), **(token_ids or {})}
        Path(path).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")

    @classmethod
    def load_hf_json(cls, path: str | Path, **overrides: Any) -> BertConfig:
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise FileNotFoundError(f"no config.json at {path}")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise InputError(f"{path} is not valid JSON: {err}") from err
        return cls.from_hf_dict(data, **overrides)


_FIELDS = {f.name: f for f in dataclasses.fields(BertConfig)}


def _shape(layers: int, hidden: int, heads: int) -> dict[str, int]:
    return {
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "intermediate_size": 4 * hidden,
    }


# The one table of model sizes (Turc et al. 2019 names for the small ones).
# the largest vocabulary bertjax trains: more than any BERT has (multilingual ones: about 120k);
# its embeddings alone would be 3 GB at hidden size 768, and a corpus rarely has that many
# pieces, so a larger request is a typo
MAX_VOCAB_SIZE = 1_000_000

PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {**_shape(2, 128, 2), "vocab_size": 1024, "max_position_embeddings": 128},
    "mini": _shape(4, 256, 4),
    "small": _shape(4, 512, 8),
    "medium": _shape(8, 512, 8),
    "base": _shape(12, 768, 12),
    "large": _shape(24, 1024, 16),
}


# --- parameter paths ---------------------------------------------------------------------------

# The encoder's layer stack: `layers.{i}.…` in a loop model; under `config.scan_layers` one module
# `layers.…` whose parameters are stacked (L, ...), or, where the first layer differs from the rest
# (ModernBERT's has no attention norm), `layers.0.…` and one module `layers.from_1.…` stacking
# layers 1 to L - 1. All have the same per-layer PyTorch names.
LAYERS = "layers"
STACK_FROM = "from_"  # `layers.from_{k}`: a stack whose first layer is layer k


def _part(key: Any) -> str:
    """A path element as text: a plain key or index, or a JAX key-path entry (`DictKey`,
    `GetAttrKey`, `SequenceKey`)."""
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def stacked_at(path: Iterable[Any]) -> int | None:
    """Where the layer index belongs in the path of a scan model's stacked (L, ...) parameter
    (right after `layers`, or in place of `from_{k}`); None for every other parameter,
    `layers.{i}.…` of a loop model included. Takes Flax paths, checkpoint paths (indices as
    strings) and JAX key paths."""
    parts = [_part(p) for p in path]
    for i in range(len(parts) - 1):
        if parts[i] == LAYERS and not parts[i + 1].isdigit():
            return i + 1
    return None


def layer_path(path: tuple[Any, ...], index: int) -> tuple[Any, ...]:
    """The loop model's path of the `index`-th layer of the stacked parameter at `path` (a
    `stacked_at` one): `layers.{index}.…`, or `layers.{k + index}.…` for a stack `from_{k}`."""
    at = stacked_at(path)
    assert at is not None, f"{path} is not a stacked parameter's path"
    part = _part(path[at])
    start = part.removeprefix(STACK_FROM)
    if part.startswith(STACK_FROM) and start.isdigit():
        return (*path[:at], int(start) + index, *path[at + 1:])
    return (*path[:at], index, *path[at:])


def per_layer_shape(path: Iterable[Any], shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of one layer's parameter: a scan model's stacked leaf without its (L,) axis."""
    return tuple(shape[1:]) if stacked_at(path) is not None else tuple(shape)
