"""The model classes as data: what each bertjax class holds, how checkpoints name its heads and
what a load needs to build it, one row per class (`MODELS`) and per head (`HEADS`).

Both trees read these rows: `bertjax.heads` and `bert_torch.heads` give each class its row
(`spec`) and its heads (`head_modules`); `bertjax.io.names` derives the Hugging Face names of the
heads and the output fields parity compares; `bertjax.io`, `bertjax.runs`, the jobs and `parity`
ask a class's row, never its name. Adding a head is a row here plus its module in each tree.

The names are BERT's (transformers' `BertFor*`); another family's class of the same role is
named by its `Family` (`bertjax.config.families`: `RobertaForMaskedLM`, ...). No framework import.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from bertjax.config import BertConfig


@dataclasses.dataclass(frozen=True)
class Head:
    """The weights of one head: the attribute holding them on a model class and, where they
    differ from ours, their names in Hugging Face's BERT checkpoints as (ours, theirs) prefixes.
    The pooler sits on the encoder; every other head beside it."""

    attribute: str
    hf_names: tuple[tuple[str, str], ...] = ()
    on_encoder: bool = False


HEADS: dict[str, Head] = {h.attribute: h for h in (
    Head("pooler", on_encoder=True),  # the encoder's one head (HF's masked LM, token, QA lack it)
    Head("mlm_head", (("mlm_head.transform.", "cls.predictions.transform.dense."),
                      ("mlm_head.layer_norm.", "cls.predictions.transform.LayerNorm."),
                      ("mlm_head.bias", "cls.predictions.bias"))),
    Head("nsp_head", (("nsp_head.", "cls.seq_relationship."),)),
    # Hugging Face calls three heads `classifier`: the way back goes by the checkpoint's
    # architecture (`classifier_of`)
    Head("classifier"),
    Head("token_classifier", (("token_classifier.", "classifier."),)),
    Head("qa_outputs"),
    Head("choice_classifier", (("choice_classifier.", "classifier."),)),
    Head("discriminator_predictions"),  # ELECTRA's replaced-token detection
    # the masked LM an ELECTRA pre-training run trains beside its discriminator (sharing its
    # embeddings): in a run's checkpoints, where a load of the discriminator leaves it out
    Head("generator"),
)}


def _fine_tune(task: str, cls: str) -> str:
    flag = f"--task {task} " if task else ""
    return (f"fine-tune one first: `bertjax finetune MODEL {flag}--output-dir DIR ...` writes a "
            f"{cls} to DIR/model; pass that")


@dataclasses.dataclass(frozen=True)
class ModelClass:
    """One bertjax model class: its heads (attributes of `HEADS`, in construction order), whether
    its encoder has the pooler (the family may change that: `bertjax.heads`), its outputs and
    transformers' names for them, and which checkpoints hold all its heads (`made_by`: the fix
    named when weights lack one)."""

    name: str
    heads: tuple[str, ...]
    outputs: tuple[tuple[str, str], ...]  # (our output field, transformers' field)
    made_by: str = ""
    pooled: bool = True
    next_sentence: bool = False  # a head only families pre-trained with NSP have
    families: tuple[str, ...] = ()  # the only families that have this class, if any
    choices: bool = False  # inputs (B, C, S): one row per choice
    pretrained: bool = False  # its heads come from pre-training (not from fine-tuning)

    @property
    def masked_lm(self) -> bool:
        """Whether the class has the masked-LM head (its call takes `masked_positions`)."""
        return "mlm_head" in self.heads

    @property
    def pretraining(self) -> bool:
        """Whether the class trains BERT's whole pre-training loss (MLM + NSP)."""
        return self.masked_lm and "nsp_head" in self.heads

    @property
    def hf_outputs(self) -> dict[str, str]:
        """Our output field -> transformers' name for it."""
        return dict(self.outputs)

    @property
    def checkpoint_heads(self) -> tuple[str, ...]:
        """Every head a checkpoint of this class holds, the encoder's pooler included."""
        return (("pooler",) if self.pooled and "pooler" not in self.heads else ()) + self.heads

    def fix_for_missing_heads(self) -> str:
        """How to get weights with every head of this class."""
        return self.made_by or (
            f"pass a checkpoint of a {self.name} that has them (a Hugging Face directory whose "
            f"config.json names {self.name}, or its transformers-v4 Flax checkpoint)")


ENCODER = "BertModel"
PRETRAINING = "BertForPreTraining"
MASKED_LM = "BertForMaskedLM"
DISCRIMINATOR = "BertForReplacedTokenDetection"
_LOGITS = (("logits", "logits"),)

MODELS: dict[str, ModelClass] = {m.name: m for m in (
    ModelClass(ENCODER, ("pooler",), (("sequence_output", "last_hidden_state"),
                                      ("pooled_output", "pooler_output")),
               "pass a `bertjax pretrain` run directory or a Hugging Face BertModel / "
               "BertForPreTraining checkpoint that has them", pretrained=True),
    ModelClass(PRETRAINING, ("mlm_head", "nsp_head"),
               (("mlm_logits", "prediction_logits"), ("nsp_logits", "seq_relationship_logits")),
               "pre-train one with `bertjax pretrain` (pass its run directory) or pass a Hugging "
               "Face BertForPreTraining checkpoint", next_sentence=True, pretrained=True),
    ModelClass(MASKED_LM, ("mlm_head",), (("mlm_logits", "logits"),),
               "pass a `bertjax pretrain` run directory or a Hugging Face BertForMaskedLM / "
               "BertForPreTraining checkpoint", pooled=False, pretrained=True),
    ModelClass("BertForNextSentencePrediction", ("nsp_head",), (("nsp_logits", "logits"),),
               "pass a `bertjax pretrain` run directory or a Hugging Face "
               "BertForNextSentencePrediction / BertForPreTraining checkpoint", next_sentence=True,
               pretrained=True),
    ModelClass("BertForSequenceClassification", ("classifier",), _LOGITS,
               _fine_tune("", "BertForSequenceClassification")),
    ModelClass("BertForTokenClassification", ("token_classifier",), _LOGITS,
               _fine_tune("token-classification", "BertForTokenClassification"), pooled=False),
    ModelClass("BertForQuestionAnswering", ("qa_outputs",),
               (("start_logits", "start_logits"), ("end_logits", "end_logits")),
               _fine_tune("question-answering", "BertForQuestionAnswering"), pooled=False),
    ModelClass("BertForMultipleChoice", ("choice_classifier",), _LOGITS,
               _fine_tune("multiple-choice", "BertForMultipleChoice"), choices=True),
    ModelClass(DISCRIMINATOR, ("discriminator_predictions",), _LOGITS,
               "pre-train one with `bertjax pretrain --train.objective electra` (pass its run "
               "directory) or pass a Hugging Face ElectraForPreTraining checkpoint",
               pooled=False, families=("electra",), pretrained=True),
)}
# The classes with a task head (all but the bare encoder), in `MODELS` order.
HEAD_CLASSES = tuple(name for name in MODELS if name != ENCODER)


class Model(Protocol):
    """What code that takes a model class as an argument (checkpoint formats, the run schema,
    the jobs, `parity`) may rely on: the class's row, its heads, where its encoder is, and a
    model's config. Every class of `bertjax.heads` and `bertjax.model` is one."""

    base_model_prefix: ClassVar[str]
    spec: ClassVar[ModelClass]
    head_modules: ClassVar[tuple[str, ...]]
    config: BertConfig

    def __init__(self, config: BertConfig, *, rngs: Any) -> None: ...

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


def pretraining_class(next_sentence: bool) -> str:
    """The class pre-training trains: BERT's MLM + NSP, or the masked LM alone."""
    return PRETRAINING if next_sentence else MASKED_LM


def classifier_of(architecture: str | None) -> str:
    """Which of our heads a Hugging Face checkpoint's `classifier.*` weights are, by the class
    its config.json names (token classification and multiple choice call theirs `classifier`
    too); any other architecture, or none, holds the sequence classifier."""
    model = MODELS.get(architecture or "")
    for head in model.heads if model else ():
        if dict(HEADS[head].hf_names).get(f"{head}.") == "classifier.":
            return head
    return "classifier"


def class_with_head(head: str) -> str:
    """The first class (in `MODELS` order) with `head`: what a message suggests loading."""
    return next(name for name, model in MODELS.items() if head in model.heads)
