"""Model FLOPs of BERT and ModernBERT pre-training and the datasheet peaks of known accelerators.

Model FLOPs are the BERT algorithm's matmul FLOPs (as in PaLM's MFU definition): those the losses
need, counted once from the configuration and used for every row. transformers' extra MLM logits
at unmasked positions and its last layer at every row, recomputation, one-hot embedding tricks
or padding-aware kernels do not change it.
So the model FLOP utilisation of two rows stands in the same ratio as their tokens/s.
"""

from __future__ import annotations

import re

from bertjax.config import BertConfig


def model_flops_per_token(
    config: BertConfig, seq_len: int, predictions: int, *, training: bool
) -> float:
    """Matmul FLOPs per token of one BERT pre-training forward (or forward + backward); a
    ModernBERT config's are `modernbert_flops_per_token`.

    With L layers, H hidden, I intermediate, V vocabulary, S tokens per sequence and P masked
    positions per sequence, and 2 FLOPs per multiply-add:

    - encoder weights, per token and layer: query, key, value and output projections
      (4 H x H) and the MLP (H x I, then I x H): 2 * (4 H^2 + 2 H I). That is 2 N per token for the
      N = L (4 H^2 + 2 H I) encoder weights (biases, LayerNorm and embeddings aside).
    - attention, per token and layer: the scores q.k against S keys and the context probs.v,
      each S x D per head over H / D heads: 2 * 2 S H.
    - but the last layer's output is read at the P masked positions and [CLS] only: its keys and
      values are every token's (2 * 2 H^2), its queries, output projection, MLP and attention
      those R = (1 + P) / S rows' (R * 2 * (2 H^2 + 2 H I + 2 S H)); R = 1 when 1 + P >= S.
    - MLM head, at the P masked positions only (as the original BERT; S tokens share them):
      transform H x H and the decoder tied to the word embeddings H x V: 2 (H^2 + H V) P / S.
    - pooler H x H and NSP classifier H x 2, once per sequence: 2 (H^2 + 2 H) / S.

    Embedding lookups are gathers (no FLOPs); softmax, GELU, LayerNorm, dropout and the losses
    are elementwise and left out. Training is 3x the forward: the backward pass computes two
    matmuls for each forward one (gradients of both operands), attention's included.
    """
    if config.family.encoder == "modernbert":
        return modernbert_flops_per_token(config, seq_len, predictions, training=training)
    L, H, I = config.num_hidden_layers, config.hidden_size, config.intermediate_size
    V, S, P = config.vocab_size, seq_len, predictions
    R = min(1.0, (1 + P) / S)  # the last layer's rows per token
    encoder = (L - 1) * 2 * (4 * H * H + 2 * H * I) + 2 * 2 * H * H + R * 2 * (2 * H * H + 2 * H * I)
    attention = (L - 1 + R) * 2 * (2 * S * H)
    mlm_head = 2 * (H * H + H * V) * P / S
    pooler_nsp = 2 * (H * H + 2 * H) / S
    forward = encoder + attention + mlm_head + pooler_nsp
    return 3 * forward if training else forward


def counted_as(config: BertConfig) -> str:
    """Whose count `model_flops_per_token` makes for `config`, as the report names it."""
    return "ModernBERT's" if config.family.encoder == "modernbert" else "BERT's"


def window_pairs(seq_len: int, window: int | None) -> int:
    """The (query, key) pairs of one sequence of `seq_len` tokens at most `window` tokens apart
    (None: every pair, S^2): S + 2 (S-1 + S-2 + ... + S-m) with m = min(window, S - 1)."""
    m = seq_len - 1 if window is None else min(window, seq_len - 1)
    return seq_len + m * (2 * seq_len - m - 1)


def modernbert_flops_per_token(
    config: BertConfig, seq_len: int, predictions: int, *, training: bool
) -> float:
    """Matmul FLOPs per token of one ModernBERT masked-LM forward (or forward + backward), counted
    as `model_flops_per_token` counts BERT's:

    - encoder weights, per token and layer: `wqkv` H x 3H, `wo` H x H, the gated `wi` H x 2I and
      the MLP's `wo` I x H: 2 * (4 H^2 + 3 H I). Every layer at every token (bertjax's ModernBERT
      runs its last layer whole, as transformers' does).
    - attention scores q.k and the context probs.v: 2 * 2 H per (query, key) pair. A global
      layer's query sees the S keys; a local layer's only those within `local_attention // 2`
      tokens on either side (fewer at the sequence's ends, `window_pairs`), so a local layer
      counts 4 H * window_pairs / S per token. bertjax's attention paths and transformers'
      eager and sdpa attention compute every score and mask those outside the window (a kernel
      that skips masked blocks, as flash attention's sliding window does, saves them): the
      count is what the model needs, not what an implementation computes.
    - MLM head at the P masked positions only: dense H x H and the decoder tied to the word
      embeddings H x V: 2 (H^2 + H V) P / S.
    - no pooler, no next-sentence head, no token types; rotary positions, norms and the GELU
      gate are elementwise, the embeddings a gather. Training is 3x the forward.
    """
    L, H, I = config.num_hidden_layers, config.hidden_size, config.intermediate_size
    V, S, P = config.vocab_size, seq_len, predictions
    encoder = L * 2 * (4 * H * H + 3 * H * I)
    attention = sum(4 * H * window_pairs(S, w) / S for w in config.attention_windows)
    mlm_head = 2 * (H * H + H * V) * P / S
    forward = encoder + attention + mlm_head
    return 3 * forward if training else forward


def electra_flops_per_token(discriminator: BertConfig, generator: BertConfig, seq_len: int,
                            predictions: int, *, training: bool) -> float:
    """Matmul FLOPs per token of ELECTRA's pre-training (`bertjax.train.electra`), both networks,
    counted as `model_flops_per_token` counts (3x the forward to train):

    - the generator, a masked LM: its encoder with the last layer at the P masked rows, and its
      MLM head there, dense H_g x E to the embeddings' width and the tied decoder E x V;
    - the discriminator: its encoder at every row (its head reads every token) and its head,
      dense H x H and H x 1, per token;
    - each model's projection of the shared embeddings (E) to its hidden size, where they differ.
    """
    S, P, V = seq_len, predictions, discriminator.vocab_size
    R = min(1.0, P / S)

    def encoder(c: BertConfig, last_rows: float) -> float:
        L, H, I = c.num_hidden_layers, c.hidden_size, c.intermediate_size
        per_layer = 2 * (2 * H * H + 2 * H * I + 2 * S * H)  # queries, output, MLP, attention
        keys_values = 2 * 2 * H * H
        project = 2 * c.embedding_width * H if c.embedding_width != H else 0.0
        return project + L * keys_values + (L - 1 + last_rows) * per_layer

    H_g, E, H = generator.hidden_size, generator.embedding_width, discriminator.hidden_size
    gen = encoder(generator, R) + 2 * (H_g * E + E * V) * P / S
    disc = encoder(discriminator, 1.0) + 2 * (H * H + H)
    return 3 * (gen + disc) if training else gen + disc


# Dense (no sparsity) bfloat16 tensor peaks in TFLOP/s per JAX device, from the vendors'
# datasheets. Each pattern is a regular expression searched in the lower-cased `device_kind`
# (e.g. "NVIDIA H100 80GB HBM3", "TPU v5 lite"); the first match wins, so specific names come
# before the general ones they contain.
DATASHEET_PEAKS: tuple[tuple[str, str, float], ...] = (
    # (pattern, name, bf16 dense TFLOP/s)
    (r"\bgh200\b", "NVIDIA GH200", 989.0),
    (r"\bh200\b", "NVIDIA H200", 989.0),
    (r"\bh100\b.*\bpcie\b", "NVIDIA H100 PCIe", 756.0),
    (r"\bh100\b.*\bnvl\b", "NVIDIA H100 NVL", 835.0),
    (r"\bh100\b", "NVIDIA H100 SXM", 989.0),
    (r"\bb200\b", "NVIDIA B200", 2250.0),
    (r"\ba100\b", "NVIDIA A100", 312.0),
    (r"\bl40s\b", "NVIDIA L40S", 362.0),
    (r"\bl4\b", "NVIDIA L4", 121.0),
    (r"\btpu v4\b", "TPU v4", 275.0),
    (r"\btpu v5 ?(lite|e)\b", "TPU v5e", 197.0),
    (r"\btpu v5p?\b", "TPU v5p", 459.0),
    (r"\btpu v6 ?(lite|e)\b", "TPU v6e", 918.0),
)


def datasheet_peak(device_kind: str) -> tuple[str, float] | None:
    """(name, bf16 dense peak in FLOP/s) of a known accelerator; None for CPUs and unknown kinds."""
    kind = device_kind.lower()
    for pattern, name, tflops in DATASHEET_PEAKS:
        if re.search(pattern, kind):
            return name, tflops * 1e12
    return None
