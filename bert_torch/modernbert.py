"""ModernBERT in PyTorch: the reference mirror of `bertjax/modernbert.py`.

Same classes in the same order, same attribute names (the drift test holds them); the exact
attention path only (the parity reference). Rotary angles, softmax and LayerNorm statistics are
float32, or float64 in a `.double()` mirror (the float64 referee of `parity`). Dropout follows
`.train()` / `.eval()`.

Shapes: B batch, S sequence, H hidden, A heads, D head dim, I intermediate, V vocabulary,
K packed sequences per row.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from bert_torch import inputs, numerics
from bert_torch.model import BertOutput, Embed, LayerNorm, linear, take_rows
from bertjax.config import BertConfig
from bertjax.config.checks import check_encoder, check_pooler_inputs
from bertjax.config.heads import ENCODER, MODELS, ModelClass
from bertjax.config.modernbert import GLOBAL, LOCAL, init_std

Rotary = tuple[torch.Tensor, torch.Tensor]  # cos, sin: (S, D) or (B, S, D)


def _init(config: BertConfig, role: str) -> Any:
    """transformers' init of a weight of `role`: a normal cut off at
    `initializer_cutoff_factor` standard deviations (`bertjax.modernbert.truncated_normal`)."""
    std = init_std(config.initializer_range, config.num_hidden_layers, config.hidden_size, role)
    cutoff = config.initializer_cutoff_factor * std
    return lambda w: nn.init.trunc_normal_(w, std=std, a=-cutoff, b=cutoff)


def _norm(config: BertConfig) -> LayerNorm:
    return LayerNorm(config, use_bias=config.norm_bias)


def rotary_tables(config: BertConfig, theta: float, seq_len: int,
                  positions: torch.Tensor | None, dtype: torch.dtype) -> Rotary:
    """cos and sin of each position's angles (S, D), or of `positions` (B, S) -> (B, S, D), in
    `dtype` (float32: transformers' arithmetic, bit for bit in the frequencies)."""
    D = config.head_dim
    inverse = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=dtype) / D))  # (D / 2,)
    pos = torch.arange(seq_len) if positions is None else positions  # (S,) or (B, S)
    freqs = pos[..., None].to(dtype) * inverse  # (., D / 2)
    angles = torch.cat([freqs, freqs], dim=-1)  # (., D)
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, rotary: Rotary) -> torch.Tensor:
    """RoPE on x (B, S, A, D) at the tables' precision, back in x's dtype."""
    cos, sin = (t[None, :, None, :] if t.ndim == 2 else t[:, :, None, :] for t in rotary)
    wide = x.to(cos.dtype)
    half = x.shape[-1] // 2
    rotated = torch.cat([-wide[..., half:], wide[..., :half]], dim=-1)  # (B, S, A, D)
    return (wide * cos + rotated * sin).to(x.dtype)


def local_mask(attention_mask: torch.Tensor, window: int) -> torch.Tensor:
    """The sliding window on a key padding mask (B, S) or packed rows' mask (B, S, S): (B, S, S)
    (`bertjax.attention.local_mask`)."""
    rows = torch.arange(attention_mask.shape[-1], device=attention_mask.device)
    band = (rows[:, None] - rows[None, :]).abs() <= window  # (S, S) query x key
    keys = attention_mask[:, None, :] if attention_mask.ndim == 2 else attention_mask
    return band[None] & keys.bool()  # (B, S, S)


class ModernBertEmbeddings(nn.Module):
    """Word embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = Embed(config.vocab_size, config.hidden_size,
                                     numerics.compute_dtype(config))
        _init(config, "in")(self.word_embeddings.weight)
        self.norm = _norm(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.norm(self.word_embeddings(input_ids)))


class ModernBertAttention(nn.Module):
    """`wqkv`, rotary positions, exact attention (a local layer's within `window`), `wo`."""

    def __init__(self, config: BertConfig, *, local: bool):
        super().__init__()
        h = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.local_window = config.local_attention // 2  # transformers' sliding_window
        self.window = self.local_window if local else None
        self.wqkv = linear(config, h, 3 * h, bias=config.attention_bias, init=_init(config, "in"))
        self.wo = linear(config, h, h, bias=config.attention_bias, init=_init(config, "out"))
        self.attention_dropout = nn.Dropout(config.attention_probs_dropout_prob)
        self.output_dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor, rotary: Rotary
                ) -> tuple[torch.Tensor, torch.Tensor]:
        B, S, H = x.shape
        qkv = self.wqkv(x).view(B, S, 3, self.num_heads, self.head_dim)  # (B, S, 3, A, D)
        q, k = rotate(qkv[:, :, 0], rotary), rotate(qkv[:, :, 1], rotary)  # (B, S, A, D)
        v = qkv[:, :, 2]  # (B, S, A, D)
        mask = attention_mask if self.window is None else local_mask(attention_mask, self.window)
        scores = torch.einsum("bqad,bkad->baqk", numerics.upcast(q), numerics.upcast(k))
        scores = scores / math.sqrt(self.head_dim)  # (B, A, S, S)
        mask = mask[:, None, None, :] if mask.ndim == 2 else mask[:, None]  # (B, 1, 1 or S, S)
        probs = numerics.masked_softmax(scores, mask)
        context = torch.einsum("baqk,bkad->bqad", self.attention_dropout(probs).to(v.dtype), v)
        out = self.wo(context.reshape(B, S, H))  # (B, S, A, D) -> (B, S, H)
        return self.output_dropout(out), probs


class ModernBertMLP(nn.Module):
    """`wi` to the value and the gate, activation(value) x gate, dropout, `wo`."""

    def __init__(self, config: BertConfig):
        super().__init__()
        h, i = config.hidden_size, config.intermediate_size
        self.wi = linear(config, h, 2 * i, bias=config.mlp_bias, init=_init(config, "in"))
        self.wo = linear(config, i, h, bias=config.mlp_bias, init=_init(config, "out"))
        self.dropout = nn.Dropout(config.mlp_dropout)
        self.activation = numerics.activation(config.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        value, gate = self.wi(x).chunk(2, dim=-1)  # (B, S, I) each
        return self.wo(self.dropout(self.activation(value) * gate))  # (B, S, H)


class ModernBertLayer(nn.Module):
    """Pre-norm block; the first layer's attention norm is the identity (`attn_norm` None)."""

    def __init__(self, config: BertConfig, index: int):
        super().__init__()
        self.attn_norm = _norm(config) if index else None
        self.attn = ModernBertAttention(config, local=config.attention_types[index] == LOCAL)
        self.mlp_norm = _norm(config)
        self.mlp = ModernBertMLP(config)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor, rotary: Rotary
                ) -> tuple[torch.Tensor, torch.Tensor]:
        h = x if self.attn_norm is None else self.attn_norm(x)
        attended, probs = self.attn(h, attention_mask, rotary)
        x = x + attended  # (B, S, H)
        return x + self.mlp(self.mlp_norm(x)), probs


class ModernBertPooling(nn.Module):
    """[CLS] or the mean of each sequence's tokens (`bertjax.modernbert.ModernBertPooling`)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.pooling = config.classifier_pooling

    def forward(self, sequence_output: torch.Tensor, attention_mask: torch.Tensor,
                sequence_ids: torch.Tensor | None, cls_positions: torch.Tensor | None
                ) -> torch.Tensor:
        x = numerics.upcast(sequence_output)  # (B, S, H)
        if self.pooling == "cls":
            if cls_positions is None:
                return x[:, 0]  # (B, H)
            rows = take_rows(x, cls_positions.clamp(min=0))  # (B, K, H)
            return torch.where(cls_positions[:, :, None] >= 0, rows, torch.zeros_like(rows))
        tokens = attention_mask != 0  # (B, S)
        if cls_positions is None or sequence_ids is None:
            weights = tokens[:, None, :]  # (B, 1, S)
        else:
            slots = torch.arange(1, cls_positions.shape[1] + 1, device=x.device)  # (K,)
            weights = (sequence_ids[:, None, :] == slots[None, :, None]) & tokens[:, None]
        weights = weights.to(x.dtype)  # (B, 1 or K, S)
        mean = torch.einsum("bks,bsh->bkh", weights, x) / weights.sum(-1, keepdim=True).clamp(min=1)
        return mean[:, 0] if cls_positions is None else mean  # (B, H) or (B, K, H)


class ModernBertModel(nn.Module):
    """The ModernBERT encoder (`bertjax.modernbert.ModernBertModel`): embeddings, pre-norm
    layers, final norm; the pooling in the pooler slot where asked; packed rows as there."""

    base_model_prefix: ClassVar[str] = ""
    spec: ClassVar[ModelClass] = MODELS[ENCODER]
    head_modules: ClassVar[tuple[str, ...]] = spec.heads  # ("pooler",)

    def __init__(self, config: BertConfig, *, add_pooling_layer: bool | None = None):
        super().__init__()
        check_encoder(config, "ModernBertModel")
        self.config = config
        self.embeddings = ModernBertEmbeddings(config)
        self.layers = nn.ModuleList([ModernBertLayer(config, i)
                                     for i in range(config.num_hidden_layers)])
        self.final_norm = _norm(config)
        if add_pooling_layer is None:
            add_pooling_layer = config.family.base_pooler
        self.pooler = ModernBertPooling(config) if add_pooling_layer else None

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
        _, attention_mask = inputs.check_inputs(
            self.config, input_ids, token_type_ids, attention_mask, packed=sequence_ids is not None)
        check_pooler_inputs(self.pooler is not None, sequence_ids, cls_positions)
        mask, positions = inputs.packing_inputs(  # (B, S) or (B, S, S); None or (B, S)
            self.config, input_ids, attention_mask, sequence_ids, position_ids, cls_positions)
        if output_positions is not None:
            inputs.check_masked_positions(input_ids, output_positions, "output_positions")
        x = self.embeddings(input_ids)
        thetas = {GLOBAL: self.config.global_rope_theta, LOCAL: self.config.local_rope_theta}
        dtype = numerics.upcast(x).dtype  # float32, or float64 in a float64 mirror
        rotary = {kind: rotary_tables(self.config, thetas[kind], input_ids.shape[1], positions,
                                      dtype) for kind in sorted(set(self.config.attention_types))}
        hidden_states, attentions = [x], []
        for layer, kind in zip(self.layers, self.config.attention_types, strict=True):
            x, probs = layer(x, mask, rotary[kind])
            hidden_states.append(x)
            attentions.append(probs)
        x = self.final_norm(x)
        pooled = (None if self.pooler is None else
                  self.pooler(x, attention_mask, sequence_ids, cls_positions))
        if output_positions is not None:
            x = take_rows(x, output_positions)  # (B, Q, H)
        return BertOutput(
            sequence_output=x,
            pooled_output=pooled,
            attentions=tuple(attentions) if output_attentions else None,
            hidden_states=tuple(hidden_states) if output_hidden_states else None,
        )


# --- the heads' modules where ModernBERT's differ (`bert_torch.heads` picks them by family) -----


class ModernBertMLMHead(nn.Module):
    """Dense, `classifier_activation`, LayerNorm, the tied decoder and its bias (if any)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        h = config.hidden_size
        self.transform = linear(config, h, h, bias=config.classifier_bias,
                                init=_init(config, "out"))
        self.layer_norm = _norm(config)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size)) if config.decoder_bias else None
        self.activation = numerics.activation(config.classifier_activation)

    def forward(self, h: torch.Tensor, word_embeddings: nn.Embedding) -> torch.Tensor:
        h = self.layer_norm(self.activation(self.transform(h)))  # (B, P, H)
        embedding = numerics.upcast(word_embeddings.weight.to(h.dtype))  # (V, H)
        return F.linear(numerics.upcast(h), embedding, self.bias)  # (B, P, V) float32


class ModernBertClassifier(nn.Module):
    """Dense, `classifier_activation`, LayerNorm, dropout, `out_proj` to `n_out`; float32."""

    def __init__(self, config: BertConfig, n_out: int):
        super().__init__()
        config = dataclasses.replace(config, dtype="float32")
        h = config.hidden_size
        self.dense = linear(config, h, h, bias=config.classifier_bias, init=_init(config, "out"))
        self.norm = _norm(config)
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.out_proj = linear(config, h, n_out, init=_init(config, "final"))
        self.activation = numerics.activation(config.classifier_activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.activation(self.dense(numerics.upcast(x))))  # (..., H)
        return self.out_proj(self.dropout(h))  # (..., n_out)
