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
from bertjax.io.files import atomic_directory
from bertjax.io.names import (
    BARE_PREFIX,
    HEAD_PREFIXES,
    HF_DERIVED_KEYS,
    HF_FOREIGN_HEAD_PREFIXES,
    HF_SEQUENCE_CLASSIFIERS,
    normalise_hf_key,
    to_hf_name,
)
from bertjax.io.weights import expected_shapes, model_from_numpy, model_to_numpy
from bertjax.model import BertForPreTraining

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


def load_hf(
    path: str | Path, *, model_cls: type | None = None, seed: int = 0,
    missing_heads: str = "init", **config_overrides: Any,
) -> Any:
    """A Hugging Face BERT directory -> a bertjax `model_cls` (default `BertForPreTraining`;
    also `BertModel`, `BertForSequenceClassification`).

    Reads checkpoints of BertForPreTraining, BertForMaskedLM, BertForNextSentencePrediction,
    BertForSequenceClassification and bare BertModel ones (with or without the `bert.` prefix,
    TF-era gamma/beta names too). Heads the checkpoint lacks (MLM, NSP, pooler, classifier) are
    freshly initialised from `seed`, with a warning naming them (or, with `missing_heads="error"`,
    are an error); heads the class does not have are left out; missing encoder weights and unknown
    keys are errors.
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a directory; load_hf wants a checkpoint directory")
    data = _read_config_json(path)
    config = BertConfig.from_hf_dict(data, **config_overrides)
    tensors = {normalise_hf_key(k): v for k, v in read_hf_tensors(path).items()}
    _check_tied(tensors)
    ours_by_hf = {to_hf_name(name): name for name in _all_names(config)}
    arrays = {ours_by_hf.get(k, k): v for k, v in tensors.items()
              if k not in HF_DERIVED_KEYS and not k.startswith(HF_FOREIGN_HEAD_PREFIXES)}
    if "cls.predictions.bias" not in tensors and "cls.predictions.decoder.bias" in tensors:
        arrays["mlm_head.bias"] = tensors["cls.predictions.decoder.bias"]
    if not set(data.get("architectures") or ["BertForSequenceClassification"]) & set(
            HF_SEQUENCE_CLASSIFIERS):
        arrays = {k: v for k, v in arrays.items() if not k.startswith("classifier.")}
    return build_model(arrays, config, model_cls, seed=seed, source=f"the checkpoint {path}",
                       missing_heads=missing_heads)


def _read_config_json(path: Path) -> dict[str, Any]:
    file = path / CONFIG
    if not file.is_file():
        raise FileNotFoundError(f"no {CONFIG} in {path}; a Hugging Face model directory has one")
    try:
        return json.loads(file.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{file} is not valid JSON: {err}") from err


def _all_names(config: BertConfig) -> list[str]:
    """Our PyTorch names of every weight any bertjax class of `config` has."""
    from bertjax.model import BertForSequenceClassification

    return sorted({*expected_shapes(config, BertForPreTraining),
                   *expected_shapes(config, BertForSequenceClassification)})


def build_model(
    arrays: dict[str, np.ndarray], config: BertConfig, model_cls: type | None = None, *,
    seed: int = 0, source: str = "the weights", missing_heads: str = "init",
) -> Any:
    """A `model_cls` (default `BertForPreTraining`) from arrays under our PyTorch names as a
    BertForPreTraining or BertForSequenceClassification has them (`bert.*` + heads).

    Heads the class does not have are left out; heads the arrays lack are initialised from
    `seed`, with a warning naming them (`missing_heads="init"`) or refused (`"error"`); any other
    missing, unexpected or mis-shaped weight is an error naming each one.
    """
    from bertjax.model import BertModel

    cls = model_cls or BertForPreTraining
    prefix = BARE_PREFIX if cls is BertModel else ""
    wanted = {prefix + name: name for name in expected_shapes(config, cls)}  # full name -> class's
    state = {wanted.get(k, k): v for k, v in arrays.items()
             if k in wanted or not k.startswith(HEAD_PREFIXES)}
    fresh_heads = sorted(n for full, n in wanted.items()
                         if full not in arrays and full.startswith(HEAD_PREFIXES))
    if fresh_heads:
        heads = sorted({n.rsplit(".", 2)[0] if n.startswith("bert.") else n.split(".")[0]
                        for n in fresh_heads})
        if missing_heads == "error":
            raise ValueError(
                f"{source} has no weights for {', '.join(heads)}, which {cls.__name__} needs here: "
                "use a model pre-trained with that head (e.g. a `bertjax pretrain` run or a "
                "BertForPreTraining checkpoint)")
        fresh = model_to_numpy(cls(config, rngs=nnx.Rngs(seed)))
        state.update({name: fresh[name] for name in fresh_heads})
        warnings.warn(
            f"{source} has no weights for {', '.join(heads)}: freshly initialised (seed {seed}). "
            "Fine-tune or pre-train before trusting those outputs.",
            stacklevel=3,
        )
    return model_from_numpy(state, config, cls, what=source)


def _check_tied(tensors: dict[str, np.ndarray]) -> None:
    decoder = tensors.get("cls.predictions.decoder.weight")
    words = tensors.get("bert.embeddings.word_embeddings.weight")
    if decoder is not None and words is not None and not np.array_equal(decoder, words):
        raise ValueError(
            "cls.predictions.decoder.weight differs from bert.embeddings.word_embeddings.weight: "
            "this checkpoint has an untied MLM decoder, which bertjax (tied, as BERT) cannot hold"
        )


def save_hf(model: Any, path: str | Path, *, tokenizer: Any = None) -> Path:
    """Write a directory that transformers loads as the model's class (`config.json` +
    `model.safetensors`), plus, given a `WordPieceTokenizer`, the files `AutoTokenizer` reads.

    The decoder weight is tied to the word embeddings, so (as transformers itself does) it is not
    written. The directory is written aside and renamed into place, so a crash leaves either the
    old directory or the new one, never a mixture. An existing `path` is replaced only if it
    holds nothing but checkpoint files (`CHECKPOINT_FILES`).
    """
    from safetensors.numpy import save_file

    from bertjax.model import BertModel

    path = Path(path)
    _check_replaceable(path)
    bare = isinstance(model, BertModel)
    tensors = {}
    for name, value in model_to_numpy(model).items():
        hf = to_hf_name(BARE_PREFIX + name if bare else name)
        tensors[hf.removeprefix(BARE_PREFIX) if bare else hf] = np.ascontiguousarray(value)
    with atomic_directory(path, replace=True) as tmp:
        save_file(tensors, tmp / SAFETENSORS, metadata={"format": "pt"})
        model.config.save_hf_json(tmp / CONFIG, architecture=type(model).__name__)
        if tokenizer is not None:
            _save_tokenizer(tokenizer, tmp, model.config.max_position_embeddings)
    return path


def _save_tokenizer(tokenizer: Any, directory: Path, max_length: int) -> None:
    """`tokenizer.json`, `vocab.txt` and the two small JSON files `AutoTokenizer` reads."""
    from bertjax.data.tokenizer import SPECIAL_TOKENS

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
