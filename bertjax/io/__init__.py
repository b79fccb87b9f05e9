"""Checkpoints in and out. Formats know names and arrays; a model class says what it is
(`base_model_prefix`, its row of `bertjax.config.heads`) and comes in as an argument, so nothing
here imports `bertjax.model` or asks which class it was given. The public loading API with its default class
and `bertjax pretrain` run directories is `bertjax.pretrained`, one layer up.

    names.py       the name tables: Flax paths <-> PyTorch names <-> Hugging Face names (no framework)
    weights.py     a model's parameters as PyTorch-named numpy arrays and back, strictly;
                   `build_model`: checkpoint arrays into any class, heads as its row says;
                   `load_model` / `save_model`: whole models of any class in and out of
                   Hugging Face directories
    flax_msgpack.py  transformers 4's flax_model.msgpack (and its index) as named arrays
    hf.py          Hugging Face directories: config.json + safetensors / pytorch_model.bin
                   as a config and named arrays (no JAX, no model class)
    report.py      LoadReport: what a load read and built (no framework)
    source.py      a MODEL resolved once (`locate`): its directory (a Hub id's cached snapshot,
                   through huggingface_hub, optional), kind and configuration
    runs.py        the model of a `bertjax pretrain` run directory, read-only
    verify.py      checking an exported directory: bertjax reloads it, transformers agrees

It may import the run-directory schema (`bertjax.runs`), the training library's checkpoint
reading (`bertjax.train.saved`), `bertjax.data`, the model core's config and `bertjax.common`;
never `bertjax.model`/`heads` (a class comes in as an argument), the jobs or the command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bertjax.common.lazy import lazy_imports

if TYPE_CHECKING:  # the flat names, each imported on first use (`lazy_imports`)
    from bertjax.io.hf import architecture_of, read_hf, read_hf_tensors, weights_format, write_hf
    from bertjax.io.report import FreshHeadsWarning, LoadReport
    from bertjax.io.runs import load_run_model, read_run_checkpoint
    from bertjax.io.source import ModelSource, locate, resolve_model
    from bertjax.io.verify import ExportCheckError, verify_export
    from bertjax.io.weights import (
        build_model,
        load_model,
        model_to_numpy,
        save_model,
        state_to_numpy,
    )

__getattr__, __dir__, __all__ = lazy_imports(__name__, __file__)
