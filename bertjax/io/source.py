"""A MODEL argument resolved once: `locate(model)` turns a directory, a Hub id or a `bertjax
pretrain` run directory into a `ModelSource` that every loader takes, so a path is resolved
(and the Hub asked) once and config.json is read once, however many questions follow (which
class the checkpoint is, its weights, its tokenizer).

    source = locate("google-bert/bert-base-uncased")   # or a directory, a run
    source.kind, source.directory, source.architecture
    model, tokenizer = bertjax.from_pretrained(source)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bertjax.errors import InputError
from bertjax.io.hf import CONFIG, architecture_in, read_config_json, weights_format
from bertjax.io.hub import resolve_model
from bertjax.runs.layout import RunDir

__all__ = ["HUGGING_FACE", "RUN", "ModelSource", "locate"]

RUN, HUGGING_FACE = "bertjax pretrain run", "Hugging Face directory"


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """Where a model is and what it holds, found once."""

    given: str  # what was passed: a directory, a run directory or a Hub id
    directory: Path  # the local directory (a Hub id's cached snapshot)
    kind: str  # RUN or HUGGING_FACE
    config: Mapping[str, Any] | None = None  # config.json as read (Hugging Face directories)

    @property
    def architecture(self) -> str | None:
        """The class config.json names (`architectures`; a v4 `FlaxBert*` name as its class)."""
        return None if self.config is None else architecture_in(self.config)

    @property
    def weights(self) -> str:
        """The weights file read: a run's checkpoints, or a Hugging Face directory's format."""
        return RUN if self.kind == RUN else weights_format(self.directory) or ""


def locate(model: str | Path | ModelSource, *, revision: str | None = None) -> ModelSource:
    """`model` resolved: a `ModelSource` as it is, else the local directory of a path or Hub id
    (at `revision`), which holds a run (run_config.json) or a Hugging Face model (config.json,
    read here); otherwise an InputError naming what to pass."""
    if isinstance(model, ModelSource):
        return model
    directory = resolve_model(model, revision=revision)
    if not directory.exists():
        raise InputError(
            f"model {model} does not exist; pass a Hugging Face BERT directory (config.json + "
            "model.safetensors + tokenizer.json/vocab.txt), a Hub id (organisation/name) or a "
            "`bertjax pretrain` run directory")
    if not directory.is_dir():
        raise InputError(f"model {model} is a file; pass the directory that holds it")
    run = RunDir(directory)
    if run.config.is_file():
        return ModelSource(str(model), directory, RUN)
    if not (directory / CONFIG).is_file() and run.checkpoints.is_dir():
        raise InputError(f"{model} holds a `bertjax pretrain` run's checkpoints but not its "
                         f"{run.config.name}; {run.config_fix(reading=True, missing=True)}")
    if not (directory / CONFIG).is_file():
        raise InputError(
            f"{model} holds neither config.json (a Hugging Face model) nor run_config.json (a "
            "`bertjax pretrain` run); pass a directory that holds one")
    return ModelSource(str(model), directory, HUGGING_FACE, read_config_json(directory))
