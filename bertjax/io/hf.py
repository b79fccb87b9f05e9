"""Hugging Face BERT checkpoint directories (`config.json` + safetensors or `pytorch_model.bin`)
in and out, as a config and named arrays.

A format knows names and arrays, never model classes: `read_hf` gives the weights under
checkpoint names (`bertjax.io.names`: the encoder under `bert.`, heads beside it) and `write_hf`
writes a class's arrays under the Hugging Face names of that class, which it takes as an argument
(its `base_model_prefix` and its name). `bertjax.pretrained` turns them into models
(`load_hf`, `save_hf`, `save_pretrained`).

Reading safetensors needs no PyTorch. `pytorch_model.bin` is read with
`torch.load(..., weights_only=True)`, which refuses pickles that would run code.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.numpy  # called through the module: tests replace save_file to crash a write
from safetensors import SafetensorError

from bertjax.config import BertConfig
from bertjax.data.tokenizer import SPECIAL_TOKENS
from bertjax.files import atomic_directory
from bertjax.io.names import (
    BASE_PREFIX,
    HF_DERIVED_KEYS,
    HF_FOREIGN_HEAD_PREFIXES,
    HF_SEQUENCE_CLASSIFIERS,
    checkpoint_name,
    from_hf_name,
    normalise_hf_key,
    to_hf_name,
)

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH_BIN = "pytorch_model.bin"
CONFIG = "config.json"
# What a Hugging Face model directory may hold; `write_hf` replaces a directory holding only these.
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
    tensors: dict[str, np.ndarray] = {}
    for file in files:
        try:
            tensors.update(safetensors.numpy.load_file(file))
        except (SafetensorError, OSError, ValueError) as err:
            raise ValueError(f"{file} is not a readable safetensors file: {err}") from err
    return tensors


def _read_pytorch_bin(file: Path) -> dict[str, np.ndarray]:
    try:
        import torch  # optional: only this old format needs it
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


def read_hf(path: str | Path, **config_overrides: Any) -> tuple[BertConfig, dict[str, np.ndarray]]:
    """A Hugging Face BERT directory -> its config and its weights under checkpoint names.

    Reads checkpoints of BertForPreTraining, BertForMaskedLM, BertForNextSentencePrediction,
    BertForSequenceClassification and bare BertModel ones (with or without the `bert.` prefix,
    TF-era gamma/beta names too). Leaves out the tied decoder, the position-id buffer and heads
    bertjax has no class for (question answering; another class's `classifier`).
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a directory; load_hf wants a checkpoint directory")
    data = _read_config_json(path)
    config = BertConfig.from_hf_dict(data, **config_overrides)
    tensors = {normalise_hf_key(k): v for k, v in read_hf_tensors(path).items()}
    _check_tied(tensors)
    arrays = {from_hf_name(k): v for k, v in tensors.items()
              if k not in HF_DERIVED_KEYS and not k.startswith(HF_FOREIGN_HEAD_PREFIXES)}
    if "cls.predictions.bias" not in tensors and "cls.predictions.decoder.bias" in tensors:
        arrays[from_hf_name("cls.predictions.bias")] = tensors["cls.predictions.decoder.bias"]
    if not set(data.get("architectures") or ["BertForSequenceClassification"]) & set(
            HF_SEQUENCE_CLASSIFIERS):
        arrays = {k: v for k, v in arrays.items() if not k.startswith("classifier.")}
    return config, arrays


def _read_config_json(path: Path) -> dict[str, Any]:
    file = path / CONFIG
    if not file.is_file():
        raise FileNotFoundError(f"no {CONFIG} in {path}; a Hugging Face model directory has one")
    try:
        return json.loads(file.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{file} is not valid JSON: {err}") from err


def _check_tied(tensors: dict[str, np.ndarray]) -> None:
    decoder = tensors.get("cls.predictions.decoder.weight")
    words = tensors.get("bert.embeddings.word_embeddings.weight")
    if decoder is not None and words is not None and not np.array_equal(decoder, words):
        raise ValueError(
            "cls.predictions.decoder.weight differs from bert.embeddings.word_embeddings.weight: "
            "this checkpoint has an untied MLM decoder, which bertjax (tied, as BERT) cannot hold"
        )


def hf_name(name: str, base_model_prefix: str) -> str:
    """A parameter name of a class with this `base_model_prefix` -> its Hugging Face name: the
    encoder under `bert.`, or bare for the encoder itself (as transformers saves BertModel)."""
    full = to_hf_name(checkpoint_name(name, base_model_prefix))
    return full if base_model_prefix else full.removeprefix(BASE_PREFIX)


def write_hf(
    path: str | Path, arrays: Mapping[str, np.ndarray], config: BertConfig, model_cls: type, *,
    tokenizer: Any = None,
) -> Path:
    """Write a `model_cls`'s `arrays` (our PyTorch names) as a directory that transformers loads as
    that class (`config.json` + `model.safetensors`), plus, given a `WordPieceTokenizer`, the files
    `AutoTokenizer` reads.

    The decoder weight is tied to the word embeddings, so (as transformers itself does) it is not
    written. The directory is written aside and renamed into place, so a crash leaves either the
    old directory or the new one, never a mixture. An existing `path` is replaced only if it
    holds nothing but checkpoint files (`CHECKPOINT_FILES`).
    """
    path = Path(path)
    _check_replaceable(path)
    tensors = {hf_name(name, model_cls.base_model_prefix): np.ascontiguousarray(value)
               for name, value in arrays.items()}
    with atomic_directory(path, replace=True) as tmp:
        safetensors.numpy.save_file(tensors, tmp / SAFETENSORS, metadata={"format": "pt"})
        config.save_hf_json(tmp / CONFIG, architecture=model_cls.__name__)
        if tokenizer is not None:
            _save_tokenizer(tokenizer, tmp, config.max_position_embeddings)
    return path


def _save_tokenizer(tokenizer: Any, directory: Path, max_length: int) -> None:
    """`tokenizer.json`, `vocab.txt` and the two small JSON files `AutoTokenizer` reads."""
    tokenizer.save(directory)
    specials = {f"{k}_token": v for k, v in SPECIAL_TOKENS.items()}
    (directory / "special_tokens_map.json").write_text(json.dumps(specials, indent=2) + "\n")
    settings = {"tokenizer_class": "BertTokenizer", "do_lower_case": tokenizer.lowercase,
                "model_max_length": max_length, **specials}
    (directory / "tokenizer_config.json").write_text(json.dumps(settings, indent=2) + "\n")


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
