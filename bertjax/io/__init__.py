"""Checkpoints in and out. Formats know names and arrays; a model class says what it is
(`base_model_prefix`, `head_modules`) and comes in as an argument, so nothing here imports
`bertjax.model` or asks which class it was given. The public loading API with its default class
and `bertjax pretrain` run directories is `bertjax.pretrained`, one layer up.

    names.py       the name tables: Flax paths <-> PyTorch names <-> Hugging Face names (no framework)
    weights.py     a model's parameters as PyTorch-named numpy arrays and back, strictly;
                   `build_model`: checkpoint arrays into any class, heads as it declares them
    flax_msgpack.py  transformers 4's flax_model.msgpack (and its index) as named arrays
    hf.py          Hugging Face directories: config.json + safetensors / pytorch_model.bin
                   as a config and named arrays (no JAX, no model class)
    models.py      whole models of any class in and out of Hugging Face directories
    report.py      LoadReport: what a load read and built (no framework)
    hub.py         Hugging Face Hub ids as local directories (huggingface_hub, optional)
    source.py      a MODEL resolved once (`locate`): its directory, kind and config.json
    runs.py        the model of a `bertjax pretrain` run directory, read-only
    verify.py      checking an exported directory: bertjax reloads it, transformers agrees

It may import the run-directory schema (`bertjax.runs`), the training library's checkpoint
reading (`bertjax.train.saved`), `bertjax.data`, the model core's config and `bertjax.common`;
never `bertjax.model`/`heads` (a class comes in as an argument), the jobs or the command line.
"""

from __future__ import annotations

from bertjax.common.lazy import lazy_names

_NAMES = {
    **dict.fromkeys(("read_hf", "write_hf", "read_hf_tensors", "weights_format",
                     "architecture_of"), "bertjax.io.hf"),
    **dict.fromkeys(("load_model", "save_model"), "bertjax.io.models"),
    **dict.fromkeys(("LoadReport", "FreshHeadsWarning"), "bertjax.io.report"),
    "resolve_model": "bertjax.io.hub",
    **dict.fromkeys(("locate", "ModelSource"), "bertjax.io.source"),
    **dict.fromkeys(("load_run_model", "read_run_checkpoint"), "bertjax.io.runs"),
    **dict.fromkeys(("verify_export", "ExportCheckError"), "bertjax.io.verify"),
    **dict.fromkeys(("build_model", "model_to_numpy", "state_to_numpy"), "bertjax.io.weights"),
}

__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
