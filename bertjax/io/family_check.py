"""A checkpoint is what its config says: the weight names of a Hugging Face directory belong to
the family its config.json's `model_type` names.

Each family spells some names its own way (`bertjax.io.names.HF_FAMILY_NAMES`): the encoder's
prefix (`bert.`, `roberta.`, `distilbert.`, `electra.`), its heads (BERT's `cls.`, RoBERTa's
`lm_head.`, ...), DistilBERT's bare `transformer.layer.` against the others' `encoder.layer.`.
A weight named in another family's way is refused before anything is built: BERT's weights
under a RoBERTa config.json would otherwise run with RoBERTa's position offset, silently. Names
every family shares (`embeddings.`, `classifier.`, `qa_outputs.`) decide nothing.

No framework import.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from bertjax.errors import InputError
from bertjax.io.names import HF_FAMILY_NAMES

# names a family's checkpoints have beyond its table's prefixes: BERT's heads, ELECTRA's
# discriminator, and the bare encoders' layers
_OWN_EXTRA = {"bert": ("cls.", "encoder.layer."), "roberta": ("encoder.layer.",),
              "xlm-roberta": ("encoder.layer.",), "distilbert": ("transformer.layer.",),
              "electra": ("discriminator_predictions.", "encoder.layer.")}
# heads every family's checkpoints name alike, even where a family's table renames what is
# under them (a ModernBERT's `classifier.` is its classifier head's last layer)
_SHARED = ("classifier.", "qa_outputs.")


@functools.cache
def _marks() -> dict[str, tuple[str, ...]]:
    """model_type -> the name prefixes its checkpoints may have that some other family's lack."""
    return {model_type: (names.prefix, *(theirs for theirs, _ in names.heads
                                         if not theirs.startswith(_SHARED)),
                         *_OWN_EXTRA.get(model_type, ()))
            for model_type, names in HF_FAMILY_NAMES.items()}


def _claims(name: str) -> set[str]:
    """The families whose checkpoints may hold a weight called `name` (all: a shared name)."""
    owners = {mt for mt, prefixes in _marks().items() if name.startswith(prefixes)}
    return owners or set(_marks())


def check_weights_family(names: Iterable[str], model_type: str, config_file: str) -> None:
    """An InputError naming `config_file`'s `model_type` and the family the weights `names`
    belong to, if some of them are named in another family's way only."""
    foreign = sorted(n for n in names if model_type not in _claims(n))
    if not foreign:
        return
    owners = sorted(set.intersection(*(_claims(n) for n in foreign)))
    shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
    others = " or ".join(", ".join(owners).rsplit(", ", 1))
    types = " or ".join(", ".join(repr(t) for t in owners).rsplit(", ", 1))
    raise InputError(
        f"{config_file} says model_type {model_type!r}, but the weights beside it have names "
        f"only {others} checkpoints have ({shown}): the config and the weights are of different "
        f"families (transformers would call every such weight unexpected); put the config.json "
        f"that came with these weights beside them (model_type {types}), or the weights that "
        "came with this config")
