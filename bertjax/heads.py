"""BERT with a task head, in Flax NNX: the `BertFor*` classes of Hugging Face transformers.

Mirrors `bert_torch/heads.py` class for class and attribute for attribute. Every class holds the
encoder as `bert` (`base_model_prefix`) and has its row of `bertjax.config.heads.MODELS` (`spec`:
its heads, outputs, pooler), whose heads are the attributes holding its head weights
(`head_modules`), so checkpoint code (`bertjax.io`) loads, saves and converts any of them without
asking which class it was given (see `bertjax.model.BertModel`).

Head attribute names are unique across classes (`mlm_head`, `nsp_head`, `classifier`,
`token_classifier`, `qa_outputs`, `choice_classifier`): a checkpoint's names say which task a head
belongs to, so one class's head is never loaded as another's. Hugging Face calls three of them
`classifier`; `bertjax.io.names` maps between the two by the checkpoint's architecture.

A ModernBERT config (`Family.encoder`) gives the same classes ModernBERT's encoder
(`bertjax.modernbert.ModernBertModel`) as `bert`, and its heads' modules where they differ from
BERT's: the masked-LM head (`ModernBertMLMHead`) and a classifier head of dense, activation, norm,
dropout and a last layer (`ModernBertClassifier`) on the pooled or per-token features, as
RoBERTa's sequence classifier is its `ClassificationHead`.

Logits are float32 whatever the compute dtype. Shapes: B batch, S sequence, H hidden,
P masked positions, V vocabulary, C choices, K packed sequences per row.

Packed rows (`bertjax.inputs`): every class takes `sequence_ids`, `position_ids` and
`cls_positions` (keyword-only). The heads on [CLS] (next sentence, sequence classification,
multiple choice, the pooler) then give one output per slot of `cls_positions` (B, K), those of
empty slots (-1) to be ignored; the per-token heads (masked LM, token classification, question
answering) give rows (B, S, ...) whose sequence k is where `sequence_ids == k`
(`bertjax.data.packing.unpack_tokens` splits them), and `masked_positions` index the row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import nnx

from bertjax import inputs, numerics
from bertjax.attention import take_rows
from bertjax.config import QA_OUTPUTS, BertConfig
from bertjax.config.checks import check_family
from bertjax.config.families import FAMILIES
from bertjax.config.heads import MODELS, Model, ModelClass
from bertjax.model import BertModel, BertOutput, LayerNorm, linear, present
from bertjax.modernbert import ModernBertClassifier, ModernBertMLMHead, ModernBertModel


def float32_linear(config: BertConfig, n_in: int, n_out: int, rngs: nnx.Rngs) -> nnx.Linear:
    """A head's output layer: float32 weights and float32 compute, for float32 logits."""
    return linear(config.replace(dtype="float32"), n_in, n_out, rngs)


class BertMLMHead(nnx.Module):
    """Dense + GELU + LayerNorm, then the decoder tied to the word embeddings plus its own bias;
    the dense layer goes to the embeddings' width (ELECTRA's generator: E, not H)."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        width = config.embedding_width
        self.transform = linear(config, config.hidden_size, width, rngs)
        self.layer_norm = LayerNorm(config, width=width, rngs=rngs)
        self.bias = nnx.Param(jnp.zeros((config.vocab_size,), jnp.float32))
        # transformers' RoBERTa and ELECTRA heads: GELU whatever hidden_act says
        self.activation = numerics.activation(config.family.mlm_activation or config.hidden_act)

    def __call__(self, h: jax.Array, word_embeddings: nnx.Embed) -> jax.Array:
        h = self.layer_norm(self.activation(self.transform(h)))  # (B, P, H)
        logits = numerics.tied_decoder(h, word_embeddings.embedding[...])  # (B, P, V) float32
        return numerics.add_broadcast(logits, self.bias[...])  # (B, P, V) float32


def modern(config: BertConfig) -> bool:
    """Whether `config`'s family has ModernBERT's encoder and heads (`Family.encoder`)."""
    return config.family.encoder == "modernbert"


def encoder_class(config: BertConfig) -> type[BertModel] | type[ModernBertModel]:
    """The encoder a model of `config`'s family holds as `bert`, and its bare class."""
    return ModernBertModel if modern(config) else BertModel


class _WithEncoder(nnx.Module):
    """What every head class shares: the encoder `bert` (with a pooler where its row says so, as
    Hugging Face's class of the same name), its call, then the class's head (`_head`). Each
    class of this module takes its row of `MODELS` by its name (`spec`, and its heads as
    `head_modules`); a user's subclass keeps its parent's."""

    base_model_prefix: ClassVar[str] = "bert"
    spec: ClassVar[ModelClass]
    head_modules: ClassVar[tuple[str, ...]] = ()
    dropout: nnx.Dropout  # the head's dropout, where its class has one

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__ == __name__ and not cls.__name__.startswith("_"):
            cls.spec = MODELS[cls.__name__]
            cls.head_modules = cls.spec.heads

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        check_family(self.spec, config)
        self.config = config
        self.bert = encoder_class(config)(config, add_pooling_layer=self.has_pooler(config),
                                          rngs=rngs)

    @classmethod
    def has_pooler(cls, config: BertConfig) -> bool:
        """Whether this class's encoder has the pooler, for a model of `config`'s family."""
        return cls.spec.pooled

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
        sequence_ids: jax.Array | None = None,
        position_ids: jax.Array | None = None,
        cls_positions: jax.Array | None = None,
    ) -> BertOutput:
        out = self.bert(input_ids, token_type_ids, attention_mask, deterministic=deterministic,
                        dropout_rng=dropout_rng, output_attentions=output_attentions,
                        output_hidden_states=output_hidden_states, sequence_ids=sequence_ids,
                        position_ids=position_ids, cls_positions=cls_positions)
        return self._head(out, deterministic, dropout_rng)

    def _head(self, out: BertOutput, deterministic: bool,
              dropout_rng: jax.Array | None) -> BertOutput:
        """The encoder's output with this class's head's fields filled in."""
        raise NotImplementedError

    def _head_dropout(self, x: jax.Array, deterministic: bool,
                      dropout_rng: jax.Array | None, stream: int = 1) -> jax.Array:
        """`self.dropout` on `x` in float32 with the head's own stream (the encoder's streams
        start from `dropout_rng` itself; a head that drops out twice takes stream 2 too)."""
        head_rng = None if dropout_rng is None else jax.random.fold_in(dropout_rng, stream)
        return self.dropout(x.astype(jnp.float32), deterministic=deterministic,
                            rngs=numerics.dropout_rngs(deterministic, head_rng))

    def _classify(self, head: nnx.Module, x: jax.Array, deterministic: bool,
                  dropout_rng: jax.Array | None) -> jax.Array:
        """x (..., H) through the class's classifier `head`: BERT's dense layer after the class's
        dropout, or ModernBERT's classifier head, which drops out after its norm (the head's
        own stream either way)."""
        if isinstance(head, ModernBertClassifier):
            head_rng = None if dropout_rng is None else jax.random.fold_in(dropout_rng, 1)
            return head(x, deterministic=deterministic,
                        rngs=numerics.dropout_rngs(deterministic, head_rng))
        assert isinstance(head, nnx.Linear)
        return head(self._head_dropout(x, deterministic, dropout_rng))


class _MaskedLM(_WithEncoder):
    """The masked-LM classes: the call takes `masked_positions` (B, P) and fills `mlm_logits`
    there (B, P, V), or at every position (B, S, V) without them; `sequence_output` is then
    (B, P, H) too, the last layer computed at those rows (`BertModel`'s `output_positions`). The
    other options are `BertModel`'s."""

    mlm_head: BertMLMHead | ModernBertMLMHead

    def __call__(
        self,
        input_ids: jax.Array,
        token_type_ids: jax.Array | None = None,
        attention_mask: jax.Array | None = None,
        masked_positions: jax.Array | None = None,
        **options: Any,
    ) -> BertOutput:
        if masked_positions is not None:
            inputs.check_masked_positions(input_ids, masked_positions)
        # at masked positions, the last layer computes those rows alone: (B, P, H) or (B, S, H)
        out = self.bert(input_ids, token_type_ids, attention_mask,
                        output_positions=masked_positions, **options)
        h = out.sequence_output
        out = out.replace(mlm_logits=self.mlm_head(h, self.bert.embeddings.word_embeddings))
        return self._head(out, True, None)  # the heads after the MLM's use no dropout

    def _head(self, out: BertOutput, deterministic: bool,
              dropout_rng: jax.Array | None) -> BertOutput:
        return out


class BertForPreTraining(_MaskedLM):
    """BERT with the masked-LM (`mlm_head`, tied to the word embeddings) and next-sentence-
    prediction (`nsp_head`) heads: `mlm_logits` (B, P, V) at `masked_positions` or (B, S, V),
    and `nsp_logits` (B, 2), or (B, K, 2) at packed rows' `cls_positions`."""


    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        super().__init__(config, rngs=rngs)
        self.mlm_head = BertMLMHead(config, rngs=rngs)
        self.nsp_head = float32_linear(config, config.hidden_size, 2, rngs)

    def _head(self, out: BertOutput, deterministic: bool,
              dropout_rng: jax.Array | None) -> BertOutput:
        pooled = present(out.pooled_output, "pooled_output")
        return out.replace(nsp_logits=self.nsp_head(pooled.astype(jnp.float32)))


class BertForMaskedLM(_MaskedLM):
    """BERT with the masked-LM head only (no pooler, no NSP head; Hugging Face's
    BertForMaskedLM): `mlm_logits` (B, P, V) at `masked_positions`, or (B, S, V). A ModernBERT's
    head is its own (`ModernBertMLMHead`)."""


    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        super().__init__(config, rngs=rngs)
        self.mlm_head = (ModernBertMLMHead if modern(config) else BertMLMHead)(config, rngs=rngs)


class BertForNextSentencePrediction(_WithEncoder):
    """BERT with the next-sentence-prediction head on the pooled [CLS] output (`nsp_logits`
    (B, 2), or (B, K, 2) packed: 0 = B follows A, 1 = B is random; Hugging Face's
    BertForNextSentencePrediction)."""


    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        super().__init__(config, rngs=rngs)
        self.nsp_head = float32_linear(config, config.hidden_size, 2, rngs)

    def _head(self, out: BertOutput, deterministic: bool,
              dropout_rng: jax.Array | None) -> BertOutput:
        pooled = present(out.pooled_output, "pooled_output")
        return out.replace(nsp_logits=self.nsp_head(pooled.astype(jnp.float32)))


class ClassificationHead(nnx.Module):
    """RoBERTa's and ELECTRA's sequence classifier (`Family.classifier_head`), on the first
    token's output instead of a pooler: dropout, dense, tanh (ELECTRA: GELU), dropout, `out_proj`
    to the labels; float32."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.dense = float32_linear(config, config.hidden_size, config.hidden_size, rngs)
        self.out_proj = float32_linear(config, config.hidden_size, config.num_labels, rngs)
        self.activation = numerics.head_activation(config.family.classifier_head)

    def __call__(self, first: jax.Array, dropout: Callable[[jax.Array, int], jax.Array]
                 ) -> jax.Array:
        """`first` (B, [K,] H): each sequence's first token; `dropout(x, stream)` the class's."""
        h = self.activation(self.dense(dropout(first, 1)))  # (B, [K,] H)
        return self.out_proj(dropout(h, 2))  # (B, [K,] num_labels)


class BertForSequenceClassification(_WithEncoder):
    """BERT with a classifier on the pooled [CLS] output: dropout (`classifier_dropout`), then a
    dense layer to `logits` (B, num_labels), or (B, K, num_labels) packed (Hugging Face's
    BertForSequenceClassification). A family with its own classifier head (RoBERTa's) has no
    pooler and a `ClassificationHead` on the first token instead."""


    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        super().__init__(config, rngs=rngs)
        self.dropout = nnx.Dropout(config.classifier_dropout_prob)
        self.classifier: nnx.Linear | ClassificationHead | ModernBertClassifier = (
            ClassificationHead(config, rngs=rngs) if config.family.classifier_head
            else ModernBertClassifier(config, config.num_labels, rngs=rngs) if modern(config)
            else float32_linear(config, config.hidden_size, config.num_labels, rngs))

    @classmethod
    def has_pooler(cls, config: BertConfig) -> bool:
        return not config.family.classifier_head

    def __call__(
        self,
        input_ids: jax.Array,
        token_type_ids: jax.Array | None = None,
        attention_mask: jax.Array | None = None,
        *,
        deterministic: bool = True,
        dropout_rng: jax.Array | None = None,
        **options: Any,
    ) -> BertOutput:
        if not isinstance(self.classifier, ClassificationHead):  # on the pooled output: _head
            return super().__call__(input_ids, token_type_ids, attention_mask,
                                    deterministic=deterministic, dropout_rng=dropout_rng,
                                    **options)
        out = self.bert(input_ids, token_type_ids, attention_mask, deterministic=deterministic,
                        dropout_rng=dropout_rng, **options)
        first = first_tokens(out.sequence_output, options.get("cls_positions"))  # (B, [K,] H)

        def dropout(x: jax.Array, stream: int) -> jax.Array:
            return self._head_dropout(x, deterministic, dropout_rng, stream)

        return out.replace(logits=self.classifier(first, dropout))  # (B, [K,] num_labels)

    def _head(self, out: BertOutput, deterministic: bool,
              dropout_rng: jax.Array | None) -> BertOutput:
        pooled = present(out.pooled_output, "pooled_output")  # (B, [K,] H)
        return out.replace(logits=self._classify(self.classifier, pooled, deterministic,
                                                 dropout_rng))  # (B, [K,] num_labels)


def first_tokens(sequence_output: jax.Array, cls_positions: jax.Array | None) -> jax.Array:
    """Each sequence's first token (B, H) of (B, S, H), or packed rows' at `cls_positions`
    (B, K, H), an empty slot's (-1) zeros: what a classifier without a pooler reads."""
    if cls_positions is None:
        return sequence_output[:, 0]
    rows = take_rows(sequence_output, jnp.maximum(cls_positions, 0))  # (B, K, H)
    return jnp.where(cls_positions[:, :, None] >= 0, rows, 0)


class BertForTokenClassification(_WithEncoder):
    """BERT with a classifier on every token: dropout (`classifier_dropout`), then a dense layer
    to `logits` (B, S, num_labels); no pooler (Hugging Face's BertForTokenClassification)."""


    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        super().__init__(config, rngs=rngs)
        self.dropout = nnx.Dropout(config.classifier_dropout_prob)
        self.token_classifier: nnx.Linear | ModernBertClassifier = (
            ModernBertClassifier(config, config.num_labels, rngs=rngs) if modern(config)
            else float32_linear(config, config.hidden_size, config.num_labels, rngs))

    def _head(self, out: BertOutput, deterministic: bool,
              dropout_rng: jax.Array | None) -> BertOutput:
        logits = self._classify(self.token_classifier, out.sequence_output, deterministic,
                                dropout_rng)
        return out.replace(logits=logits)  # (B, S, num_labels)


class BertForQuestionAnswering(_WithEncoder):
    """BERT with one dense layer `qa_outputs` to a start and an end logit per token
    (`start_logits`, `end_logits`, each (B, S)); no pooler, no dropout (Hugging Face's
    BertForQuestionAnswering). Two outputs whatever `config.num_labels` says; the model's config
    says 2, as transformers needs to load the head. In packed rows a span's start and end lie in
    one sequence: mask the logits to `sequence_ids == k` before picking sequence k's span."""


    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        if config.num_labels != len(QA_OUTPUTS):
            config = config.replace(id2label=tuple(f"LABEL_{i}" for i in range(len(QA_OUTPUTS))))
        super().__init__(config, rngs=rngs)
        # ModernBERT's: its classifier head, whose dropout is its own (BERT's has none)
        self.qa_outputs: nnx.Linear | ModernBertClassifier = (
            ModernBertClassifier(config, len(QA_OUTPUTS), rngs=rngs) if modern(config)
            else float32_linear(config, config.hidden_size, len(QA_OUTPUTS), rngs))

    def _head(self, out: BertOutput, deterministic: bool,
              dropout_rng: jax.Array | None) -> BertOutput:
        h = out.sequence_output.astype(jnp.float32)  # (B, S, H)
        if isinstance(self.qa_outputs, ModernBertClassifier):
            logits = self._classify(self.qa_outputs, h, deterministic, dropout_rng)
        else:
            logits = self.qa_outputs(h)  # (B, S, 2)
        return out.replace(start_logits=logits[..., 0], end_logits=logits[..., 1])


class BertForMultipleChoice(_WithEncoder):
    """BERT scoring each of C choices: inputs (B, C, S) run as B * C sequences, dropout
    (`classifier_dropout`) on each pooled output, a dense layer to one score, `logits` (B, C)
    (Hugging Face's BertForMultipleChoice). `sequence_output` is (B * C, S, H).

    Packed, each row (B, S) holds one example's choices as its sequences (`sequence_ids`), their
    [CLS] at `cls_positions` (B, C); `logits` are (B, C) as stacked, an empty slot's (-1) the
    lowest float32, so a softmax or cross-entropy over the choices leaves it out, and
    `sequence_output` is (B, S, H)."""


    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        super().__init__(config, rngs=rngs)
        self.dropout = nnx.Dropout(config.classifier_dropout_prob)
        self.choice_classifier: nnx.Linear | ModernBertClassifier = (
            ModernBertClassifier(config, 1, rngs=rngs) if modern(config)
            else float32_linear(config, config.hidden_size, 1, rngs))

    def __call__(
        self,
        input_ids: jax.Array,
        token_type_ids: jax.Array | None = None,
        attention_mask: jax.Array | None = None,
        **options: Any,
    ) -> BertOutput:
        if inputs.packed_choices(input_ids, options):
            out = super().__call__(input_ids, token_type_ids, attention_mask, **options)
            logits = jnp.where(options["cls_positions"] >= 0, present(out.logits, "logits")[..., 0],
                               jnp.finfo(jnp.float32).min)  # (B, C, 1) -> (B, C)
            return out.replace(logits=logits)
        flat, (B, C) = inputs.flatten_choices(input_ids, token_type_ids, attention_mask)
        out = super().__call__(*flat, **options)
        return out.replace(logits=present(out.logits, "logits").reshape(B, C))  # (B*C, 1) -> (B, C)

    def _head(self, out: BertOutput, deterministic: bool,
              dropout_rng: jax.Array | None) -> BertOutput:
        # (B * C, H) stacked, (B, C, H) packed -> (B * C, 1) or (B, C, 1)
        pooled = present(out.pooled_output, "pooled_output")
        return out.replace(logits=self._classify(self.choice_classifier, pooled, deterministic,
                                                 dropout_rng))


class DiscriminatorHead(nnx.Module):
    """ELECTRA's discriminator head: dense, the hidden activation, then `dense_prediction` to one
    float32 logit per token."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.dense = linear(config, config.hidden_size, config.hidden_size, rngs)
        self.dense_prediction = float32_linear(config, config.hidden_size, 1, rngs)
        self.activation = numerics.activation(config.hidden_act)

    def __call__(self, h: jax.Array) -> jax.Array:
        h = self.activation(self.dense(h)).astype(jnp.float32)  # (B, S, H)
        return self.dense_prediction(h)[..., 0]  # (B, S, 1) -> (B, S)


class BertForReplacedTokenDetection(_WithEncoder):
    """ELECTRA's discriminator (transformers' ElectraForPreTraining): for every token the logit
    that a generator replaced it, `logits` (B, S) float32; no pooler. ELECTRA models only."""


    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        super().__init__(config, rngs=rngs)
        self.discriminator_predictions = DiscriminatorHead(config, rngs=rngs)

    def _head(self, out: BertOutput, deterministic: bool,
              dropout_rng: jax.Array | None) -> BertOutput:
        return out.replace(logits=self.discriminator_predictions(out.sequence_output))


# Every model class by its name in `MODELS` (config.json's `architectures`, `bertjax convert --as`).
MODEL_CLASSES: dict[str, type[Model]] = {cls.spec.name: cls for cls in (
    BertModel, BertForPreTraining, BertForMaskedLM, BertForNextSentencePrediction,
    BertForSequenceClassification, BertForTokenClassification, BertForQuestionAnswering,
    BertForMultipleChoice, BertForReplacedTokenDetection)}


def model_class(name: str, model_type: str = "bert") -> type[Model]:
    """bertjax's class `name` (a row of `MODELS`) for a model of the family `model_type`: the
    bare encoder is the family's (ModernBertModel for a ModernBERT), every head class the same
    whatever the family."""
    if name == ModernBertModel.spec.name and FAMILIES.get(model_type, FAMILIES["bert"]).encoder \
            == "modernbert":
        return ModernBertModel
    return MODEL_CLASSES[name]
