"""BERT with a task head, in PyTorch: the reference mirror of `bertjax/heads.py`.

Same classes, same attribute names, same declarations (`base_model_prefix`, the class's row of
`bertjax.config.heads.MODELS` as `spec` and its heads as `head_modules`); logits float32 as
there; a ModernBERT config gets ModernBERT's encoder and heads' modules as there. Dropout follows
`.train()` / `.eval()`; packed rows as there.
Shapes: B batch, S sequence, H hidden, P masked positions, V vocabulary, C choices, K packed
sequences per row.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from bert_torch import inputs, numerics
from bert_torch.model import BertModel, BertOutput, LayerNorm, Linear, linear, present, take_rows
from bert_torch.modernbert import ModernBertClassifier, ModernBertMLMHead, ModernBertModel
from bertjax.config import QA_OUTPUTS, BertConfig
from bertjax.config.checks import check_family
from bertjax.config.heads import MODELS, ModelClass


def float32_linear(config: BertConfig, n_in: int, n_out: int) -> Linear:
    """A head's output layer: float32 compute, for float32 logits."""
    return linear(config.replace(dtype="float32"), n_in, n_out)


class BertMLMHead(nn.Module):
    """Dense + GELU + LayerNorm, then the decoder tied to the word embeddings plus its own bias."""

    def __init__(self, config: BertConfig):
        super().__init__()
        width = config.embedding_width  # ELECTRA's generator: to the embeddings' width
        self.transform = linear(config, config.hidden_size, width)
        self.layer_norm = LayerNorm(config, width=width)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        # transformers' RoBERTa and ELECTRA heads: GELU whatever hidden_act says
        self.activation = numerics.activation(config.family.mlm_activation or config.hidden_act)

    def forward(self, h: torch.Tensor, word_embeddings: nn.Embedding) -> torch.Tensor:
        h = self.layer_norm(self.activation(self.transform(h)))  # (B, P, H)
        # the decoder's products in float32 from compute-dtype operands (Flax: preferred f32)
        embedding = numerics.upcast(word_embeddings.weight.to(h.dtype))  # (V, H)
        return F.linear(numerics.upcast(h), embedding) + self.bias  # (B, P, V) float32


def modern(config: BertConfig) -> bool:
    """Whether `config`'s family has ModernBERT's encoder and heads (`bertjax.heads.modern`)."""
    return config.family.encoder == "modernbert"


class _WithEncoder(nn.Module):
    """What every head class shares: the encoder `bert`, its call, then the class's head
    (`_head`); each class of this module takes its row of `MODELS` by its name, as in
    `bertjax.heads`."""

    base_model_prefix: ClassVar[str] = "bert"
    spec: ClassVar[ModelClass]
    head_modules: ClassVar[tuple[str, ...]] = ()
    dropout: nn.Dropout  # the head's dropout, where its class has one

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__ == __name__ and not cls.__name__.startswith("_"):
            cls.spec = MODELS[cls.__name__]
            cls.head_modules = cls.spec.heads

    def __init__(self, config: BertConfig):
        super().__init__()
        check_family(self.spec, config)
        self.config = config
        self.bert = (ModernBertModel if modern(config) else BertModel)(
            config, add_pooling_layer=self.has_pooler(config))

    @classmethod
    def has_pooler(cls, config: BertConfig) -> bool:
        """Whether this class's encoder has the pooler, for a model of `config`'s family."""
        return cls.spec.pooled

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        *,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        sequence_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cls_positions: torch.Tensor | None = None,
    ) -> BertOutput:
        out = self.bert(input_ids, token_type_ids, attention_mask,
                        output_attentions=output_attentions,
                        output_hidden_states=output_hidden_states, sequence_ids=sequence_ids,
                        position_ids=position_ids, cls_positions=cls_positions)
        return self._head(out)

    def _head(self, out: BertOutput) -> BertOutput:
        """The encoder's output with this class's head's fields filled in."""
        raise NotImplementedError

    def _classify(self, head: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """x through the class's classifier `head`: BERT's dense layer after the class's
        dropout, or ModernBERT's head, which drops out after its norm."""
        if isinstance(head, ModernBertClassifier):
            return head(x)
        return head(self.dropout(numerics.upcast(x)))


class _MaskedLM(_WithEncoder):
    """The masked-LM classes: `mlm_logits` (and `sequence_output`) at `masked_positions`, the
    last layer computed at those rows, or at every position."""

    mlm_head: BertMLMHead | ModernBertMLMHead

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        masked_positions: torch.Tensor | None = None,
        **options: Any,
    ) -> BertOutput:
        if masked_positions is not None:
            inputs.check_masked_positions(input_ids, masked_positions)
        # at masked positions, the last layer computes those rows alone: (B, P, H) or (B, S, H)
        out = self.bert(input_ids, token_type_ids, attention_mask,
                        output_positions=masked_positions, **options)
        mlm_logits = self.mlm_head(out.sequence_output, self.bert.embeddings.word_embeddings)
        return self._head(dataclasses.replace(out, mlm_logits=mlm_logits))

    def _head(self, out: BertOutput) -> BertOutput:
        return out


class BertForPreTraining(_MaskedLM):
    """BERT with the masked-LM and next-sentence-prediction heads."""


    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.mlm_head = BertMLMHead(config)
        self.nsp_head = float32_linear(config, config.hidden_size, 2)

    def _head(self, out: BertOutput) -> BertOutput:
        pooled = numerics.upcast(present(out.pooled_output, "pooled_output"))
        return dataclasses.replace(out, nsp_logits=self.nsp_head(pooled))


class BertForMaskedLM(_MaskedLM):
    """BERT with the masked-LM head only (no pooler, no NSP head)."""


    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.mlm_head = (ModernBertMLMHead if modern(config) else BertMLMHead)(config)


class BertForNextSentencePrediction(_WithEncoder):
    """BERT with the next-sentence-prediction head on the pooled [CLS] output."""


    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.nsp_head = float32_linear(config, config.hidden_size, 2)

    def _head(self, out: BertOutput) -> BertOutput:
        pooled = numerics.upcast(present(out.pooled_output, "pooled_output"))
        return dataclasses.replace(out, nsp_logits=self.nsp_head(pooled))


class ClassificationHead(nn.Module):
    """RoBERTa's and ELECTRA's sequence classifier on the first token: dropout, dense, tanh
    (ELECTRA: GELU), dropout, `out_proj`; float32 (`bertjax.heads.ClassificationHead`)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = float32_linear(config, config.hidden_size, config.hidden_size)
        self.out_proj = float32_linear(config, config.hidden_size, config.num_labels)
        self.activation = numerics.head_activation(config.family.classifier_head)

    def forward(self, first: torch.Tensor, dropout: nn.Dropout) -> torch.Tensor:
        h = self.activation(self.dense(dropout(first)))  # (B, [K,] H)
        return self.out_proj(dropout(h))  # (B, [K,] num_labels)


class BertForSequenceClassification(_WithEncoder):
    """BERT with dropout and a dense layer on the pooled [CLS] output: (B, num_labels); a family
    with its own classifier head (RoBERTa's): no pooler, `ClassificationHead` on the first
    token."""


    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.classifier: nn.Module = (
            ClassificationHead(config) if config.family.classifier_head
            else ModernBertClassifier(config, config.num_labels) if modern(config)
            else float32_linear(config, config.hidden_size, config.num_labels))

    @classmethod
    def has_pooler(cls, config: BertConfig) -> bool:
        return not config.family.classifier_head

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        **options: Any,
    ) -> BertOutput:
        if not isinstance(self.classifier, ClassificationHead):  # on the pooled output: _head
            return super().forward(input_ids, token_type_ids, attention_mask, **options)
        out = self.bert(input_ids, token_type_ids, attention_mask, **options)
        first = first_tokens(out.sequence_output, options.get("cls_positions"))  # (B, [K,] H)
        logits = self.classifier(numerics.upcast(first), self.dropout)
        return dataclasses.replace(out, logits=logits)  # (B, [K,] num_labels)

    def _head(self, out: BertOutput) -> BertOutput:
        pooled = present(out.pooled_output, "pooled_output")  # (B, [K,] H)
        logits = self._classify(self.classifier, pooled)  # (B, [K,] num_labels)
        return dataclasses.replace(out, logits=logits)


def first_tokens(sequence_output: torch.Tensor, cls_positions: torch.Tensor | None
                 ) -> torch.Tensor:
    """Each sequence's first token (B, H), or packed rows' at `cls_positions` (B, K, H), an empty
    slot's zeros (`bertjax.heads.first_tokens`)."""
    if cls_positions is None:
        return sequence_output[:, 0]
    rows = take_rows(sequence_output, cls_positions.clamp(min=0))  # (B, K, H)
    return torch.where(cls_positions[:, :, None] >= 0, rows, torch.zeros_like(rows))


class BertForTokenClassification(_WithEncoder):
    """BERT with dropout and a dense layer on every token: (B, S, num_labels); no pooler."""


    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.token_classifier: nn.Module = (
            ModernBertClassifier(config, config.num_labels) if modern(config)
            else float32_linear(config, config.hidden_size, config.num_labels))

    def _head(self, out: BertOutput) -> BertOutput:
        logits = self._classify(self.token_classifier, out.sequence_output)  # (B, S, labels)
        return dataclasses.replace(out, logits=logits)


class BertForQuestionAnswering(_WithEncoder):
    """BERT with `qa_outputs` to start and end logits per token, each (B, S); no pooler."""


    def __init__(self, config: BertConfig):
        if config.num_labels != len(QA_OUTPUTS):
            config = config.replace(id2label=tuple(f"LABEL_{i}" for i in range(len(QA_OUTPUTS))))
        super().__init__(config)
        self.qa_outputs: nn.Module = (
            ModernBertClassifier(config, len(QA_OUTPUTS)) if modern(config)
            else float32_linear(config, config.hidden_size, len(QA_OUTPUTS)))

    def _head(self, out: BertOutput) -> BertOutput:
        logits = self.qa_outputs(numerics.upcast(out.sequence_output))  # (B, S, 2)
        return dataclasses.replace(out, start_logits=logits[..., 0], end_logits=logits[..., 1])


class BertForMultipleChoice(_WithEncoder):
    """BERT scoring each of C choices: inputs (B, C, S), or packed rows (B, S) with the choices'
    [CLS] at `cls_positions` (B, C) (an empty slot's logit the lowest float32); `logits` (B, C)."""


    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.choice_classifier: nn.Module = (
            ModernBertClassifier(config, 1) if modern(config)
            else float32_linear(config, config.hidden_size, 1))

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        **options: Any,
    ) -> BertOutput:
        if inputs.packed_choices(input_ids, options):
            out = super().forward(input_ids, token_type_ids, attention_mask, **options)
            logits = present(out.logits, "logits")[..., 0]  # (B, C, 1) -> (B, C)
            lowest = torch.full_like(logits, torch.finfo(torch.float32).min)
            return dataclasses.replace(out, logits=torch.where(options["cls_positions"] >= 0,
                                                               logits, lowest))
        flat, (B, C) = inputs.flatten_choices(input_ids, token_type_ids, attention_mask)
        out = super().forward(*flat, **options)
        logits = present(out.logits, "logits").reshape(B, C)  # (B * C, 1) -> (B, C)
        return dataclasses.replace(out, logits=logits)

    def _head(self, out: BertOutput) -> BertOutput:
        # (B * C, H) stacked, (B, C, H) packed -> (B * C, 1) or (B, C, 1)
        pooled = present(out.pooled_output, "pooled_output")
        return dataclasses.replace(out, logits=self._classify(self.choice_classifier, pooled))


class DiscriminatorHead(nn.Module):
    """ELECTRA's discriminator head (`bertjax.heads.DiscriminatorHead`): dense, the hidden
    activation, `dense_prediction` to one float32 logit per token."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = linear(config, config.hidden_size, config.hidden_size)
        self.dense_prediction = float32_linear(config, config.hidden_size, 1)
        self.activation = numerics.activation(config.hidden_act)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = numerics.upcast(self.activation(self.dense(h)))  # (B, S, H)
        return self.dense_prediction(h)[..., 0]  # (B, S, 1) -> (B, S)


class BertForReplacedTokenDetection(_WithEncoder):
    """ELECTRA's discriminator (transformers' ElectraForPreTraining): a logit per token that it
    was replaced, (B, S); no pooler. ELECTRA models only."""


    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.discriminator_predictions = DiscriminatorHead(config)

    def _head(self, out: BertOutput) -> BertOutput:
        return dataclasses.replace(out, logits=self.discriminator_predictions(out.sequence_output))
