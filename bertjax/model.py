"""BERT in Flax NNX.

Mirrors `bert_torch/model.py` class for class and attribute for attribute; the only naming
differences are the leaf names (`kernel`/`scale`/`embedding` here, `weight` there). Numerics that
frameworks disagree on are pinned in `bertjax.numerics` and commented where they are used.

Shapes: B batch, S sequence, H hidden, A heads, D head dim (H = A * D), P masked positions,
V vocabulary, I intermediate, K packed sequences per row (`bertjax.inputs` on packing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import jax
import jax.numpy as jnp
from flax import nnx, struct

from bertjax import inputs, numerics
from bertjax.attention import dropout_rows, exact_attention, fused_attention, take_rows
from bertjax.config import BertConfig
from bertjax.config.checks import check_encoder, check_pooler_inputs
from bertjax.config.heads import ENCODER, MODELS, ModelClass

T = TypeVar("T")
M = TypeVar("M", bound=nnx.Module)


@struct.dataclass
class BertOutput:
    """What a BERT forward returns; fields a model does not compute are None."""

    # (B, S, H) in the compute dtype; (B * C, S, H) for choices; (B, Q, H) at `output_positions`
    sequence_output: jax.Array
    # (B, H); (B, K, H) at `cls_positions` (zeros in empty slots); None without a pooler
    pooled_output: jax.Array | None = None
    mlm_logits: jax.Array | None = None  # (B, P, V) or (B, S, V), float32
    nsp_logits: jax.Array | None = None  # (B, 2) or (B, K, 2), float32
    # float32: (B, num_labels) or (B, K, num_labels) sequence classification, (B, S, num_labels)
    # token classification, (B, C) multiple choice
    logits: jax.Array | None = None
    start_logits: jax.Array | None = None  # (B, S), float32: question answering
    end_logits: jax.Array | None = None  # (B, S), float32
    attentions: tuple[jax.Array, ...] | None = None  # per layer (B, A, S, S), float32
    hidden_states: tuple[jax.Array, ...] | None = None  # embeddings + per layer (B, S, H)

    if TYPE_CHECKING:  # made by flax.struct.dataclass
        def replace(self, **updates: Any) -> BertOutput: ...


def present(value: T | None, what: str) -> T:
    """`value`, an output field (`what`) a head reads and its encoder computes; None is a bug."""
    if value is None:
        raise ValueError(f"{what} was not computed for a head that reads it")
    return value


def linear(config: BertConfig, n_in: int, n_out: int, rngs: nnx.Rngs, *, use_bias: bool = True,
           kernel_init: nnx.Initializer | None = None) -> nnx.Linear:
    """A dense layer computing in the config's dtype with float32 parameters, BERT's init (or
    `kernel_init`); its matmul sees the inputs as one (rows, n_in) matrix
    (`numerics.rows_dot_general`). ModernBERT's layers may have no bias (`use_bias`)."""
    return nnx.Linear(
        n_in,
        n_out,
        use_bias=use_bias,
        dtype=numerics.compute_dtype(config),
        param_dtype=jnp.float32,
        kernel_init=kernel_init or nnx.initializers.normal(config.initializer_range),
        bias_init=nnx.initializers.zeros,
        dot_general=numerics.rows_dot_general,
        rngs=rngs,
    )


def _embed(config: BertConfig, num: int, rngs: nnx.Rngs) -> nnx.Embed:
    return nnx.Embed(
        num,
        config.embedding_width,
        dtype=numerics.compute_dtype(config),
        param_dtype=jnp.float32,
        embedding_init=nnx.initializers.normal(config.initializer_range),
        rngs=rngs,
    )


def embedding_rows(embed: nnx.Embed, ids: jax.Array) -> jax.Array:
    """`embed(ids)`, with the rows gathered from the float32 table and then cast: the gradient
    is a float32 scatter-add. `nnx.Embed` casts the whole table to bfloat16 first, so its
    gradient was a bfloat16 scatter-add, which a GPU serialises where many tokens of a batch
    share a row (frequent words, [MASK]): it was the pre-training job's shortfall against the
    bench's random ids (docs/benchmarks.md, "The pre-training job on a GPU"). The same rows;
    each row's gradients summed in float32."""
    return jnp.take(embed.embedding[...], ids, axis=0).astype(numerics.compute_dtype_of(embed))


class LayerNorm(nnx.LayerNorm):
    """LayerNorm with BERT's epsilon, two-pass variance and float32 statistics
    (`numerics.layer_norm`: the parameters' gradients as matmuls); ModernBERT's may have no bias
    (`use_bias`)."""

    def __init__(self, config: BertConfig, *, width: int | None = None, use_bias: bool = True,
                 rngs: nnx.Rngs):
        super().__init__(
            width or config.hidden_size,
            epsilon=config.layer_norm_eps,  # Flax defaults to 1e-6
            use_fast_variance=False,  # E[x^2]-E[x]^2 loses half the 1e-5 margin
            use_bias=use_bias,
            dtype=jnp.float32,
            param_dtype=jnp.float32,
            rngs=rngs,
        )
        self.out_dtype = numerics.compute_dtype(config)

    def __call__(self, x: jax.Array) -> jax.Array:  # type: ignore[override]  # no mask: BERT's
        assert self.scale is not None  # use_scale: Flax's
        bias = None if self.bias is None else self.bias[...]
        return numerics.layer_norm(x, self.scale[...], bias, self.epsilon).astype(self.out_dtype)


class BertEmbeddings(nnx.Module):
    """Word + position + token-type embeddings, then LayerNorm and dropout.

    Only the word embeddings are a gather. Positions are a slice of their table and token types a
    one-hot matmul (google-research/bert does both), so their gradients are a pad and a matmul:
    not a scatter-add into a 2-row table where every token of the batch collides, which took a
    third of a GPU training step. The slice's rows are added with `numerics.add_broadcast`, whose
    gradient sums over the batch with a matmul, not a reduction that makes XLA GPU transpose the
    residual stream around every layer. Packed rows' `position_ids` (B, S) restart per sequence:
    a gather from the table then, whose scatter-add gradient collides far less (B * K rows per
    position) than the token types' did.
    """

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.word_embeddings = _embed(config, config.vocab_size, rngs)
        self.position_embeddings = _embed(config, config.max_position_embeddings, rngs)
        self.token_type_embeddings = (_embed(config, config.type_vocab_size, rngs)
                                      if config.family.token_types else None)  # DistilBERT: none
        self.layer_norm = LayerNorm(config, width=config.embedding_width, rngs=rngs)
        self.dropout = nnx.Dropout(config.hidden_dropout_prob)

    def __call__(
        self,
        input_ids: jax.Array,
        token_type_ids: jax.Array,
        position_ids: jax.Array | None = None,
        *,
        deterministic: bool = True,
        rngs: nnx.Rngs | None = None,
    ) -> jax.Array:
        dtype = numerics.compute_dtype_of(self.word_embeddings)
        words = embedding_rows(self.word_embeddings, input_ids)  # (B, S, H)
        if position_ids is None:  # 0..S-1 in every row: a slice of the table
            positions = self.position_embeddings.embedding[...][: input_ids.shape[1]]  # (S, H)
            x = numerics.add_broadcast(words, positions.astype(dtype))  # (B, S, H)
        else:
            x = words + embedding_rows(self.position_embeddings, position_ids)  # (B, S, H)
        if self.token_type_embeddings is not None:
            table = self.token_type_embeddings.embedding[...].astype(dtype)  # (T, H)
            one_hot = jax.nn.one_hot(token_type_ids, table.shape[0], dtype=dtype)  # (B, S, T)
            x = x + jnp.einsum("bst,th->bsh", one_hot, table,  # the mirror's order: + types last
                               precision=jax.lax.Precision.HIGHEST)  # exact rows (no TF32)
        return self.dropout(self.layer_norm(x), deterministic=deterministic, rngs=rngs)


class BertAttention(nnx.Module):
    """Multi-head self-attention with a key padding mask (B, S) or packed rows' block-diagonal
    mask (B, S, S) (`inputs.packed_attention`); returns (output, probabilities).

    Two paths (`config.attn_implementation`): "exact" computes the scores with an einsum and a
    float32 masked softmax, drops attention probabilities out and returns them (the parity
    reference; `exact_attention`, on a CPU heads-major in slices of the batch); "fused" calls
    `jax.nn.dot_product_attention` with the padding as sequence lengths, so `attention_mask`
    must be right padding (every input bertjax makes is), returns no probabilities and applies
    no dropout to them: cuDNN's flash attention where it applies (an
    NVIDIA GPU, bfloat16/float16 compute, head size a multiple of 8 up to 128), XLA otherwise
    (`attention.fused_attention`). "auto" is fused where cuDNN applies and neither is needed,
    exact otherwise; an explicit "fused" refuses probability dropout. Packed rows' mask goes to
    XLA's fused implementation as its `mask` argument, and "auto" keeps them exact
    (`numerics.use_fused_attention` says why).

    Keys and values are every position of `x` (B, S, H); the queries are `x` too, or its rows
    at `positions` (B, Q) when given: the output is then (B, Q, H), with the dropout masks of
    the whole output at those rows (`dropout_rows`).
    """

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        h = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.implementation = config.attn_implementation
        self.query = linear(config, h, h, rngs)
        self.key = linear(config, h, h, rngs)
        self.value = linear(config, h, h, rngs)
        self.output = linear(config, h, h, rngs)
        self.attention_dropout = nnx.Dropout(config.attention_probs_dropout_prob)
        self.output_dropout = nnx.Dropout(config.hidden_dropout_prob)

    def __call__(
        self,
        x: jax.Array,
        attention_mask: jax.Array,
        *,
        deterministic: bool = True,
        rngs: nnx.Rngs | None = None,
        output_probs: bool = True,
        positions: jax.Array | None = None,
    ) -> tuple[jax.Array, jax.Array | None]:
        queries = x if positions is None else take_rows(x, positions)  # (B, S or Q, H)
        B, S, H = x.shape
        Q = queries.shape[1]
        packed = attention_mask.ndim == 3
        if packed and positions is not None:
            attention_mask = take_rows(attention_mask, positions)  # (B, Q, S): the queries' rows
        q = self.query(queries).reshape(B, Q, self.num_heads, self.head_dim)  # (B, Q, A, D)
        k = self.key(x).reshape(B, S, self.num_heads, self.head_dim)  # (B, S, A, D)
        v = self.value(x).reshape(B, S, self.num_heads, self.head_dim)  # (B, S, A, D)
        drops_probs = not deterministic and self.attention_dropout.rate > 0
        cudnn = numerics.cudnn_attention_applies(q.dtype, self.head_dim) and not packed
        if numerics.use_fused_attention(self.implementation, drops_probs, output_probs, cudnn,
                                        packed):
            context, probs = fused_attention(q, k, v, attention_mask, cudnn), None
        else:
            def dropout(probs: jax.Array) -> jax.Array:  # (B, A, Q, S): rows on axis 2
                return dropout_rows(self.attention_dropout, probs, positions, S, 2,
                                    deterministic=deterministic, rngs=rngs)

            chunks = numerics.cpu_attention_chunks(B, drops_probs)
            context, probs = exact_attention(q, k, v, attention_mask, dropout, chunks)
        context = context.reshape(B, Q, H)  # (B, Q, A, D) -> (B, Q, H)
        out = dropout_rows(self.output_dropout, self.output(context), positions, S, 1,
                           deterministic=deterministic, rngs=rngs)
        return out, probs


class BertLayer(nnx.Module):
    """Post-LN transformer block: attention + residual + LN, GELU MLP + residual + LN.

    With `positions` (B, Q) it computes its output at those rows only (B, Q, H): attention still
    reads every position's keys and values, but the queries, the residuals, the MLP and the norms
    run on the Q rows. The same numbers as the full layer's rows, up to float32 rounding.
    """

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.attention = BertAttention(config, rngs=rngs)
        self.attention_norm = LayerNorm(config, rngs=rngs)
        self.intermediate = linear(config, config.hidden_size, config.intermediate_size, rngs)
        self.output = linear(config, config.intermediate_size, config.hidden_size, rngs)
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
        output_probs: bool = True,
        positions: jax.Array | None = None,
    ) -> tuple[jax.Array, jax.Array | None]:
        S = x.shape[1]
        rows = x if positions is None else take_rows(x, positions)  # (B, S or Q, H)
        attended, probs = self.attention(x, attention_mask, deterministic=deterministic, rngs=rngs,
                                         output_probs=output_probs, positions=positions)
        h = self.attention_norm(rows + attended)  # (B, S or Q, H)
        y = self.output(self.activation(self.intermediate(h)))  # (B, ., I) -> (B, ., H)
        y = dropout_rows(self.output_dropout, y, positions, S, 1, deterministic=deterministic,
                         rngs=rngs)
        return self.output_norm(h + y), probs


class BertPooler(nnx.Module):
    """Dense + tanh on the [CLS] position: row 0, or each packed sequence's at `cls_positions`
    (B, K), whose empty slots (-1) pool to zeros."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.dense = linear(config, config.hidden_size, config.hidden_size, rngs)
        self.activation = numerics.head_activation(config.family.pooler_activation)

    def __call__(self, sequence_output: jax.Array, cls_positions: jax.Array | None = None
                 ) -> jax.Array:
        if cls_positions is None:
            return self.activation(self.dense(sequence_output[:, 0]))  # (B, H)
        cls = take_rows(sequence_output, jnp.maximum(cls_positions, 0))  # (B, K, H)
        pooled = self.activation(self.dense(cls))  # (B, K, H)
        return jnp.where(cls_positions[:, :, None] >= 0, pooled, 0)


def stack_modules(modules: list[M]) -> M:
    """One module of the same structure as each of `modules` whose parameters hold them all, each
    leaf (N, ...) in their order: what a scan over layers scans over, stacked once at
    initialisation, never again in a forward pass."""
    stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves),
                           *(nnx.state(m) for m in modules))  # each leaf (N, ...)
    return nnx.merge(nnx.graphdef(modules[0]), stacked)


def _stacked_layers(config: BertConfig, rngs: nnx.Rngs) -> BertLayer:
    """One `BertLayer` whose parameters hold all `num_hidden_layers` layers, each leaf (L, ...):
    what `config.scan_layers` scans over, initialised as the loop's (same random numbers in the
    same order)."""
    return stack_modules([BertLayer(config, rngs=rngs) for _ in range(config.num_hidden_layers)])


class BertModel(nnx.Module):
    """The BERT encoder: embeddings, `num_hidden_layers` layers, pooler.

    Every model class declares what it is, for checkpoint code that takes the class as an
    argument (as transformers and Levanter do) instead of asking which class it was given:
    `base_model_prefix` is the attribute that holds the encoder, whose parameter names start
    with it ("": this class is the encoder, its names carry no prefix); `head_modules` are the
    attributes holding weights a checkpoint of another class may lack (freshly initialised, with
    a warning) or carry for another class (left out). The pooler is the encoder's one head:
    `add_pooling_layer=False` leaves it out, as Hugging Face's BertForMaskedLM,
    BertForTokenClassification and BertForQuestionAnswering do (`pooled_output` is then None).

    `output_positions` (B, Q) asks for the sequence output at those positions only, (B, Q, H):
    what pre-training's losses read. The last layer then computes those rows (and [CLS] for the
    pooler, or each packed sequence's) alone (`BertLayer`'s `positions`), saving most of its work.

    Packed rows (`bertjax.inputs`): `sequence_ids` (B, S) keep attention inside each sequence and
    restart its positions (unless `position_ids` (B, S) say otherwise); with a pooler they need
    `cls_positions` (B, K), and `pooled_output` is then (B, K, H). Attention maps or hidden
    states asked for alongside are every layer's at every position, the output taken from them,
    and so is a `scan_layers` model's: splitting its last layer off the scan would copy the
    stacked parameters every step (what the scan is there to avoid).
    """

    base_model_prefix: ClassVar[str] = ""
    spec: ClassVar[ModelClass] = MODELS[ENCODER]
    head_modules: ClassVar[tuple[str, ...]] = spec.heads  # ("pooler",)

    def __init__(self, config: BertConfig, *, add_pooling_layer: bool | None = None,
                 rngs: nnx.Rngs):
        check_encoder(config, "BertModel")  # a ModernBERT's is bertjax.modernbert's
        self.config = config
        self.embeddings = BertEmbeddings(config, rngs=rngs)
        # ELECTRA's narrower embeddings, taken to hidden_size after their LayerNorm and dropout
        self.embeddings_project = (linear(config, config.embedding_width, config.hidden_size, rngs)
                                   if config.embedding_width != config.hidden_size else None)
        # a loop model holds `layers.{i}`; a scan model one stacked layer (`_stacked_layers`),
        # whose (L, ...) parameters conversion and checkpoints name per layer all the same
        self.layers: nnx.List[BertLayer] | BertLayer = (
            _stacked_layers(config, rngs) if config.scan_layers
            else nnx.List([BertLayer(config, rngs=rngs) for _ in range(config.num_hidden_layers)]))
        if add_pooling_layer is None:  # the family's bare encoder: BERT's has one, ELECTRA's not
            add_pooling_layer = config.family.base_pooler
        self.pooler = BertPooler(config, rngs=rngs) if add_pooling_layer else None

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
        token_type_ids, attention_mask = inputs.check_inputs(
            self.config, input_ids, token_type_ids, attention_mask, packed=sequence_ids is not None
        )
        check_pooler_inputs(self.pooler is not None, sequence_ids, cls_positions)
        attention_mask, position_ids = inputs.packing_inputs(  # (B, S) or (B, S, S); (B, S)
            self.config, input_ids, attention_mask, sequence_ids, position_ids, cls_positions)
        whole = output_attentions or output_hidden_states or self.config.scan_layers
        if output_positions is not None:
            inputs.check_masked_positions(input_ids, output_positions, "output_positions")
        # one dropout stream for the embeddings, one per layer: the same masks whether the
        # layers run in a Python loop or under lax.scan
        keys = numerics.dropout_keys(deterministic, dropout_rng, self.config.num_hidden_layers + 1)
        x = self.embeddings(input_ids, token_type_ids, position_ids, deterministic=deterministic,
                            rngs=numerics.rngs_of(keys, 0))
        if self.embeddings_project is not None:
            x = self.embeddings_project(x)  # (B, S, E) -> (B, S, H)
        # (B, [1 or K +] Q) or None
        rows = self._last_rows(output_positions, input_ids.shape[1], whole, cls_positions)
        x, hidden, probs = self._layers(x, attention_mask, keys, deterministic, output_attentions,
                                        output_hidden_states, rows)
        pooled = self._pool(x, cls_positions, rows is not None)
        if output_positions is not None:  # (B, Q, H): the rows' tail, or taken from every row
            Q = output_positions.shape[1]
            x = take_rows(x, output_positions) if rows is None else x[:, rows.shape[1] - Q:]
        return BertOutput(
            sequence_output=x,
            pooled_output=pooled,
            attentions=tuple(present(p, "attentions") for p in probs) if output_attentions else None,
            hidden_states=tuple(hidden) if output_hidden_states else None,
        )

    def _last_rows(self, positions: jax.Array | None, seq_len: int, whole: bool,
                   cls_positions: jax.Array | None) -> jax.Array | None:
        """The rows the last layer computes: positions (B, Q), after [CLS] for the pooler (row 0:
        (B, 1 + Q), or `cls_positions` (B, K + Q), an empty slot's at row 0); None for every row
        (no positions, `whole` asked for, or no fewer rows than `seq_len`)."""
        if positions is None or whole:
            return None
        if self.pooler is not None:
            cls = jnp.zeros_like(positions[:, :1]) if cls_positions is None else (
                jnp.maximum(cls_positions, 0).astype(positions.dtype))  # (B, 1 or K)
            positions = jnp.concatenate([cls, positions], axis=1)
        return positions if positions.shape[1] < seq_len else None

    def _pool(self, x: jax.Array, cls_positions: jax.Array | None, rows: bool
              ) -> jax.Array | None:
        """The pooler's output on x, every row (B, S, H) or the last layer's `rows`, whose first
        ones are the [CLS] rows (`_last_rows`): (B, H), or (B, K, H) at `cls_positions`."""
        if self.pooler is None:
            return None
        if rows and cls_positions is not None:  # sequence k's [CLS] is row k, an empty slot -1
            slots = jnp.arange(cls_positions.shape[1], dtype=cls_positions.dtype)  # (K,)
            cls_positions = jnp.where(cls_positions >= 0, slots, -1)  # (B, K)
        return self.pooler(x, cls_positions)  # row 0 is [CLS] either way without packing

    def _loop_layers(self) -> nnx.List[BertLayer]:
        """The layers of a loop model (`scan_layers` off), one module each."""
        assert isinstance(self.layers, nnx.List), "a scan model's layers are one stacked module"
        return self.layers

    def _layers(
        self, x: jax.Array, attention_mask: jax.Array, keys: jax.Array | None,
        deterministic: bool, output_probs: bool, output_hidden: bool, rows: jax.Array | None,
    ) -> tuple[jax.Array, list[jax.Array], list[jax.Array | None]]:
        """Run every layer: in a loop, or under `lax.scan` over the stacked layer parameters
        (`config.scan_layers`: one layer traced and compiled instead of L); each layer
        rematerialised in the backward pass with `config.remat`; a loop's last layer at `rows`
        (B, Q) only, when given. Returns the output, the hidden states (embeddings first) and each
        layer's attention probabilities."""
        scan = self.config.scan_layers
        graphdef = nnx.graphdef(self.layers if scan else self._loop_layers()[0])  # one for all

        def layer(state: nnx.State, x: jax.Array, key: jax.Array | None,
                  positions: jax.Array | None = None) -> tuple[jax.Array, Any]:
            rngs = None if key is None else nnx.Rngs(dropout=key)
            return nnx.merge(graphdef, state)(x, attention_mask, deterministic=deterministic,
                                              rngs=rngs, output_probs=output_probs,
                                              positions=positions)

        if self.config.remat:
            layer = jax.checkpoint(layer)
        if scan:
            return self._scan(layer, x, keys, output_probs, output_hidden)
        states = [nnx.state(m) for m in self._loop_layers()]
        layer_keys = [None if keys is None else keys[i + 1] for i in range(len(states))]
        hidden, probs = [x], []
        for i, (state, key) in enumerate(zip(states, layer_keys, strict=True)):
            x, p = layer(state, x, key, rows if i == len(states) - 1 else None)
            hidden.append(x)
            probs.append(p)
        return x, hidden, probs

    def _scan(
        self, layer: Callable[..., tuple[jax.Array, Any]], x: jax.Array, keys: jax.Array | None,
        output_probs: bool, output_hidden: bool,
    ) -> tuple[jax.Array, list[jax.Array], list[jax.Array | None]]:
        """`layer` under `lax.scan` over the stacked (L, ...) parameters as they are held (no
        stacking in the forward, none to undo in the backward) and the per-layer dropout keys."""

        def body(x: jax.Array, per_layer: tuple[nnx.State, jax.Array | None]) -> tuple[Any, Any]:
            x, p = layer(per_layer[0], x, per_layer[1])
            # stack only what was asked for: (L, B, S, H) and (L, B, A, S, S) are large
            return x, (x if output_hidden else None, p if output_probs else None)

        embedded = x
        stacked = nnx.state(self.layers)  # each leaf (L, ...)
        x, (xs, ps) = jax.lax.scan(body, x, (stacked, None if keys is None else keys[1:]))
        hidden = [embedded, *xs] if output_hidden else []  # (L, B, S, H) -> per layer
        probs = list(ps) if output_probs else []  # (L, B, A, S, S) -> per layer
        return x, hidden, probs
