"""bertjax: BERT in Flax NNX, with every transformers head, Hugging Face checkpoints in and out,
pre-training, fine-tuning and inference.

    import bertjax
    model, tokenizer = bertjax.from_pretrained("google-bert/bert-base-uncased")  # or a dir, a run
    bertjax.fill_mask(model, tokenizer, ["to be or not to [MASK]"])
    bertjax.save_pretrained(model, "out/", tokenizer)    # transformers loads it

One name per thing, flat: the model classes, loading and saving, the tokenizer, using a model
(`fill_mask`, `next_sentence_probability`, `embed`, `tag`, `answer`, ...) and fine-tuning
(`finetune`, `FinetuneConfig`, the task classes). Training pieces for your own loop are in
`bertjax.train`, data in `bertjax.data`, checkpoint formats in `bertjax.io`.

Importing `bertjax` (or `bertjax.config`) does not import JAX; each name loads its module on
first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bertjax.common.lazy import lazy_imports
from bertjax.config import PRESETS, BertConfig
from bertjax.config.heads import HEAD_CLASSES  # every BertFor* class (bertjax.config.heads.MODELS)
from bertjax.errors import InputError

if TYPE_CHECKING:  # the flat names, each imported on first use (`lazy_imports`)
    from bertjax.data.tokenizer import Tokenizer
    from bertjax.heads import (
        MODEL_CLASSES,
        BertForMaskedLM,
        BertForMultipleChoice,
        BertForNextSentencePrediction,
        BertForPreTraining,
        BertForQuestionAnswering,
        BertForReplacedTokenDetection,
        BertForSequenceClassification,
        BertForTokenClassification,
    )
    from bertjax.io.report import LoadReport
    from bertjax.io.source import ModelSource, locate
    from bertjax.jobs.finetune.config import FinetuneConfig
    from bertjax.jobs.finetune.job import FinetuneResult, finetune
    from bertjax.model import BertModel, BertOutput
    from bertjax.pretrained import checkpoint_class, from_pretrained, load_hf, save_pretrained
    from bertjax.tasks.classification import ClassificationTask
    from bertjax.tasks.multiple_choice import MultipleChoiceTask
    from bertjax.tasks.question_answering import QuestionAnsweringTask
    from bertjax.tasks.token_classification import TokenClassificationTask
    from bertjax.use.answer import answer
    from bertjax.use.attention import attention_maps
    from bertjax.use.embed import embed, nearest
    from bertjax.use.fill_mask import Prediction, fill_mask
    from bertjax.use.next_sentence import next_sentence_probability
    from bertjax.use.tag import tag

__getattr__, __dir__, _LAZY = lazy_imports(__name__, __file__)
__all__ = ["HEAD_CLASSES", "PRESETS", "BertConfig", "InputError", *_LAZY]
__version__ = "0.1.0"
