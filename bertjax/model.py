"""BERT in Flax NNX.

Mirrors `bert_torch/model.py` class for class and attribute for attribute; the only naming
differences are the leaf names (`kernel`/`scale`/`embedding` here, `weight` there). Numerics that
frameworks disagree on are pinned in `bertjax.numerics` and commented where they are used.

Shapes: B batch, S sequence, H hidden, A heads, D head dim (H = A * D), P masked positions,
V vocabulary, I intermediate.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx, struct

from bertjax import numerics
from bertjax.config import BertConfig


@struct.dataclass
class BertOutput:
    """What a BERT forward returns; fields a model does not compute are None."""

    sequence_output: jax.Array  # (B, S, H) in the compute dtype
    pooled_output: jax.Array  # (B, H)
    mlm_logits: jax.Array | None = None  # (B, P, V) or (B, S, V), float32
    nsp_logits: jax.Array | None = None  # (B, 2), float32
    logits: jax.Array | None = None  # (B, num_labels), float32: sequence classification
    attentions: tuple[jax.Array, ...] | None = None  # per layer (B, A, S, S), float32
    hidden_states: tuple[jax.Array, ...] | None = None  # embeddings + per layer (B, S, H)


def _linear(config: BertConfig, n_in: int, n_out: int, rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(
        n_in,
        n_out,
        dtype=numerics.compute_dtype(config),
        param_dtype=jnp.float32,
        kernel_init=nnx.initializers.normal(config.initializer_range),
        bias_init=nnx.initializers.zeros,
        rngs=rngs,
    )


def _embed(config: BertConfig, num: int, rngs: nnx.Rngs) -> nnx.Embed:
    return nnx.Embed(
        num,
        config.hidden_size,
        dtype=numerics.compute_dtype(config),
        param_dtype=jnp.float32,
        embedding_init=nnx.initializers.normal(config.initializer_range),
        rngs=rngs,
    )


class LayerNorm(nnx.LayerNorm):
    """LayerNorm with BERT's epsilon, two-pass variance and float32 statistics."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        super().__init__(
            config.hidden_size,
            epsilon=config.layer_norm_eps,  # Flax defaults to 1e-6
            use_fast_variance=False,  # E[x^2]-E[x]^2 loses half the 1e-5 margin
            dtype=jnp.float32,
            param_dtype=jnp.float32,
            rngs=rngs,
        )
        self.out_dtype = numerics.compute_dtype(config)

    def __call__(self, x: jax.Array) -> jax.Array:
        return super().__call__(x.astype(jnp.float32)).astype(self.out_dtype)


class BertEmbeddings(nnx.Module):
    """Word + position + token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.word_embeddings = _embed(config, config.vocab_size, rngs)
        self.position_embeddings = _embed(config, config.max_position_embeddings, rngs)
        self.token_type_embeddings = _embed(config, config.type_vocab_size, rngs)
        self.layer_norm = LayerNorm(config, rngs=rngs)
        self.dropout = nnx.Dropout(config.hidden_dropout_prob)

    def __call__(
        self,
        input_ids: jax.Array,
        token_type_ids: jax.Array,
        *,
        deterministic: bool = True,
        rngs: nnx.Rngs | None = None,
    ) -> jax.Array:
        positions = jnp.arange(input_ids.shape[1])[None, :]  # (1, S)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )  # (B, S, H)
        return self.dropout(self.layer_norm(x), deterministic=deterministic, rngs=rngs)


class BertAttention(nnx.Module):
    """Multi-head self-attention with a key padding mask; returns (output, probabilities)."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        h = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.query = _linear(config, h, h, rngs)
        self.key = _linear(config, h, h, rngs)
        self.value = _linear(config, h, h, rngs)
        self.output = _linear(config, h, h, rngs)
        self.attention_dropout = nnx.Dropout(config.attention_probs_dropout_prob)
        self.output_dropout = nnx.Dropout(config.hidden_dropout_prob)

    def __call__(
        self,
        x: jax.Array,
        attention_mask: jax.Array,
        *,
        deterministic: bool = True,
        rngs: nnx.Rngs | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        B, S, H = x.shape
        heads = (B, S, self.num_heads, self.head_dim)
        q = self.query(x).reshape(heads)  # (B, S, A, D)
        k = self.key(x).reshape(heads)  # (B, S, A, D)
        v = self.value(x).reshape(heads)  # (B, S, A, D)
        scores = jnp.einsum("bqad,bkad->baqk", q, k, preferred_element_type=jnp.float32)
        scores = scores / jnp.sqrt(jnp.float32(self.head_dim))  # (B, A, S, S) float32
        probs = numerics.masked_softmax(scores, attention_mask[:, None, None, :])
        dropped = self.attention_dropout(probs, deterministic=deterministic, rngs=rngs)
        context = jnp.einsum("baqk,bkad->bqad", dropped.astype(v.dtype), v)  # (B, S, A, D)
        context = context.reshape(B, S, H)  # (B, S, H)
        out = self.output_dropout(self.output(context), deterministic=deterministic, rngs=rngs)
        return out, probs


class BertLayer(nnx.Module):
    """Post-LN transformer block: attention + residual + LN, GELU MLP + residual + LN."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.attention = BertAttention(config, rngs=rngs)
        self.attention_norm = LayerNorm(config, rngs=rngs)
        self.intermediate = _linear(config, config.hidden_size, config.intermediate_size, rngs)
        self.output = _linear(config, config.intermediate_size, config.hidden_size, rngs)
        self.output_norm = LayerNorm(config, rngs=rngs)
        self.output_dropout = nnx.Dropout(config.hidden_dropout_prob)
        self.activation = numerics.activation(config.hidden_act)

    def __call__(
        self,
        x: jax.Array,
        attention_mask: jax.Array,
        *,
        deterministic: bool = True,
        rngs: nnx.Rngs | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        attended, probs = self.attention(x, attention_mask, deterministic=deterministic, rngs=rngs)
        x = self.attention_norm(x + attended)  # (B, S, H)
        y = self.output(self.activation(self.intermediate(x)))  # (B, S, I) -> (B, S, H)
        y = self.output_dropout(y, deterministic=deterministic, rngs=rngs)
        return self.output_norm(x + y), probs


class BertPooler(nnx.Module):
    """Dense + tanh on the [CLS] position."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.dense = _linear(config, config.hidden_size, config.hidden_size, rngs)

    def __call__(self, sequence_output: jax.Array) -> jax.Array:
        return jnp.tanh(self.dense(sequence_output[:, 0]))  # (B, H)


class SavePretrained:
    """`save_pretrained(directory, tokenizer=None)`: a Hugging Face directory (`bertjax.hf`)."""

    def save_pretrained(self, directory: Any, tokenizer: Any = None) -> Any:
        """Write `config.json` + `model.safetensors` (+ the tokenizer's files) that transformers
        loads as this class; returns the directory's path."""
        from bertjax.hf import save_hf

        return save_hf(self, directory, tokenizer=tokenizer)


class BertModel(nnx.Module, SavePretrained):
    """The BERT encoder: embeddings, `num_hidden_layers` layers, pooler."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.embeddings = BertEmbeddings(config, rngs=rngs)
        self.layers = nnx.List([BertLayer(config, rngs=rngs) for _ in range(config.num_hidden_layers)])
        self.pooler = BertPooler(config, rngs=rngs)

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
    ) -> BertOutput:
        token_type_ids, attention_mask = numerics.check_inputs(
            self.config, input_ids, token_type_ids, attention_mask
        )
        rngs = numerics.dropout_rngs(deterministic, dropout_rng)
        x = self.embeddings(input_ids, token_type_ids, deterministic=deterministic, rngs=rngs)
        hidden_states, attentions = [x], []
        for layer in self.layers:
            x, probs = layer(x, attention_mask, deterministic=deterministic, rngs=rngs)
            hidden_states.append(x)
            attentions.append(probs)
        return BertOutput(
            sequence_output=x,
            pooled_output=self.pooler(x),
            attentions=tuple(attentions) if output_attentions else None,
            hidden_states=tuple(hidden_states) if output_hidden_states else None,
        )


class BertMLMHead(nnx.Module):
    """Dense + GELU + LayerNorm, then the decoder tied to the word embeddings plus its own bias."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.transform = _linear(config, config.hidden_size, config.hidden_size, rngs)
        self.layer_norm = LayerNorm(config, rngs=rngs)
        self.bias = nnx.Param(jnp.zeros((config.vocab_size,), jnp.float32))
        self.activation = numerics.activation(config.hidden_act)

    def __call__(self, h: jax.Array, word_embeddings: nnx.Embed) -> jax.Array:
        h = self.layer_norm(self.activation(self.transform(h)))  # (B, P, H)
        embedding = word_embeddings.embedding[...].astype(h.dtype)  # (V, H)
        logits = jnp.einsum("bph,vh->bpv", h, embedding, preferred_element_type=jnp.float32)
        return logits + self.bias[...]  # (B, P, V) float32


class BertForPreTraining(nnx.Module, SavePretrained):
    """BERT with the masked-LM and next-sentence-prediction heads."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.bert = BertModel(config, rngs=rngs)
        self.mlm_head = BertMLMHead(config, rngs=rngs)
        self.nsp_head = nnx.Linear(
            config.hidden_size,
            2,
            param_dtype=jnp.float32,
            dtype=jnp.float32,  # logits in float32
            kernel_init=nnx.initializers.normal(config.initializer_range),
            rngs=rngs,
        )

    def __call__(
        self,
        input_ids: jax.Array,
        token_type_ids: jax.Array | None = None,
        attention_mask: jax.Array | None = None,
        masked_positions: jax.Array | None = None,
        *,
        deterministic: bool = True,
        dropout_rng: jax.Array | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> BertOutput:
        out = self.bert(
            input_ids,
            token_type_ids,
            attention_mask,
            deterministic=deterministic,
            dropout_rng=dropout_rng,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        h = out.sequence_output
        if masked_positions is not None:
            numerics.check_masked_positions(input_ids, masked_positions)
            h = jnp.take_along_axis(h, masked_positions[:, :, None], axis=1)  # (B, P, H)
        return out.replace(
            mlm_logits=self.mlm_head(h, self.bert.embeddings.word_embeddings),
            nsp_logits=self.nsp_head(out.pooled_output.astype(jnp.float32)),
        )


class BertForSequenceClassification(nnx.Module, SavePretrained):
    """BERT with a classifier on the pooled [CLS] output: dropout, then a dense layer to
    `config.num_labels` float32 logits (Hugging Face's BertForSequenceClassification)."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.bert = BertModel(config, rngs=rngs)
        self.dropout = nnx.Dropout(config.classifier_dropout_prob)
        self.classifier = nnx.Linear(
            config.hidden_size,
            config.num_labels,
            param_dtype=jnp.float32,
            dtype=jnp.float32,  # logits in float32
            kernel_init=nnx.initializers.normal(config.initializer_range),
            rngs=rngs,
        )

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
    ) -> BertOutput:
        out = self.bert(
            input_ids,
            token_type_ids,
            attention_mask,
            deterministic=deterministic,
            dropout_rng=dropout_rng,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        # the head's own stream: the encoder's starts from dropout_rng itself
        head_rng = None if dropout_rng is None else jax.random.fold_in(dropout_rng, 1)
        pooled = self.dropout(out.pooled_output.astype(jnp.float32), deterministic=deterministic,
                              rngs=numerics.dropout_rngs(deterministic, head_rng))
        return out.replace(logits=self.classifier(pooled))  # (B, num_labels)
