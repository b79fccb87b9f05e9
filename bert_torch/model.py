"""BERT in PyTorch: the reference mirror of `bertjax/model.py`.

Same classes in the same order, same attribute names; leaf names are PyTorch's (`weight` for
Flax's `kernel` (transposed), `scale` and `embedding`). Dropout follows `.train()` / `.eval()`.

Shapes: B batch, S sequence, H hidden, A heads, D head dim (H = A * D), P masked positions,
V vocabulary, I intermediate, K packed sequences per row (`bertjax.inputs` on packing).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import ClassVar, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from bert_torch import inputs, numerics
from bertjax.config import BertConfig
from bertjax.config.checks import check_encoder, check_pooler_inputs
from bertjax.config.heads import ENCODER, MODELS, ModelClass

T = TypeVar("T")


def present(value: T | None, what: str) -> T:
    """`value`, an output field (`what`) a head reads and its encoder computes; None is a bug."""
    if value is None:
        raise ValueError(f"{what} was not computed for a head that reads it")
    return value


@dataclasses.dataclass
class BertOutput:
    """What a BERT forward returns; fields a model does not compute are None."""

    sequence_output: torch.Tensor  # (B, S, H); (B * C, S, H) for choices; (B, Q, H) at positions
    # (B, H); (B, K, H) at `cls_positions` (zeros in empty slots); None without a pooler
    pooled_output: torch.Tensor | None = None
    mlm_logits: torch.Tensor | None = None  # (B, P, V) or (B, S, V)
    nsp_logits: torch.Tensor | None = None  # (B, 2) or (B, K, 2)
    # (B, [K,] num_labels) sequence, (B, S, num_labels) token classification, (B, C) multiple choice
    logits: torch.Tensor | None = None
    start_logits: torch.Tensor | None = None  # (B, S): question answering
    end_logits: torch.Tensor | None = None  # (B, S)
    attentions: tuple[torch.Tensor, ...] | None = None  # per layer (B, A, S, S)
    hidden_states: tuple[torch.Tensor, ...] | None = None  # embeddings + per layer (B, S, H)


class Linear(nn.Linear):
    """`nn.Linear` that computes in `dtype` (Flax's `dtype`) with its parameters kept in their
    own dtype (Flax's `param_dtype`): input, weight and bias are cast first. `dtype=None`
    computes in the parameters' dtype (float32, or float64 for a float64 referee)."""

    def __init__(self, n_in: int, n_out: int, dtype: torch.dtype | None, bias: bool = True):
        super().__init__(n_in, n_out, bias=bias)
        self.dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dtype is None:
            return super().forward(x)
        bias = None if self.bias is None else self.bias.to(self.dtype)
        return F.linear(x.to(self.dtype), self.weight.to(self.dtype), bias)


class Embed(nn.Embedding):
    """`nn.Embedding` whose rows come out in `dtype` (Flax's `nnx.Embed`; None: the table's)."""

    def __init__(self, num: int, features: int, dtype: torch.dtype | None):
        super().__init__(num, features)
        self.dtype = dtype

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = super().forward(ids)
        return rows if self.dtype is None else rows.to(self.dtype)


def linear(config: BertConfig, n_in: int, n_out: int, *, bias: bool = True,
           init: Callable[[torch.Tensor], object] | None = None) -> Linear:
    """A dense layer computing in the config's dtype, BERT's init or `init`'s, with or without a
    bias (`bertjax.model.linear`)."""
    layer = Linear(n_in, n_out, numerics.compute_dtype(config), bias=bias)
    if init is None:
        nn.init.normal_(layer.weight, std=config.initializer_range)
    else:
        init(layer.weight)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)
    return layer


def _embed(config: BertConfig, num: int) -> Embed:
    layer = Embed(num, config.embedding_width, numerics.compute_dtype(config))
    nn.init.normal_(layer.weight, std=config.initializer_range)
    return layer


class LayerNorm(nn.LayerNorm):
    """LayerNorm with BERT's epsilon and float32 statistics; ModernBERT's may have no bias."""

    def __init__(self, config: BertConfig, *, width: int | None = None, use_bias: bool = True):
        super().__init__(width or config.hidden_size, eps=config.layer_norm_eps,  # PyTorch: 1e-5
                         bias=use_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(numerics.upcast(x)).to(x.dtype)


class BertEmbeddings(nn.Module):
    """Word + position + token-type embeddings, then LayerNorm and dropout; positions 0..S-1, or
    `position_ids` (B, S) (packed rows restart them per sequence)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = _embed(config, config.vocab_size)
        self.position_embeddings = _embed(config, config.max_position_embeddings)
        self.token_type_embeddings = (_embed(config, config.type_vocab_size)
                                      if config.family.token_types else None)  # DistilBERT: none
        self.layer_norm = LayerNorm(config, width=config.embedding_width)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None, :] if (
            position_ids is None) else position_ids  # (1 or B, S)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)  # (B, S, H)
        if self.token_type_embeddings is not None:
            x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.layer_norm(x))


def take_rows(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The rows of x (B, S, H) at positions (B, Q): (B, Q, H)."""
    index = positions.long()[:, :, None].expand(-1, -1, x.shape[-1])  # (B, Q, H)
    return torch.gather(x, 1, index)  # (B, Q, H)


class BertAttention(nn.Module):
    """Multi-head self-attention with a key padding mask (B, S) or packed rows' block-diagonal
    mask (B, S, S); returns (output, probabilities). Keys and values are every position of `x`;
    the queries `x` too, or its rows at `positions`."""

    def __init__(self, config: BertConfig):
        super().__init__()
        h = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.query = linear(config, h, h)
        self.key = linear(config, h, h)
        self.value = linear(config, h, h)
        self.output = linear(config, h, h)
        self.attention_dropout = nn.Dropout(config.attention_probs_dropout_prob)
        self.output_dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self, x: torch.Tensor, attention_mask: torch.Tensor, positions: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        queries = x if positions is None else take_rows(x, positions)  # (B, S or Q, H)
        B, S, H = x.shape
        Q = queries.shape[1]
        if attention_mask.ndim == 3 and positions is not None:
            attention_mask = take_rows(attention_mask, positions)  # (B, Q, S): the queries' rows
        q = self.query(queries).view(B, Q, self.num_heads, self.head_dim)  # (B, Q, A, D)
        k = self.key(x).view(B, S, self.num_heads, self.head_dim)  # (B, S, A, D)
        v = self.value(x).view(B, S, self.num_heads, self.head_dim)  # (B, S, A, D)
        scores = torch.einsum("bqad,bkad->baqk", numerics.upcast(q), numerics.upcast(k))
        scores = scores / math.sqrt(self.head_dim)  # (B, A, Q, S) float32
        mask = attention_mask[:, None, None, :] if attention_mask.ndim == 2 else (
            attention_mask[:, None, :, :])  # (B, 1, 1 or Q, S)
        probs = numerics.masked_softmax(scores, mask)
        dropped = self.attention_dropout(probs)
        context = torch.einsum("baqk,bkad->bqad", dropped.to(v.dtype), v)  # (B, Q, A, D)
        context = context.reshape(B, Q, H)  # (B, Q, A, D) -> (B, Q, H)
        return self.output_dropout(self.output(context)), probs


class BertLayer(nn.Module):
    """Post-LN transformer block: attention + residual + LN, GELU MLP + residual + LN; with
    `positions` (B, Q) at those rows only (keys and values still every position's)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = BertAttention(config)
        self.attention_norm = LayerNorm(config)
        self.intermediate = linear(config, config.hidden_size, config.intermediate_size)
        self.output = linear(config, config.intermediate_size, config.hidden_size)
        self.output_norm = LayerNorm(config)
        self.output_dropout = nn.Dropout(config.hidden_dropout_prob)
        self.activation = numerics.activation(config.hidden_act)

    def forward(
        self, x: torch.Tensor, attention_mask: torch.Tensor, positions: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        rows = x if positions is None else take_rows(x, positions)  # (B, S or Q, H)
        attended, probs = self.attention(x, attention_mask, positions)
        h = self.attention_norm(rows + attended)  # (B, S or Q, H)
        y = self.output(self.activation(self.intermediate(h)))  # (B, ., I) -> (B, ., H)
        y = self.output_dropout(y)
        return self.output_norm(h + y), probs


class BertPooler(nn.Module):
    """Dense + tanh on the [CLS] position: row 0, or each packed sequence's at `cls_positions`
    (B, K), whose empty slots (-1) pool to zeros."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = linear(config, config.hidden_size, config.hidden_size)
        self.activation = numerics.head_activation(config.family.pooler_activation)

    def forward(self, sequence_output: torch.Tensor, cls_positions: torch.Tensor | None = None
                ) -> torch.Tensor:
        if cls_positions is None:
            return self.activation(self.dense(sequence_output[:, 0]))  # (B, H)
        cls = take_rows(sequence_output, cls_positions.clamp(min=0))  # (B, K, H)
        pooled = self.activation(self.dense(cls))  # (B, K, H)
        return torch.where(cls_positions[:, :, None] >= 0, pooled, torch.zeros_like(pooled))


class BertModel(nn.Module):
    """The BERT encoder: embeddings, `num_hidden_layers` layers, pooler. Declares what it is as
    its bertjax mirror does (`base_model_prefix`, `head_modules`: see `bertjax.model.BertModel`);
    `output_positions` as there: the last layer computes those rows (and [CLS]) alone; packed
    rows (`sequence_ids`, `position_ids`, `cls_positions`) as there."""

    base_model_prefix: ClassVar[str] = ""
    spec: ClassVar[ModelClass] = MODELS[ENCODER]
    head_modules: ClassVar[tuple[str, ...]] = spec.heads  # ("pooler",)

    def __init__(self, config: BertConfig, *, add_pooling_layer: bool | None = None):
        super().__init__()
        check_encoder(config, "BertModel")  # a ModernBERT's is bert_torch.modernbert's
        self.config = config
        self.embeddings = BertEmbeddings(config)
        # ELECTRA's narrower embeddings, taken to hidden_size after their LayerNorm and dropout
        self.embeddings_project = (linear(config, config.embedding_width, config.hidden_size)
                                   if config.embedding_width != config.hidden_size else None)
        self.layers = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])
        if add_pooling_layer is None:  # the family's bare encoder: BERT's has one, ELECTRA's not
            add_pooling_layer = config.family.base_pooler
        self.pooler = BertPooler(config) if add_pooling_layer else None

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        *,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        output_positions: torch.Tensor | None = None,
        sequence_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cls_positions: torch.Tensor | None = None,
    ) -> BertOutput:
        token_type_ids, attention_mask = inputs.check_inputs(
            self.config, input_ids, token_type_ids, attention_mask, packed=sequence_ids is not None
        )
        check_pooler_inputs(self.pooler is not None, sequence_ids, cls_positions)
        attention_mask, position_ids = inputs.packing_inputs(  # (B, S) or (B, S, S); (B, S)
            self.config, input_ids, attention_mask, sequence_ids, position_ids, cls_positions)
        whole = output_attentions or output_hidden_states
        if output_positions is not None:
            inputs.check_masked_positions(input_ids, output_positions, "output_positions")
        # (B, [1 or K +] Q) or None
        rows = self._last_rows(output_positions, input_ids.shape[1], whole, cls_positions)
        x = self.embeddings(input_ids, token_type_ids, position_ids)
        if self.embeddings_project is not None:
            x = self.embeddings_project(x)  # (B, S, E) -> (B, S, H)
        hidden_states, attentions = [x], []
        for i, layer in enumerate(self.layers):
            x, probs = layer(x, attention_mask, rows if i == len(self.layers) - 1 else None)
            hidden_states.append(x)
            attentions.append(probs)
        pooled = self._pool(x, cls_positions, rows is not None)
        if output_positions is not None:  # (B, Q, H): the rows' tail, or taken from every row
            Q = output_positions.shape[1]
            x = take_rows(x, output_positions) if rows is None else x[:, rows.shape[1] - Q:]
        return BertOutput(
            sequence_output=x,
            pooled_output=pooled,
            attentions=tuple(attentions) if output_attentions else None,
            hidden_states=tuple(hidden_states) if output_hidden_states else None,
        )

    def _last_rows(self, positions: torch.Tensor | None, seq_len: int, whole: bool,
                   cls_positions: torch.Tensor | None) -> torch.Tensor | None:
        """The rows the last layer computes: positions (B, Q), after [CLS] for the pooler (row 0:
        (B, 1 + Q), or `cls_positions` (B, K + Q), an empty slot's at row 0); None for every row
        (no positions, `whole` asked for, or no fewer rows than `seq_len`)."""
        if positions is None or whole:
            return None
        if self.pooler is not None:
            cls = torch.zeros_like(positions[:, :1]) if cls_positions is None else (
                cls_positions.clamp(min=0).to(positions.dtype))  # (B, 1 or K)
            positions = torch.cat([cls, positions], dim=1)
        return positions if positions.shape[1] < seq_len else None

    def _pool(self, x: torch.Tensor, cls_positions: torch.Tensor | None, rows: bool
              ) -> torch.Tensor | None:
        """The pooler's output on every row or the last layer's `rows` ([CLS] rows first), as
        `bertjax.model.BertModel._pool`."""
        if self.pooler is None:
            return None
        if rows and cls_positions is not None:  # sequence k's [CLS] is row k, an empty slot -1
            slots = torch.arange(cls_positions.shape[1], device=cls_positions.device)  # (K,)
            cls_positions = torch.where(cls_positions >= 0, slots, -1)  # (B, K)
        return self.pooler(x, cls_positions)  # row 0 is [CLS] either way without packing
