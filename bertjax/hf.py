"""Hugging Face BERT checkpoints (`config.json` + safetensors or `pytorch_model.bin`) in and out.

Importing safetensors needs no PyTorch. `pytorch_model.bin` is read with
`torch.load(..., weights_only=True)`, which refuses pickles that would run code.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from flax import nnx

from bertjax.config import BertConfig
from bertjax.files import atomic_directory
from bertjax.model import BertForPreTraining
from bertjax.names import HF_DERIVED_KEYS, HF_HEAD_PREFIXES, normalise_hf_key, to_hf_name
from bertjax.weights import expected_shapes, model_from_numpy, model_to_numpy

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH_BIN = "pytorch_model.bin"
CONFIG = "config.json"
# What a Hugging Face model directory may hold; `save_hf` replaces a directory holding only these.
CHECKPOINT_FILES = frozenset({
    CONFIG, SAFETENSORS, SAFETENSORS_INDEX, PYTORCH_BIN, "tokenizer.json", "vocab.txt",
    "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
})


def read_hf_tensors(path: str | Path) -> dict[str, np.ndarray]:
    """All tensors of a checkpoint directory, as numpy, keyed by their Hugging Face names."""
    path = Path(path)
    if (path / SAFETENSORS).is_file():
        return _read_safetensors([path / SAFETENSORS])
    if (path / SAFETENSORS_INDEX).is_file():
        index = json.loads((path / SAFETENSORS_INDEX).read_text())
        files = sorted({path / f for f in index["weight_map"].values()})
        return _read_safetensors(files)
    if (path / PYTORCH_BIN).is_file():
        return _read_pytorch_bin(path / PYTORCH_BIN)
    raise FileNotFoundError(
        f"{path} has no {SAFETENSORS}, {SAFETENSORS_INDEX} or {PYTORCH_BIN}; "
        "point load_hf at a Hugging Face BERT checkpoint directory"
    )


def _read_safetensors(files: list[Path]) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    tensors: dict[str, np.ndarray] = {}
    for file in files:
        try:
            tensors.update(load_file(file))
        except (SafetensorError, OSError, ValueError) as err:
            raise ValueError(f"{file} is not a readable safetensors file: {err}") from err
    return tensors


def _read_pytorch_bin(file: Path) -> dict[str, np.ndarray]:
    import pickle

    try:
        import torch
    except ImportError as err:
        raise ImportError(
            f"{file} is a PyTorch pickle and reading it needs PyTorch: pip install 'bertjax[torch]' "
            "(or convert the checkpoint to model.safetensors)"
        ) from err
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise ValueError(
            f"refusing to load {file}: it is not a plain tensor checkpoint "
            f"(weights_only=True rejected it: {str(err).splitlines()[0]}). Convert it to "
            "safetensors from a trusted environment instead."
        ) from err
    return {k: v.detach().float().numpy() if v.is_floating_point() else v.numpy()
            for k, v in state.items()}


def load_hf(path: str | Path, *, seed: int = 0, **config_overrides: Any) -> BertForPreTraining:
    """A Hugging Face BERT directory -> a bertjax `BertForPreTraining`.

    Reads `BertForPreTraining` checkpoints and bare `BertModel` ones (with or without the `bert.`
    prefix, TF-era gamma/beta names too). Heads a checkpoint lacks (MLM, NSP, pooler) are freshly
    initialised from `seed`, with a warning naming them; missing encoder weights are an error.
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a directory; load_hf wants a checkpoint directory")
    config = BertConfig.load_hf_json(path, **config_overrides)
    raw = read_hf_tensors(path)
    tensors = {normalise_hf_key(k): v for k, v in raw.items()}
    _check_tied(tensors)

    ours_by_hf = {to_hf_name(name): name for name in expected_shapes(config)}
    state = {ours_by_hf.get(k, k): v for k, v in tensors.items() if k not in HF_DERIVED_KEYS}
    if "cls.predictions.bias" not in tensors and "cls.predictions.decoder.bias" in tensors:
        state["mlm_head.bias"] = tensors["cls.predictions.decoder.bias"]

    missing_heads = sorted(
        name for hf, name in ours_by_hf.items()
        if name not in state and hf.startswith(HF_HEAD_PREFIXES)
    )
    if missing_heads:
        fresh = model_to_numpy(BertForPreTraining(config, rngs=nnx.Rngs(seed)))
        state.update({name: fresh[name] for name in missing_heads})
        heads = sorted({"bert.pooler" if n.startswith("bert.") else n.split(".")[0]
                        for n in missing_heads})
        warnings.warn(
            f"{path} has no weights for {', '.join(heads)}: freshly initialised (seed {seed}). "
            "Fine-tune or pre-train before trusting those outputs.",
            stacklevel=2,
        )
    return model_from_numpy(state, config, what=f"the checkpoint {path}")


def _check_tied(tensors: dict[str, np.ndarray]) -> None:
    decoder = tensors.get("cls.predictions.decoder.weight")
    words = tensors.get("bert.embeddings.word_embeddings.weight")
    if decoder is not None and words is not None and not np.array_equal(decoder, words):
        raise ValueError(
            "cls.predictions.decoder.weight differs from bert.embeddings.word_embeddings.weight: "
            "this checkpoint has an untied MLM decoder, which bertjax (tied, as BERT) cannot hold"
        )


def save_hf(model: BertForPreTraining, path: str | Path) -> Path:
    """Write `config.json` + `model.safetensors` that transformers' BertForPreTraining loads.

    The decoder weight is tied to the word embeddings, so (as transformers itself does) it is not
    written. The directory is written aside and renamed into place, so a crash leaves either the
    old directory or the new one, never a mixture. An existing `path` is replaced only if it
    holds nothing but checkpoint files (`CHECKPOINT_FILES`).
    """
    from safetensors.numpy import save_file

    path = Path(path)
    _check_replaceable(path)
    tensors = {to_hf_name(k): np.ascontiguousarray(v) for k, v in model_to_numpy(model).items()}
    with atomic_directory(path, replace=True) as tmp:
        save_file(tensors, tmp / SAFETENSORS, metadata={"format": "pt"})
        model.config.save_hf_json(tmp / CONFIG)
    return path


def _check_replaceable(path: Path) -> None:
    if not path.exists():
        return
    if not path.is_dir():
        raise FileExistsError(f"{path} exists and is not a directory; choose another output path")
    foreign = sorted(p.name for p in path.iterdir() if p.name not in CHECKPOINT_FILES)
    if foreign:
        raise FileExistsError(
            f"{path} already holds files that are not part of a checkpoint ({', '.join(foreign[:5])}"
            f"{', ...' if len(foreign) > 5 else ''}); refusing to replace it: choose an empty or "
            "new directory"
        )
