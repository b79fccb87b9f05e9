"""bert_torch: the PyTorch reference that mirrors bertjax name for name. Imports no JAX."""

from bert_torch.model import (
    BertAttention,
    BertEmbeddings,
    BertForPreTraining,
    BertForSequenceClassification,
    BertLayer,
    BertMLMHead,
    BertModel,
    BertOutput,
    BertPooler,
    LayerNorm,
)
from bertjax.config import BertConfig

__all__ = [
    "BertAttention", "BertConfig", "BertEmbeddings", "BertForPreTraining",
    "BertForSequenceClassification", "BertLayer",
    "BertMLMHead", "BertModel", "BertOutput", "BertPooler", "LayerNorm",
]
