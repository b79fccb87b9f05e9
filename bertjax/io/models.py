"""Whole models in and out of Hugging Face directories, for any model class (an argument: this
module never asks which class it holds). `bertjax.pretrained` adds the default class and run
directories on top; jobs below the public API (fine-tuning) save through `save_model`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flax import nnx

from bertjax.io.hf import CONFIG, read_hf, weights_format, write_hf
from bertjax.io.report import LoadReport
from bertjax.io.source import HUGGING_FACE, ModelSource
from bertjax.io.weights import build_model, check_architecture, model_to_numpy


def load_model(
    path: str | Path | ModelSource, model_cls: type[nnx.Module], *,
    source_cls: type[nnx.Module] | None = None, seed: int = 0, missing_heads: str = "init",
    **config_overrides: Any,
) -> tuple[Any, LoadReport]:
    """A Hugging Face BERT directory (or its `ModelSource`) -> (a `model_cls`, the report of what
    loaded; see `bertjax.pretrained.load_hf`). `source_cls` is the class its config.json names, if
    bertjax has it: weights that hold another class's head instead of its own are refused
    (`check_architecture`)."""
    source = path if isinstance(path, ModelSource) else ModelSource(
        str(path), Path(path), HUGGING_FACE)
    config, arrays = read_hf(source.directory, source.config, **config_overrides)
    if source_cls is not None:
        check_architecture(arrays, config, source_cls, str(source.directory / CONFIG))
    return build_model(arrays, config, model_cls, seed=seed,
                       source=f"the checkpoint {source.directory}", missing_heads=missing_heads,
                       origin={"path": source.given, "directory": str(source.directory),
                               "format": weights_format(source.directory) or ""})


def save_model(model: nnx.Module, path: str | Path, *, tokenizer: Any = None,
               overwrite: bool = False) -> Path:
    """Write `model` as a directory that transformers loads as its class (`config.json` +
    `model.safetensors`, plus a `Tokenizer`'s files if given): atomically, into a new or empty
    `path`, or replacing a model there with `overwrite` (`bertjax.io.hf.write_hf`)."""
    return write_hf(path, model_to_numpy(model), model.config, type(model), tokenizer=tokenizer,
                    overwrite=overwrite)
