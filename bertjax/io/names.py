"""The whole name mapping between bertjax, bert_torch and Hugging Face, as two small tables.

bertjax and bert_torch share module paths, so a parameter's PyTorch name is its Flax path joined
by dots with the leaf renamed by `LEAF_RENAMES`. Hugging Face names differ in module paths too;
`HF_RENAMES` rewrites our PyTorch names into theirs. This module imports no framework.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Flax leaf -> (PyTorch leaf, transposed?). Flax kernels are (in, out); torch weights (out, in).
LEAF_RENAMES: dict[str, tuple[str, bool]] = {
    "kernel": ("weight", True),
    "scale": ("weight", False),
    "embedding": ("weight", False),
    "bias": ("bias", False),
}

# Our PyTorch name prefix -> Hugging Face BertForPreTraining prefix (first match wins).
# Names not matched (word/position/token-type embeddings, pooler.dense) are the same in both.
HF_RENAMES: list[tuple[str, str]] = [
    (r"^bert\.embeddings\.layer_norm\.", "bert.embeddings.LayerNorm."),
    (r"^bert\.layers\.(\d+)\.attention\.(query|key|value)\.",
     r"bert.encoder.layer.\1.attention.self.\2."),
    (r"^bert\.layers\.(\d+)\.attention\.output\.", r"bert.encoder.layer.\1.attention.output.dense."),
    (r"^bert\.layers\.(\d+)\.attention_norm\.", r"bert.encoder.layer.\1.attention.output.LayerNorm."),
    (r"^bert\.layers\.(\d+)\.intermediate\.", r"bert.encoder.layer.\1.intermediate.dense."),
    (r"^bert\.layers\.(\d+)\.output\.", r"bert.encoder.layer.\1.output.dense."),
    (r"^bert\.layers\.(\d+)\.output_norm\.", r"bert.encoder.layer.\1.output.LayerNorm."),
    (r"^mlm_head\.transform\.", "cls.predictions.transform.dense."),
    (r"^mlm_head\.layer_norm\.", "cls.predictions.transform.LayerNorm."),
    (r"^mlm_head\.bias$", "cls.predictions.bias"),
    (r"^nsp_head\.", "cls.seq_relationship."),
]

# Hugging Face keys that carry no parameter of ours: a buffer, and the tied decoder.
HF_DERIVED_KEYS = (
    "bert.embeddings.position_ids",
    "cls.predictions.decoder.weight",  # tied to bert.embeddings.word_embeddings.weight
    "cls.predictions.decoder.bias",  # tied to cls.predictions.bias
)
# Our PyTorch names of the heads: a checkpoint may lack them (they are then initialised fresh) or
# carry ones the requested class does not have (left out); every other weight is required.
HEAD_PREFIXES = ("bert.pooler.", "mlm_head.", "nsp_head.", "classifier.")
# Hugging Face heads bertjax has no class for (BertForQuestionAnswering): left out on import.
HF_FOREIGN_HEAD_PREFIXES = ("qa_outputs.",)
# Classes whose checkpoints hold the sequence classifier; another class's `classifier.*`
# (BertForTokenClassification, BertForMultipleChoice) is a different head under the same name.
HF_SEQUENCE_CLASSIFIERS = ("BertForSequenceClassification",)
# A bare BertModel's names are its BertForPreTraining names without this prefix.
BARE_PREFIX = "bert."


def torch_name(flax_path: Iterable[object]) -> tuple[str, bool]:
    """('bert', 'layers', 0, 'attention', 'query', 'kernel') -> ('bert.layers.0...weight', True)."""
    *modules, leaf = (str(p) for p in flax_path)
    if leaf not in LEAF_RENAMES:
        raise ValueError(f"no PyTorch name for Flax parameter leaf {leaf!r} at {flax_path}")
    name, transposed = LEAF_RENAMES[leaf]
    return ".".join([*modules, name]), transposed


def to_hf_name(name: str) -> str:
    """Our PyTorch parameter name -> Hugging Face BertForPreTraining name."""
    for pattern, replacement in HF_RENAMES:
        new, count = re.subn(pattern, replacement, name, count=1)
        if count:
            return new
    return name


def normalise_hf_key(key: str) -> str:
    """Accept the variants found in the wild: no `bert.` prefix, TF-era gamma/beta leaves."""
    if not key.startswith(("bert.", "cls.", "classifier.", *HF_FOREIGN_HEAD_PREFIXES)):
        key = "bert." + key
    if key.endswith(".gamma"):
        key = key[: -len("gamma")] + "weight"
    elif key.endswith(".beta"):
        key = key[: -len("beta")] + "bias"
    return key
