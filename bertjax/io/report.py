"""What loading a checkpoint did, as data: the class built, what was read and which heads came
from the weights, were freshly initialised or were left out. Loaders return it, so a caller (the
command line's summaries, a user's script) reads fields instead of matching log or warning text.

No framework import.
"""

from __future__ import annotations

import dataclasses
from typing import Any


class FreshHeadsWarning(UserWarning):
    """A load initialised heads the checkpoint has no weights for (`LoadReport.initialised_heads`):
    their outputs mean nothing until they are trained. Filter it by this category, e.g. when
    fine-tuning starts from exactly such a head."""


@dataclasses.dataclass(frozen=True)
class LoadReport:
    """One load: `from_pretrained(..., output_loading_info=True)` and `load_hf(...)` return it."""

    model_class: str  # the bertjax class built, e.g. "BertForSequenceClassification"
    path: str = ""  # what was given: a directory, a run directory or a Hub id
    format: str = ""  # "model.safetensors", "pytorch_model.bin", "flax_model.msgpack", ...
    directory: str = ""  # the local directory read (a Hub id's cached snapshot)
    loaded_heads: tuple[str, ...] = ()  # heads of the class whose weights were in the checkpoint
    initialised_heads: tuple[str, ...] = ()  # heads the checkpoint lacks: fresh from `seed`
    left_out_heads: tuple[str, ...] = ()  # heads in the checkpoint the class has no place for
    seed: int = 0  # the seed of the initialised heads
    step: int | None = None  # a run's checkpoint step that was read
    skipped_steps: tuple[int, ...] = ()  # a run's damaged steps passed over for `step`

    def replace(self, **changes: Any) -> LoadReport:
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
