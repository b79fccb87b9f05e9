"""ModernBERT in Flax NNX: the encoder beside BERT's (`bertjax.model`), and the two heads'
modules ModernBERT's classes differ in.

Mirrors `bert_torch/modernbert.py` class for class and attribute for attribute. What differs
from BERT (transformers' `modeling_modernbert.py`, Warner et al. 2024):

- pre-norm layers, the first without an attention norm, and a final norm; LayerNorms and dense
  layers without biases unless the config's switches say so (`norm_bias`, `attention_bias`, ...);
- no position table: rotary embeddings, one base for global layers and one for local ones, their
  tables computed once per forward (`rotary_tables`), not per layer;
- alternating attention (`config.attention_types`): global layers attend to every token, local
  ones to `local_attention // 2` tokens on either side (`attention.windowed_attention`, which
  computes the window only, `attention.local_mask` where the scores are all computed, or
  `local_window_size` on the fused path), in packed rows inside each sequence and under
  `scan_layers` (the first layer, which differs, runs before a scan over the others, each global
  or local through `lax.cond`);
- one `wqkv` projection, a gated GELU feed-forward (`wi` to twice the intermediate size, `wo`);
- no token types and no pooler: the classifiers pool [CLS] or the tokens' mean
  (`classifier_pooling`, `ModernBertPooling`, in the encoder's pooler slot, weightless) and
  classify through a head of dense, activation, norm, dropout and a last layer
  (`ModernBertClassifier`); the masked-LM head is dense, activation, norm and the tied decoder
  (`ModernBertMLMHead`).

The heads' classes (`bertjax.heads`) hold this encoder as `bert` for a ModernBERT config and pick
these heads' modules for it, as they pick RoBERTa's classifier. Attention's arithmetic
(`bertjax.attention`) and the numerics (`bertjax.numerics`) are BERT's.

Shapes: B batch, S sequence, H hidden, A heads, D head dim, I intermediate, V vocabulary,
K packed sequences per row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from bertjax import inputs, numerics
from bertjax.attention import (
    exact_attention,
    fused_attention,
    local_mask,
    take_rows,
    window_block,
    windowed_attention,
)
from bertjax.config import STACK_FROM, BertConfig
from bertjax.config.checks import check_encoder, check_pooler_inputs
from bertjax.config.heads import ENCODER, MODELS, ModelClass
from bertjax.config.modernbert import GLOBAL, LOCAL, init_std
from bertjax.model import BertOutput, LayerNorm, embedding_rows, linear, present, stack_modules

Rotary = tuple[jax.Array, jax.Array]  # cos, sin: (S, D) or (B, S, D), float32


def truncated_normal(std: float, cutoff: float) -> nnx.Initializer:
    """transformers' ModernBERT init, `trunc_normal_(std, a=-cutoff*std, b=cutoff*std)`: normal
    with standard deviation `std`, cut off (not rescaled) at `cutoff` of them."""
    def init(key: jax.Array, shape: Any, dtype: Any = jnp.float32) -> jax.Array:
        return std * jax.random.truncated_normal(key, -cutoff, cutoff, shape, dtype)
    return init


def _init(config: BertConfig, role: str) -> nnx.Initializer:
    """transformers' init of a weight of `role` (`config.modernbert.init_std`)."""
    std = init_std(config.initializer_range, config.num_hidden_layers, config.hidden_size, role)
    return truncated_normal(std, config.initializer_cutoff_factor)


def _norm(config: BertConfig, rngs: nnx.Rngs) -> LayerNorm:
    return LayerNorm(config, use_bias=config.norm_bias, rngs=rngs)


def inverse_frequencies(config: BertConfig, theta: float) -> np.ndarray:
    """RoPE's (D / 2,) inverse frequencies for base `theta`, float32 as transformers computes
    them (bit for bit: its float32 power)."""
    D = config.head_dim
    return np.float32(1.0) / (np.float32(theta) ** (np.arange(0, D, 2, dtype=np.float32)
                                                    / np.float32(D)))


def rotary_tables(config: BertConfig, theta: float, seq_len: int,
                  positions: jax.Array | None) -> Rotary:
    """cos and sin of each position's angles (S, D), or of packed rows' `positions` (B, S) ->
    (B, S, D); float32. Computed once per forward for each base, read by every layer."""
    pos = jnp.arange(seq_len) if positions is None else positions  # (S,) or (B, S)
    freqs = pos[..., None].astype(jnp.float32) * inverse_frequencies(config, theta)  # (., D/2)
    angles = jnp.concatenate([freqs, freqs], axis=-1)  # (., D)
    return jnp.cos(angles), jnp.sin(angles)


def rotate(x: jax.Array, rotary: Rotary) -> jax.Array:
    """RoPE on x (B, S, A, D): x cos + rotate_half(x) sin, in float32, back in x's dtype."""
    cos, sin = (t[None, :, None, :] if t.ndim == 2 else t[:, :, None, :] for t in rotary)
    x32 = x.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)  # (B, S, A, D)
    return (x32 * cos + rotated * sin).astype(x.dtype)


class ModernBertEmbeddings(nnx.Module):
    """Word embeddings, then LayerNorm and dropout: no positions (rotary, in attention) and no
    token types."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.word_embeddings = nnx.Embed(
            config.vocab_size, config.hidden_size, dtype=numerics.compute_dtype(config),
            param_dtype=jnp.float32, embedding_init=_init(config, "in"), rngs=rngs)
        self.norm = _norm(config, rngs)
        self.dropout = nnx.Dropout(config.hidden_dropout_prob)  # its config.json's embedding_dropout

    def __call__(self, input_ids: jax.Array, *, deterministic: bool = True,
                 rngs: nnx.Rngs | None = None) -> jax.Array:
        words = embedding_rows(self.word_embeddings, input_ids)  # (B, S, H)
        return self.dropout(self.norm(words), deterministic=deterministic, rngs=rngs)


class ModernBertAttention(nnx.Module):
    """Self-attention through one `wqkv` projection, rotary positions on the queries and keys,
    then `wo`; a local layer's queries attend within `window` tokens on either side. Returns
    (output, probabilities); the paths are BERT's (`bertjax.model.BertAttention`): exact, or
    fused (`jax.nn.dot_product_attention`, with `local_window_size` for a local layer). A scan
    model's stacked layer is told at each call whether it is local (`local`)."""

    def __init__(self, config: BertConfig, *, local: bool, rngs: nnx.Rngs):
        h = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.implementation = config.attn_implementation
        self.local_window = config.local_attention // 2  # transformers' sliding_window
        self.window = self.local_window if local else None
        self.wqkv = linear(config, h, 3 * h, rngs, use_bias=config.attention_bias,
                           kernel_init=_init(config, "in"))
        self.wo = linear(config, h, h, rngs, use_bias=config.attention_bias,
                         kernel_init=_init(config, "out"))
        self.attention_dropout = nnx.Dropout(config.attention_probs_dropout_prob)
        self.output_dropout = nnx.Dropout(config.attention_probs_dropout_prob)

    def __call__(self, x: jax.Array, attention_mask: jax.Array, rotary: Rotary, *,
                 deterministic: bool = True, rngs: nnx.Rngs | None = None,
                 output_probs: bool = True, local: bool | None = None,
                 ) -> tuple[jax.Array, jax.Array | None]:
        window = self.window if local is None else self.local_window if local else None
        B, S, H = x.shape
        qkv = self.wqkv(x).reshape(B, S, 3, self.num_heads, self.head_dim)  # (B, S, 3, A, D)
        q, k = rotate(qkv[:, :, 0], rotary), rotate(qkv[:, :, 1], rotary)  # (B, S, A, D)
        v = qkv[:, :, 2]  # (B, S, A, D)
        packed = attention_mask.ndim == 3
        mask = attention_mask if window is None else local_mask(attention_mask, window)
        drops_probs = not deterministic and self.attention_dropout.rate > 0
        cudnn = (numerics.cudnn_attention_applies(q.dtype, self.head_dim) and not packed
                 and window is None)  # cuDNN has no two-sided window without causality
        if numerics.use_fused_attention(self.implementation, drops_probs, output_probs, cudnn,
                                        packed):
            context = (fused_attention(q, k, v, mask, cudnn) if packed else
                       fused_attention(q, k, v, attention_mask, cudnn, window))
            probs = None
        elif (window is not None and not drops_probs and not output_probs
              and (block := window_block(S, window)) is not None):  # only the window's scores
            context = windowed_attention(q, k, v, attention_mask, window, block,
                                         numerics.cpu_attention_chunks(B, drops_probs))
            probs = None
        else:
            def dropout(p: jax.Array) -> jax.Array:
                return self.attention_dropout(p, deterministic=deterministic, rngs=rngs)

            chunks = numerics.cpu_attention_chunks(B, drops_probs)
            context, probs = exact_attention(q, k, v, mask, dropout, chunks)
        out = self.wo(context.reshape(B, S, H))  # (B, S, A, D) -> (B, S, H)
        return self.output_dropout(out, deterministic=deterministic, rngs=rngs), probs



class ModernBertMLP(nnx.Module):
    """The gated feed-forward: `wi` to the value and the gate (2 I), activation(value) x gate,
    dropout, `wo` back to H."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        h, i = config.hidden_size, config.intermediate_size
        self.wi = linear(config, h, 2 * i, rngs, use_bias=config.mlp_bias,
                         kernel_init=_init(config, "in"))
        self.wo = linear(config, i, h, rngs, use_bias=config.mlp_bias,
                         kernel_init=_init(config, "out"))
        self.dropout = nnx.Dropout(config.mlp_dropout)
        self.activation = numerics.activation(config.hidden_act)

    def __call__(self, x: jax.Array, *, deterministic: bool = True,
                 rngs: nnx.Rngs | None = None) -> jax.Array:
        value, gate = jnp.split(self.wi(x), 2, axis=-1)  # (B, S, 2 I) -> (B, S, I) each
        gated = self.dropout(self.activation(value) * gate, deterministic=deterministic, rngs=rngs)
        return self.wo(gated)  # (B, S, H)


class ModernBertLayer(nnx.Module):
    """Pre-norm block: x + attention(norm(x)), then + MLP(norm(.)). The first layer's attention
    norm is the identity (`attn_norm` None): the embeddings' norm precedes it. Global or local
    attention as `config.attention_types` says for layer `index`, or as `local` says."""

    def __init__(self, config: BertConfig, index: int, *, rngs: nnx.Rngs):
        self.attn_norm = _norm(config, rngs) if index else None
        self.attn = ModernBertAttention(config, local=config.attention_types[index] == LOCAL,
                                        rngs=rngs)
        self.mlp_norm = _norm(config, rngs)
        self.mlp = ModernBertMLP(config, rngs=rngs)

    def __call__(self, x: jax.Array, attention_mask: jax.Array, rotary: Rotary, *,
                 deterministic: bool = True, rngs: nnx.Rngs | None = None,
                 output_probs: bool = True, local: bool | None = None,
                 ) -> tuple[jax.Array, jax.Array | None]:
        h = x if self.attn_norm is None else self.attn_norm(x)
        attended, probs = self.attn(h, attention_mask, rotary, deterministic=deterministic,
                                    rngs=rngs, output_probs=output_probs, local=local)
        x = x + attended  # (B, S, H)
        return x + self.mlp(self.mlp_norm(x), deterministic=deterministic, rngs=rngs), probs


class ModernBertPooling(nnx.Module):
    """What ModernBERT's classifiers read, in the encoder's pooler slot (no weights): [CLS]
    (row 0, or packed rows' `cls_positions` (B, K)) or the mean of each sequence's tokens
    (`classifier_pooling`); (B, H) or (B, K, H), an empty slot's (-1) zeros."""

    def __init__(self, config: BertConfig):
        self.pooling = config.classifier_pooling

    def __call__(self, sequence_output: jax.Array, attention_mask: jax.Array,
                 sequence_ids: jax.Array | None, cls_positions: jax.Array | None) -> jax.Array:
        x = sequence_output.astype(jnp.float32)  # (B, S, H)
        if self.pooling == "cls":
            if cls_positions is None:
                return x[:, 0]  # (B, H)
            rows = take_rows(x, jnp.maximum(cls_positions, 0))  # (B, K, H)
            return jnp.where(cls_positions[:, :, None] >= 0, rows, 0)
        tokens = attention_mask != 0  # (B, S)
        if cls_positions is None or sequence_ids is None:
            weights = tokens[:, None, :]  # (B, 1, S)
        else:
            weights = inputs.sequence_mask(sequence_ids, cls_positions.shape[1]) & tokens[:, None]
        weights = weights.astype(jnp.float32)  # (B, 1 or K, S)
        counts = jnp.maximum(weights.sum(-1, keepdims=True), 1.0)  # (B, 1 or K, 1)
        mean = jnp.einsum("bks,bsh->bkh", weights, x, precision=jax.lax.Precision.HIGHEST) / counts
        return mean[:, 0] if cls_positions is None else mean  # (B, H) or (B, K, H)


class ModernBertModel(nnx.Module):
    """The ModernBERT encoder: embeddings, `num_hidden_layers` pre-norm layers (global and local
    attention as `config.attention_types` says), the final norm. The bare encoder of a ModernBERT
    (transformers' ModernBertModel) and what the heads' classes hold as `bert`; it declares what
    it is as `bertjax.model.BertModel` does (`base_model_prefix`, `spec`, `head_modules`).

    `add_pooling_layer` puts `ModernBertPooling` in the pooler slot (the sequence classifier and
    multiple choice read it; no weights): `pooled_output` is then [CLS] or the tokens' mean.
    `output_positions` (B, Q) gives the sequence output at those rows (B, Q, H) (the masked LM's
    head runs there alone); every layer computes every row. Packed rows (`sequence_ids`,
    `position_ids`, `cls_positions`) as BERT's: attention and local windows stay inside each
    sequence, rotary positions restart per sequence. `remat` recomputes each layer in the
    backward pass. Under `scan_layers` the layers are `layers.0` and one module stacking the
    others (`layers.from_1`, each leaf (L - 1, ...)); conversion and checkpoints name them per
    layer all the same.
    """

    base_model_prefix: ClassVar[str] = ""
    spec: ClassVar[ModelClass] = MODELS[ENCODER]
    head_modules: ClassVar[tuple[str, ...]] = spec.heads  # ("pooler",)

    def __init__(self, config: BertConfig, *, add_pooling_layer: bool | None = None,
                 rngs: nnx.Rngs):
        check_encoder(config, "ModernBertModel")
        self.config = config
        self.embeddings = ModernBertEmbeddings(config, rngs=rngs)
        layers = [ModernBertLayer(config, i, rngs=rngs) for i in range(config.num_hidden_layers)]
        self.layers: nnx.List[ModernBertLayer] | nnx.Dict = (
            _scan_layers(layers) if config.scan_layers else nnx.List(layers))
        self.final_norm = _norm(config, rngs)
        if add_pooling_layer is None:
            add_pooling_layer = config.family.base_pooler
        self.pooler = ModernBertPooling(config) if add_pooling_layer else None

    def __call__(
        self,
        input_ids: jax.Array,
        token_type_ids: jax.Array | None = None,
        attention_mask: jax.Array | None = None,
        *,
        deterministic: bool = True,
        dropout_rng: jax.Array | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        output_positions: jax.Array | None = None,
        sequence_ids: jax.Array | None = None,
        position_ids: jax.Array | None = None,
        cls_positions: jax.Array | None = None,
    ) -> BertOutput:
        _, attention_mask = inputs.check_inputs(  # token types: none, unread
            self.config, input_ids, token_type_ids, attention_mask, packed=sequence_ids is not None)
        check_pooler_inputs(self.pooler is not None, sequence_ids, cls_positions)
        mask, positions = inputs.packing_inputs(  # (B, S) or (B, S, S); None or (B, S)
            self.config, input_ids, attention_mask, sequence_ids, position_ids, cls_positions)
        if output_positions is not None:
            inputs.check_masked_positions(input_ids, output_positions, "output_positions")
        keys = numerics.dropout_keys(deterministic, dropout_rng, self.config.num_hidden_layers + 1)
        x = self.embeddings(input_ids, deterministic=deterministic, rngs=numerics.rngs_of(keys, 0))
        thetas = {GLOBAL: self.config.global_rope_theta, LOCAL: self.config.local_rope_theta}
        rotary = {kind: rotary_tables(self.config, thetas[kind], input_ids.shape[1], positions)
                  for kind in sorted(set(self.config.attention_types))}  # once per forward, per base
        x, hidden, probs = self._layers(x, mask, rotary, keys, deterministic, output_attentions,
                                        output_hidden_states)
        x = self.final_norm(x)
        pooled = (None if self.pooler is None else
                  self.pooler(x, attention_mask, sequence_ids, cls_positions))
        if output_positions is not None:
            x = take_rows(x, output_positions)  # (B, Q, H)
        return BertOutput(
            sequence_output=x,
            pooled_output=pooled,
            attentions=tuple(present(p, "attentions") for p in probs) if output_attentions else None,
            hidden_states=tuple(hidden) if output_hidden_states else None,
        )

    def _layers(self, x: jax.Array, mask: jax.Array, rotary: dict[str, Rotary],
                keys: jax.Array | None, deterministic: bool, output_probs: bool,
                output_hidden: bool) -> tuple[jax.Array, list[jax.Array], list[jax.Array | None]]:
        """Every layer in turn, or the first and a scan over the others (`scan_layers`), each
        rematerialised in the backward pass with `config.remat`: the output, the hidden states
        (embeddings first; all of them in a loop) and each layer's probabilities."""
        types = self.config.attention_types

        def step(module: ModernBertLayer, x: jax.Array, key: jax.Array | None,
                 local: bool) -> tuple[jax.Array, Any]:
            graphdef, state = nnx.split(module)

            def layer(state: nnx.State, x: jax.Array, key: jax.Array | None) -> tuple[Any, Any]:
                rngs = None if key is None else nnx.Rngs(dropout=key)
                return nnx.merge(graphdef, state)(
                    x, mask, rotary[LOCAL if local else GLOBAL], deterministic=deterministic,
                    rngs=rngs, output_probs=output_probs, local=local)

            run: Callable[..., tuple[jax.Array, Any]] = (
                jax.checkpoint(layer) if self.config.remat else layer)
            return run(state, x, key)

        if isinstance(self.layers, nnx.Dict):  # scan_layers
            return self._scan(self.layers, step, x, keys, output_probs, output_hidden)
        hidden, probs = [x], []
        for i, module in enumerate(self.layers):
            x, p = step(module, x, None if keys is None else keys[i + 1], types[i] == LOCAL)
            hidden.append(x)
            probs.append(p)
        return x, hidden, probs

    def _scan(self, layers: nnx.Dict, step: Callable[..., tuple[jax.Array, Any]], x: jax.Array,
              keys: jax.Array | None, output_probs: bool, output_hidden: bool,
              ) -> tuple[jax.Array, list[jax.Array], list[jax.Array | None]]:
        """The first layer, then `lax.scan` over the stacked others as they are held (no
        stacking in the forward), each global or local as `config.attention_types` says: one
        `lax.cond` per layer where both kinds are stacked, which runs only the layer's own
        branch (a local layer's window on the fused path)."""
        types = self.config.attention_types
        embedded = x
        x, first = step(layers["0"], x, None if keys is None else keys[1], types[0] == LOCAL)
        rest = f"{STACK_FROM}1"
        if rest not in layers:  # one layer: nothing to scan
            return x, [embedded, x], [first]
        graphdef, stacked = nnx.split(layers[rest])  # each leaf (L - 1, ...)
        kinds = set(types[1:])
        local = jnp.asarray([t == LOCAL for t in types[1:]])  # (L - 1,)

        def body(x: jax.Array, per_layer: tuple[nnx.State, Any, jax.Array]) -> tuple[Any, Any]:
            state, key, is_local = per_layer
            module = nnx.merge(graphdef, state)

            def branch(kind: bool) -> Callable[[jax.Array], tuple[jax.Array, Any]]:
                def run(x: jax.Array) -> tuple[jax.Array, Any]:
                    x, p = step(module, x, key, kind)
                    return x, p if output_probs else None  # the fused path has none
                return run

            if len(kinds) == 1:
                x, p = branch(LOCAL in kinds)(x)
            else:
                x, p = jax.lax.cond(is_local, branch(True), branch(False), x)
            # stack only what was asked for: (L - 1, B, S, H) and (L - 1, B, A, S, S) are large
            return x, (x if output_hidden else None, p)

        after_first = x
        x, (xs, ps) = jax.lax.scan(body, x, (stacked, None if keys is None else keys[2:], local))
        hidden = [embedded, after_first, *xs] if output_hidden else []  # (L - 1, ...) per layer
        return x, hidden, [first, *ps] if output_probs else []


def _scan_layers(layers: list[ModernBertLayer]) -> nnx.Dict:
    """A scan model's layers: the first (which has no attention norm) as it is, the others
    stacked into one module (`model.stack_modules`), `layers.0` and `layers.from_1`."""
    held = {"0": layers[0]}
    if len(layers) > 1:
        held[f"{STACK_FROM}1"] = stack_modules(layers[1:])
    return nnx.Dict(held)


# --- the heads' modules where ModernBERT's differ (`bertjax.heads` picks them by family) -------


class ModernBertMLMHead(nnx.Module):
    """ModernBERT's masked-LM head (transformers' `head` + `decoder`): dense (bias if
    `classifier_bias`), `classifier_activation`, LayerNorm, then the decoder tied to the word
    embeddings plus its bias (if `decoder_bias`). Named as `bertjax.heads.BertMLMHead`, so one
    name table maps both."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        h = config.hidden_size
        self.transform = linear(config, h, h, rngs, use_bias=config.classifier_bias,
                                kernel_init=_init(config, "out"))
        self.layer_norm = _norm(config, rngs)
        self.bias = (nnx.Param(jnp.zeros((config.vocab_size,), jnp.float32))
                     if config.decoder_bias else None)
        self.activation = numerics.activation(config.classifier_activation)

    def __call__(self, h: jax.Array, word_embeddings: nnx.Embed) -> jax.Array:
        h = self.layer_norm(self.activation(self.transform(h)))  # (B, P, H)
        logits = numerics.tied_decoder(h, word_embeddings.embedding[...])  # (B, P, V) float32
        return logits if self.bias is None else numerics.add_broadcast(logits, self.bias[...])


class ModernBertClassifier(nnx.Module):
    """ModernBERT's classifier head (transformers' `head` + `drop` + `classifier`), on pooled
    (B, [K,] H) or per-token (B, S, H) features: dense (bias if `classifier_bias`),
    `classifier_activation`, LayerNorm, dropout (`classifier_dropout`), `out_proj` to `n_out`
    (with a bias); float32."""

    def __init__(self, config: BertConfig, n_out: int, *, rngs: nnx.Rngs):
        config = config.replace(dtype="float32")  # float32 logits, as every head's
        h = config.hidden_size
        self.dense = linear(config, h, h, rngs, use_bias=config.classifier_bias,
                            kernel_init=_init(config, "out"))
        self.norm = _norm(config, rngs)
        self.dropout = nnx.Dropout(config.classifier_dropout_prob)
        self.out_proj = linear(config, h, n_out, rngs, kernel_init=_init(config, "final"))
        self.activation = numerics.activation(config.classifier_activation)

    def __call__(self, x: jax.Array, *, deterministic: bool = True,
                 rngs: nnx.Rngs | None = None) -> jax.Array:
        h = self.norm(self.activation(self.dense(x.astype(jnp.float32))))  # (..., H)
        return self.out_proj(self.dropout(h, deterministic=deterministic, rngs=rngs))  # (..., n)
