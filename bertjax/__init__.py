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

from bertjax.common.lazy import lazy_names
from bertjax.config import PRESETS, BertConfig
from bertjax.errors import InputError

# The head classes: every `BertFor*` class of Hugging Face transformers and ELECTRA's discriminator
# (the one list of their names; `bertjax.heads.MODEL_CLASSES` maps them, and BertModel, to the classes).
HEAD_CLASSES = ("BertForPreTraining", "BertForMaskedLM", "BertForNextSentencePrediction",
                "BertForSequenceClassification", "BertForTokenClassification",
                "BertForQuestionAnswering", "BertForMultipleChoice",
                "BertForReplacedTokenDetection")
_NAMES = {
    "BertModel": "bertjax.model", "BertOutput": "bertjax.model",
    "MODEL_CLASSES": "bertjax.heads", **dict.fromkeys(HEAD_CLASSES, "bertjax.heads"),
    **dict.fromkeys(("from_pretrained", "load_hf", "save_pretrained", "checkpoint_class"),
                    "bertjax.pretrained"),
    **dict.fromkeys(("locate", "ModelSource"), "bertjax.io.source"),
    "LoadReport": "bertjax.io.report",
    "Tokenizer": "bertjax.data.tokenizer",
    "fill_mask": "bertjax.use.fill_mask", "Prediction": "bertjax.use.fill_mask",
    "next_sentence_probability": "bertjax.use.next_sentence",
    "embed": "bertjax.use.embed", "nearest": "bertjax.use.embed",
    "attention_maps": "bertjax.use.attention", "tag": "bertjax.use.tag",
    "answer": "bertjax.use.answer",
    "finetune": "bertjax.jobs.finetune.job", "FinetuneResult": "bertjax.jobs.finetune.job",
    "FinetuneConfig": "bertjax.jobs.finetune.config",
    "ClassificationTask": "bertjax.tasks.classification",
    "TokenClassificationTask": "bertjax.tasks.token_classification",
    "QuestionAnsweringTask": "bertjax.tasks.question_answering",
    "MultipleChoiceTask": "bertjax.tasks.multiple_choice",
}

__all__ = ["HEAD_CLASSES", "PRESETS", "BertConfig", "InputError", *sorted(_NAMES)]
__version__ = "0.1.0"

__getattr__, __dir__ = lazy_names(__name__, _NAMES)
