"""The whole name mapping between bertjax, bert_torch and Hugging Face, as small tables.

bertjax and bert_torch share module paths, so a parameter's PyTorch name is its Flax path joined
by dots with the leaf renamed by `LEAF_RENAMES`. Hugging Face names differ in module paths too;
`HF_ENCODER_RENAMES` and `HF_HEAD_RENAMES` rewrite our PyTorch names into theirs and back, by
pattern, under any encoder prefix; the other families' names (`roberta.`, DistilBERT's
`transformer.layer.{i}.attention.q_lin`, ELECTRA's `generator_lm_head`, ModernBERT's
`model.layers.{i}.attn.Wqkv` and `head.dense`) are read into BERT's and written back from them by
`HF_FAMILY_NAMES`. This module imports no framework and knows no model class.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from bertjax.config.heads import HEADS, MODELS, Head, classifier_of

# Flax leaf -> (PyTorch leaf, transposed?). Flax kernels are (in, out); torch weights (out, in).
LEAF_RENAMES: dict[str, tuple[str, bool]] = {
    "kernel": ("weight", True),
    "scale": ("weight", False),
    "embedding": ("weight", False),
    "bias": ("bias", False),
}

# Checkpoints (a `bertjax pretrain` run's, Hugging Face's) keep the encoder's weights under this
# prefix and the heads beside it; a bare BertModel checkpoint has no prefix. A model class says
# where its own encoder is (`base_model_prefix`), so `checkpoint_name` maps any class onto this.
BASE_PREFIX = "bert."

# Our PyTorch names -> Hugging Face names, as templates: `{i}` is a layer index; an entry ending
# in "." renames every name under it, any other entry one name. First match wins. Encoder names
# are relative to the base prefix (the same table serves bare BertModel checkpoints); names not
# matched (word/position/token-type embeddings, pooler.dense, classifier) are the same in both.
HF_ENCODER_RENAMES: list[tuple[str, str]] = [
    ("embeddings.layer_norm.", "embeddings.LayerNorm."),
    ("layers.{i}.attention.query.", "encoder.layer.{i}.attention.self.query."),
    ("layers.{i}.attention.key.", "encoder.layer.{i}.attention.self.key."),
    ("layers.{i}.attention.value.", "encoder.layer.{i}.attention.self.value."),
    ("layers.{i}.attention.output.", "encoder.layer.{i}.attention.output.dense."),
    ("layers.{i}.attention_norm.", "encoder.layer.{i}.attention.output.LayerNorm."),
    ("layers.{i}.intermediate.", "encoder.layer.{i}.intermediate.dense."),
    ("layers.{i}.output.", "encoder.layer.{i}.output.dense."),
    ("layers.{i}.output_norm.", "encoder.layer.{i}.output.LayerNorm."),
]
# The heads' names where Hugging Face's differ (`bertjax.config.heads.HEADS`): `mlm_head.` is
# under `cls.predictions.`, and three heads are `classifier.` there (the way back goes by the
# checkpoint's architecture: `classifier_of`).
HF_HEAD_RENAMES: list[tuple[str, str]] = [pair for head in HEADS.values() for pair in head.hf_names]
HF_CLASSIFIER = "classifier."

# The other families' Hugging Face names where they differ from BERT's: a checkpoint's names are
# read into BERT's (then ours, by the tables above) and written back the same way, so the tables
# above serve every family. Per family: where its encoder is (for BERT's `bert.`), its encoder's
# names relative to that (`{i}` a layer index), and its heads', as (theirs, BERT's) prefixes.
# A ModernBERT's encoder names have no BERT counterpart: its table gives ours (`bertjax.modernbert`
# names its layers as transformers does, its weights' leaves lower case), which the tables above
# leave as they are.
@dataclasses.dataclass(frozen=True)
class FamilyNames:
    prefix: str = "bert."
    encoder: tuple[tuple[str, str], ...] = ()
    heads: tuple[tuple[str, str], ...] = ()
    # heads named otherwise in the checkpoints of the classes with one of ours (`HEADS`'
    # attribute -> (theirs, BERT's) prefixes), read before `heads`: ModernBERT's `head.` is the
    # masked LM's transform there, a classifier's dense layer elsewhere, and its question
    # answering's `classifier.` is BERT's `qa_outputs.`
    class_heads: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()

    def heads_of(self, architecture: str | None) -> tuple[tuple[str, str], ...]:
        """The heads' names of a checkpoint of `architecture` (bertjax's class name): those of
        its class's heads first."""
        model = MODELS.get(architecture or "")
        own = dict(self.class_heads)
        return tuple(pair for head in (model.heads if model else ()) for pair in own.get(head, ())
                     ) + self.heads


_ROBERTA_NAMES = FamilyNames("roberta.", heads=(
    ("lm_head.dense.", "cls.predictions.transform.dense."),
    ("lm_head.layer_norm.", "cls.predictions.transform.LayerNorm."),
    ("lm_head.decoder.", "cls.predictions.decoder."),
    ("lm_head.bias", "cls.predictions.bias"),
))
HF_FAMILY_NAMES: dict[str, FamilyNames] = {
    "bert": FamilyNames(),
    "roberta": _ROBERTA_NAMES,
    "xlm-roberta": _ROBERTA_NAMES,
    "distilbert": FamilyNames("distilbert.", encoder=tuple(
        (f"transformer.layer.{{i}}.{theirs}", f"encoder.layer.{{i}}.{bert}") for theirs, bert in (
            ("attention.q_lin.", "attention.self.query."),
            ("attention.k_lin.", "attention.self.key."),
            ("attention.v_lin.", "attention.self.value."),
            ("attention.out_lin.", "attention.output.dense."),
            ("sa_layer_norm.", "attention.output.LayerNorm."),
            ("ffn.lin1.", "intermediate.dense."),
            ("ffn.lin2.", "output.dense."),
            ("output_layer_norm.", "output.LayerNorm."),
        )), heads=(
        ("vocab_transform.", "cls.predictions.transform.dense."),
        ("vocab_layer_norm.", "cls.predictions.transform.LayerNorm."),
        ("vocab_projector.weight", "cls.predictions.decoder.weight"),
        ("vocab_projector.bias", "cls.predictions.bias"),
        ("pre_classifier.", "bert.pooler.dense."),  # the classifiers' pooler, + ReLU
    )),
    "electra": FamilyNames("electra.", heads=(
        ("generator_predictions.dense.", "cls.predictions.transform.dense."),
        ("generator_predictions.LayerNorm.", "cls.predictions.transform.LayerNorm."),
        ("generator_lm_head.weight", "cls.predictions.decoder.weight"),
        ("generator_lm_head.bias", "cls.predictions.bias"),
        ("sequence_summary.summary.", "bert.pooler.dense."),  # multiple choice's, + GELU
    )),
    "modernbert": FamilyNames("model.", encoder=(
        ("embeddings.tok_embeddings.", "embeddings.word_embeddings."),
        ("layers.{i}.attn.Wqkv.", "layers.{i}.attn.wqkv."),
        ("layers.{i}.attn.Wo.", "layers.{i}.attn.wo."),
        ("layers.{i}.mlp.Wi.", "layers.{i}.mlp.wi."),
        ("layers.{i}.mlp.Wo.", "layers.{i}.mlp.wo."),
    ), heads=(  # the classifiers' head: `classifier_of` says whose (sequence, token, choice)
        ("head.dense.", "classifier.dense."),
        ("head.norm.", "classifier.norm."),
        ("classifier.", "classifier.out_proj."),
        ("decoder.bias", "cls.predictions.bias"),
        ("decoder.weight", "cls.predictions.decoder.weight"),
    ), class_heads=(
        ("mlm_head", (("head.dense.", "cls.predictions.transform.dense."),
                      ("head.norm.", "cls.predictions.transform.LayerNorm."))),
        ("qa_outputs", (("head.", "qa_outputs."), ("classifier.", "qa_outputs.out_proj."))),
    )),
}
# Hugging Face keys that carry no parameter of ours: a buffer, and the tied decoder.
HF_DERIVED_KEYS = (
    "bert.embeddings.position_ids",
    "cls.predictions.decoder.weight",  # tied to bert.embeddings.word_embeddings.weight
    "cls.predictions.decoder.bias",  # tied to cls.predictions.bias
)


def head_prefix(head: Head) -> str:
    """Where a head's weights are in a checkpoint: on the encoder (the pooler) or beside it."""
    return f"{BASE_PREFIX if head.on_encoder else ''}{head.attribute}."


# Checkpoint names of every head some bertjax class has: a checkpoint may carry one the requested
# class lacks (left out). Which heads a class has, and so may initialise fresh when a checkpoint
# lacks them, the class itself declares (`head_modules`); every other weight is required.
HEAD_PREFIXES = tuple(head_prefix(h) for h in HEADS.values())
POOLER = head_prefix(HEADS["pooler"])  # HF's MaskedLM, token and QA classes lack it
# Where a Hugging Face checkpoint's names start: the encoder, BERT's `cls.` heads, and the heads
# named as ours beside them (`classifier.`, `qa_outputs.`, ...); any other name is the encoder's
# without its prefix.
_HF_ROOTS = (BASE_PREFIX, "cls.", *(f"{h.attribute}." for h in HEADS.values()
                                    if not h.hf_names and not h.on_encoder))


def torch_name(flax_path: Iterable[object]) -> tuple[str, bool]:
    """('bert', 'layers', 0, 'attention', 'query', 'kernel') -> ('bert.layers.0...weight', True)."""
    *modules, leaf = (str(p) for p in flax_path)
    if leaf not in LEAF_RENAMES:
        raise ValueError(f"no PyTorch name for Flax parameter leaf {leaf!r} at {flax_path}")
    name, transposed = LEAF_RENAMES[leaf]
    return ".".join([*modules, name]), transposed


_Rules = list[tuple[re.Pattern[str], str]]


def _compile(table: list[tuple[str, str]], reverse: bool) -> _Rules:
    """Templates -> (anchored pattern, replacement) pairs, ours -> Hugging Face or back."""
    rules = []
    for ours, theirs in table:
        source, target = (theirs, ours) if reverse else (ours, theirs)
        pattern = re.escape(source).replace(re.escape("{i}"), r"(\d+)")
        rules.append((re.compile(f"^{pattern}" + ("" if source.endswith(".") else "$")),
                      target.replace("{i}", r"\1")))
    return rules


_TO_HF = (_compile(HF_ENCODER_RENAMES, False), _compile(HF_HEAD_RENAMES, False))
_FROM_HF = (_compile(HF_ENCODER_RENAMES, True),
            _compile([e for e in HF_HEAD_RENAMES if e[1] != HF_CLASSIFIER], True))


def _rename(name: str, base_prefix: str, tables: tuple[_Rules, _Rules]) -> str:
    encoder, heads = tables
    if name.startswith(base_prefix):
        rest = name[len(base_prefix):]
        return base_prefix + next((p.sub(r, rest, count=1) for p, r in encoder if p.match(rest)), rest)
    return next((p.sub(r, name, count=1) for p, r in heads if p.match(name)), name)


def to_hf_name(name: str, base_prefix: str = BASE_PREFIX) -> str:
    """Our PyTorch name -> the Hugging Face name. `base_prefix` is where the encoder's weights are
    (`""` for a bare BertModel: every name is the encoder's)."""
    return _rename(name, base_prefix, _TO_HF)


def from_hf_name(name: str, base_prefix: str = BASE_PREFIX, architecture: str | None = None) -> str:
    """A Hugging Face name -> ours (the inverse of `to_hf_name`); names of neither table pass.
    `classifier.*` is the head of that name of `architecture` (`classifier_of`)."""
    if name.startswith(HF_CLASSIFIER):
        return f"{classifier_of(architecture)}.{name[len(HF_CLASSIFIER):]}"
    return _rename(name, base_prefix, _FROM_HF)


def checkpoint_name(name: str, base_model_prefix: str) -> str:
    """A model class's parameter name -> its name in a checkpoint (the encoder under
    `BASE_PREFIX`), given the class's `base_model_prefix` (`""`: the class is the encoder)."""
    own = f"{base_model_prefix}." if base_model_prefix else ""
    if not name.startswith(own):
        return name  # a head
    return BASE_PREFIX + name[len(own):]


def normalise_hf_key(key: str) -> str:
    """Accept the variants found in the wild: no `bert.` prefix, TF-era gamma/beta leaves."""
    if not key.startswith(_HF_ROOTS):
        key = "bert." + key
    if key.endswith(".gamma"):
        key = key[: -len("gamma")] + "weight"
    elif key.endswith(".beta"):
        key = key[: -len("beta")] + "bias"
    return key


_FAMILY_RULES = {model_type: (_compile(list(names.encoder), True),
                              _compile(list(names.encoder), False))
                 for model_type, names in HF_FAMILY_NAMES.items()}


def _swap(name: str, table: Iterable[tuple[str, str]], reverse: bool) -> str | None:
    """`name` with the first matching prefix of `table` swapped (BERT's to theirs, `reverse`:
    the longest matching one), None if none matches."""
    pairs = [(bert, theirs) if reverse else (theirs, bert) for theirs, bert in table]
    found = [(source, target) for source, target in pairs if name.startswith(source)]
    if not found:
        return None
    source, target = max(found, key=lambda pair: len(pair[0])) if reverse else found[0]
    return target + name[len(source):]


def _encoder_rules(rules: _Rules, name: str) -> str:
    return next((p.sub(r, name, count=1) for p, r in rules if p.match(name)), name)


def from_family_name(name: str, model_type: str, architecture: str | None = None) -> str:
    """A Hugging Face name of a `model_type` checkpoint of `architecture` (bertjax's class name)
    -> BERT's name for it (`roberta.encoder...` -> `bert.encoder...`,
    `distilbert.transformer.layer.0.ffn.lin1.` -> `bert.encoder.layer.0.intermediate.dense.`,
    `lm_head.dense.` -> `cls.predictions...`); a bare encoder's name (no prefix) stays bare."""
    names = HF_FAMILY_NAMES[model_type]
    head = _swap(name, names.heads_of(architecture), reverse=False)
    if head is not None:
        return head
    to_bert = _FAMILY_RULES[model_type][1]
    if name.startswith(names.prefix):
        return BASE_PREFIX + _encoder_rules(to_bert, name[len(names.prefix):])
    return _encoder_rules(to_bert, name)


def to_family_name(name: str, model_type: str) -> str:
    """BERT's Hugging Face name -> the `model_type` family's (the inverse of
    `from_family_name`)."""
    names = HF_FAMILY_NAMES[model_type]
    head = _swap(name, names.heads + tuple(pair for _, table in names.class_heads
                                           for pair in table), reverse=True)
    if head is not None:
        return head
    to_family = _FAMILY_RULES[model_type][0]
    if name.startswith(BASE_PREFIX):
        return names.prefix + _encoder_rules(to_family, name[len(BASE_PREFIX):])
    return _encoder_rules(to_family, name)
