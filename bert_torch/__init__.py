"""bert_torch: the PyTorch reference that mirrors bertjax name for name. Imports no JAX."""

from bert_torch.heads import (
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForNextSentencePrediction,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForReplacedTokenDetection,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertMLMHead,
)
from bert_torch.model import (
    BertAttention,
    BertEmbeddings,
    BertLayer,
    BertModel,
    BertOutput,
    BertPooler,
    LayerNorm,
)
from bert_torch.modernbert import ModernBertModel
from bertjax.config import BertConfig

__all__ = [
    "BertAttention", "BertConfig", "BertEmbeddings", "BertForMaskedLM", "BertForMultipleChoice",
    "BertForNextSentencePrediction", "BertForPreTraining", "BertForQuestionAnswering",
    "BertForReplacedTokenDetection", "BertForSequenceClassification",
    "BertForTokenClassification", "BertLayer", "BertMLMHead",
    "BertModel", "BertOutput", "BertPooler", "LayerNorm", "ModernBertModel",
]
