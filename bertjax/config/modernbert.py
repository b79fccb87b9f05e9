"""ModernBERT's config.json as BertConfig fields.

Every setting transformers' `ModernBertConfig` reads is one of: a BertConfig field under its own
name (`FIELDS`, ModernBERT's alone, and the shared ones: `vocab_size`, `hidden_size`, ...), a
BertConfig field under another name (`NAMES`), a setting read into fields by `read_config`
(`layer_types` or the older `global_attn_every_n_layers`; `rope_parameters` or the older
`global_rope_theta` / `local_rope_theta`), a setting that changes nothing bertjax computes
(`INERT`, each with why), or refused in one line where its value asks for what bertjax does not
compute (`read_config`). tests/modernbert/test_modernbert_config.py holds transformers' list
of settings to these tables, so a setting a later transformers adds cannot pass unnoticed.

No framework import (`bertjax.config`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from bertjax.errors import InputError

if TYPE_CHECKING:
    from bertjax.config import BertConfig

# The two kinds of attention layer, as transformers' `layer_types` names them: every key
# (`full_attention`, global) or a sliding window of `local_attention` tokens
# (`sliding_attention`, local).
GLOBAL, LOCAL = "full_attention", "sliding_attention"
LAYER_TYPES = (GLOBAL, LOCAL)
GLOBAL_EVERY = 3  # transformers' default `global_attn_every_n_layers`: layers 0, 3, 6, ... global
POOLINGS = ("cls", "mean")  # what the classifiers read: [CLS], or the mean of the tokens

# The released checkpoints' shapes (answerdotai/ModernBERT-base and -large), for presets: with
# `model_type="modernbert"` and transformers' defaults (50368 rows, 8192 positions, window 128,
# every third layer global) they are those models' configs.
SHAPES: dict[str, dict[str, int]] = {
    "base": {"hidden_size": 768, "num_hidden_layers": 22, "num_attention_heads": 12,
             "intermediate_size": 1152},
    "large": {"hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16,
              "intermediate_size": 2624},
}
# A preset's feed-forward width as a share of its hidden size where no checkpoint gives it:
# ModernBERT-base's (1152 / 768; its gated Wi is twice as wide).
FEED_FORWARD_SHARE = 1.5

# BertConfig's fields that are ModernBERT's alone (refused for the other families unless at
# their defaults, which are transformers').
FIELDS = ("norm_bias", "attention_bias", "mlp_bias", "decoder_bias", "classifier_bias",
          "classifier_pooling", "classifier_activation", "layer_types", "global_rope_theta",
          "local_rope_theta", "local_attention", "mlp_dropout", "initializer_cutoff_factor")
# (BertConfig's name, config.json's) where they differ. ModernBERT drops out its embeddings
# (`embedding_dropout`), its attention probabilities and attention output (`attention_dropout`)
# and inside its MLP (`mlp_dropout`); no residual branch has a dropout of its own.
NAMES = (("hidden_act", "hidden_activation"), ("layer_norm_eps", "norm_eps"),
         ("hidden_dropout_prob", "embedding_dropout"),
         ("attention_probs_dropout_prob", "attention_dropout"))
# transformers' values (config.json's names) where a config.json leaves a setting out and
# BertConfig's default differs.
DEFAULTS: tuple[tuple[str, object], ...] = (
    ("vocab_size", 50368), ("intermediate_size", 1152), ("num_hidden_layers", 22),
    ("max_position_embeddings", 8192), ("norm_eps", 1e-5), ("pad_token_id", 50283),
    ("embedding_dropout", 0.0), ("attention_dropout", 0.0), ("classifier_dropout", 0.0),
)
# config.json's ids of special tokens: the tokenizer's (role) are what bertjax places, and an
# export writes these from it (`Family.config_token_ids`).
TOKEN_IDS = (("bos_token_id", "cls"), ("eos_token_id", "sep"), ("cls_token_id", "cls"),
             ("sep_token_id", "sep"))
# Settings transformers reads that change nothing bertjax computes, and why.
INERT: dict[str, str] = {
    **{name: f"the tokenizer's {role} is what bertjax places (an export writes its id)"
       for name, role in TOKEN_IDS},
    "deterministic_flash_attn": "a flash-attention kernel's setting: the same outputs",
    "sparse_prediction": "used with `labels` only; bertjax's masked LM predicts at "
                         "`masked_positions` when given, at every token otherwise",
    "sparse_pred_ignore_index": "used with `labels` only (sparse_prediction)",
    "reference_compile": "transformers 4's torch.compile switch: the same outputs",
    "tie_word_embeddings": "true: the decoder is the word embeddings (refused when false)",
}


def preset(name: str, sizes: Mapping[str, Any]) -> dict[str, Any]:
    """ModernBERT's preset of the size `name` (bertjax.config.PRESETS' `sizes`, which name no
    family): the released checkpoint's shape, vocabulary and positions for base and large
    (SHAPES and transformers' defaults), else those sizes with ModernBERT-base's feed-forward
    share; its norm epsilon (1e-5) either way."""
    defaults = dict(DEFAULTS)
    out = {**sizes, "layer_norm_eps": defaults["norm_eps"]}
    if name in SHAPES:
        return {**out, **SHAPES[name], "vocab_size": defaults["vocab_size"],
                "max_position_embeddings": defaults["max_position_embeddings"]}
    return {**out, "intermediate_size": round(FEED_FORWARD_SHARE * sizes["hidden_size"])}


def init_std(initializer_range: float, layers: int, hidden: int, role: str) -> float:
    """The standard deviation transformers initialises a ModernBERT weight of `role` with (a
    normal cut off at `initializer_cutoff_factor` of them): "in" (wqkv, wi, the embeddings),
    "out" (each wo, the heads' dense layer: smaller with depth), "final" (a classifier's last
    layer)."""
    return {"in": initializer_range, "out": initializer_range / math.sqrt(2.0 * layers),
            "final": hidden ** -0.5}[role]


def check_config(config: BertConfig) -> None:
    """A ModernBERT BertConfig's own fields: in range, one layer type per layer."""
    types = config.layer_types
    if types is not None and (len(types) != config.num_hidden_layers
                              or any(t not in LAYER_TYPES for t in types)):
        raise InputError(f"BertConfig.layer_types must give one of {LAYER_TYPES} for each of the "
                         f"{config.num_hidden_layers} layers, got {types!r}")
    if config.classifier_pooling not in POOLINGS:
        raise InputError(f"BertConfig.classifier_pooling {config.classifier_pooling!r} is not one "
                         f"of {POOLINGS}")
    if not isinstance(config.local_attention, int) or config.local_attention < 1:
        raise InputError(f"BertConfig.local_attention must be a positive integer, got "
                         f"{config.local_attention!r}")
    for name in ("global_rope_theta", "local_rope_theta", "initializer_cutoff_factor"):
        if not 0 < getattr(config, name) < math.inf:
            raise InputError(f"BertConfig.{name} must be a finite number above 0, got "
                             f"{getattr(config, name)!r}")
    if not 0.0 <= config.mlp_dropout < 1.0:
        raise InputError(f"BertConfig.mlp_dropout must be in [0, 1), got {config.mlp_dropout!r}")


def layer_pattern(layers: int, every: int = GLOBAL_EVERY) -> tuple[str, ...]:
    """Each layer's attention when every `every`-th layer, from the first, is global
    (transformers' `global_attn_every_n_layers`)."""
    return tuple(LOCAL if i % every else GLOBAL for i in range(layers))


def read_config(data: Mapping[str, Any]) -> dict[str, Any]:
    """A ModernBERT config.json (transformers' defaults filled in) with its layer types and RoPE
    bases as BertConfig's fields (`layer_types` None where it is the default pattern); settings
    bertjax does not compute are refused, each in one line."""
    data = dict(data)
    if data.get("tie_word_embeddings", True) is not True:
        raise InputError("config.json has tie_word_embeddings false: an untied masked-LM "
                         "decoder, which bertjax (tied, as ModernBERT) cannot hold")
    hidden, heads = data.get("hidden_size", 768), data.get("num_attention_heads", 12)
    head_dim = data.get("head_dim")
    if head_dim is not None and isinstance(hidden, int) and isinstance(heads, int) and heads > 0 \
            and head_dim != hidden // heads:
        raise InputError(f"config.json has head_dim {head_dim}, not hidden_size / "
                         f"num_attention_heads = {hidden // heads}: rotary embeddings over part "
                         "of a head are not supported")
    data.update(_rope_bases(data))
    data["layer_types"] = _layer_types(data)
    return data


def _rope_bases(data: Mapping[str, Any]) -> dict[str, float]:
    """global_rope_theta and local_rope_theta from transformers 5's `rope_parameters` (by layer
    type) or the older names; any RoPE other than the default one (scaled, dynamic) refused."""
    if data.get("rope_scaling") is not None:
        raise InputError(f"config.json has rope_scaling {data['rope_scaling']!r}: only "
                         "ModernBERT's unscaled rotary embeddings are supported")
    bases = {"global_rope_theta": data.get("global_rope_theta", 160_000.0),
             "local_rope_theta": data.get("local_rope_theta", 10_000.0)}
    parameters = data.get("rope_parameters") or {}
    if not isinstance(parameters, Mapping):
        raise InputError(f"config.json's rope_parameters must be an object by layer type, got "
                         f"{parameters!r}")
    for layer_type, field in ((GLOBAL, "global_rope_theta"), (LOCAL, "local_rope_theta")):
        rope = parameters.get(layer_type) or {}
        extra = {k: v for k, v in rope.items() if k not in ("rope_type", "rope_theta")}
        if rope.get("rope_type", "default") != "default" or extra:
            raise InputError(f"config.json's rope_parameters[{layer_type!r}] is {rope!r}: only "
                             "the default rotary embeddings (rope_type 'default', a rope_theta) "
                             "are supported")
        if "rope_theta" in rope:
            bases[field] = rope["rope_theta"]
    return bases


def _layer_types(data: Mapping[str, Any]) -> tuple[str, ...] | None:
    """`layer_types` (transformers 5), else the pattern of `global_attn_every_n_layers`; None
    where that is the default pattern (every third layer global)."""
    layers = data.get("num_hidden_layers", 22)
    types = data.get("layer_types")
    if types is None:
        every = data.get("global_attn_every_n_layers", GLOBAL_EVERY)
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise InputError(f"config.json's global_attn_every_n_layers must be a positive "
                             f"integer, got {every!r}")
        types = layer_pattern(layers, every) if isinstance(layers, int) else ()
    if not isinstance(types, list | tuple):
        raise InputError(f"config.json's layer_types must be a list, got {types!r}")
    types = tuple(types)
    return None if isinstance(layers, int) and types == layer_pattern(layers) else types
