"""Hugging Face BERT checkpoint directories (`config.json` + safetensors, `pytorch_model.bin` or
transformers-v4 Flax `flax_model.msgpack`) in and out, as a config and named arrays.

A format knows names and arrays, never model classes: `read_hf` gives the weights under
checkpoint names (`bertjax.io.names`: the encoder under `bert.`, heads beside it) and `write_hf`
writes a class's arrays under the Hugging Face names of that class, which it takes as an argument
(its `base_model_prefix` and its name). `bertjax.pretrained` turns them into models
(`load_hf`, `from_pretrained`, `save_pretrained`).

Reading safetensors needs no PyTorch. `pytorch_model.bin` is read with
`torch.load(..., weights_only=True)`, which refuses pickles that would run code; Flax msgpack
checkpoints (`bertjax.io.flax_msgpack`) are data only.
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

from bertjax.common.files import atomic_directory, directory_entries, follow_umask, listing
from bertjax.common.input_overlap import Inputs
from bertjax.config import BertConfig
from bertjax.config.families import FAMILIES
from bertjax.config.heads import Model
from bertjax.errors import InputError
from bertjax.io.family_check import check_weights_family
from bertjax.io.flax_msgpack import FLAX_WEIGHTS, FLAX_WEIGHTS_INDEX, read_flax_tensors
from bertjax.io.names import (
    BASE_PREFIX,
    HF_DERIVED_KEYS,
    checkpoint_name,
    from_family_name,
    from_hf_name,
    normalise_hf_key,
    to_family_name,
    to_hf_name,
)

CONFIG = "config.json"
SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH_BIN = "pytorch_model.bin"


# The weight files a directory may hold, in the order they are preferred (transformers' own).
WEIGHT_FILES = (SAFETENSORS, SAFETENSORS_INDEX, PYTORCH_BIN, FLAX_WEIGHTS, FLAX_WEIGHTS_INDEX)


def weights_format(path: str | Path) -> str | None:
    """The weight file of a checkpoint directory that `read_hf_tensors` reads (`WEIGHT_FILES`,
    the first present), None if it has none."""
    return next((name for name in WEIGHT_FILES if (Path(path) / name).is_file()), None)


def read_hf_tensors(path: str | Path) -> dict[str, np.ndarray]:
    """All tensors of a checkpoint directory, as numpy, keyed by their Hugging Face names."""
    path = Path(path)
    found = weights_format(path)
    if found == SAFETENSORS:
        return _read_safetensors([path / SAFETENSORS])
    if found == SAFETENSORS_INDEX:
        return _read_safetensors(_index_files(path / SAFETENSORS_INDEX))
    if found == PYTORCH_BIN:
        return _read_pytorch_bin(path / PYTORCH_BIN)
    if found == FLAX_WEIGHTS:
        return read_flax_tensors([path / FLAX_WEIGHTS])
    if found == FLAX_WEIGHTS_INDEX:
        return read_flax_tensors(_index_files(path / FLAX_WEIGHTS_INDEX))
    raise FileNotFoundError(
        f"{path} holds no model weights (none of {', '.join(WEIGHT_FILES)}); pass a Hugging Face "
        "BERT directory with its weights, or a `bertjax pretrain` run directory"
    )


def _index_files(index_file: Path) -> list[Path]:
    """The shard files an index (`model.safetensors.index.json`, `flax_model.msgpack.index.json`)
    names (each must exist)."""
    weight_map = _read_json(index_file).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise InputError(f"{index_file} has no weight_map of tensor names to shard files; restore "
                         "it (or download the model again)")
    files = sorted({index_file.parent / str(f) for f in weight_map.values()})
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(f"{index_file} names shard files that are missing: "
                                f"{', '.join(missing)}; download them (or the model) again")
    return files


def _read_safetensors(files: list[Path]) -> dict[str, np.ndarray]:
    tensors: dict[str, np.ndarray] = {}
    for file in files:
        try:
            tensors.update(safetensors.numpy.load_file(file))
        except (SafetensorError, OSError, ValueError, TypeError) as err:  # TypeError: a dtype
            raise InputError(f"{file} is not a readable safetensors file ({_one_line(err)}); "
                             "it is damaged or incomplete: download (or export) it again") from err
    return tensors


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())[:300] or type(err).__name__


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
        raise InputError(
            f"refusing to load {file}: it is damaged or not a plain tensor checkpoint (torch.load "
            "with weights_only=True rejected it); download it again, or convert it to "
            "safetensors in a trusted environment"
        ) from err
    except Exception as err:  # noqa: BLE001 - torch raises RuntimeError, EOFError, ... on damage
        raise InputError(f"{file} is not a readable PyTorch checkpoint ({_one_line(err)}); it is "
                         "damaged or incomplete: download it again") from err
    if not isinstance(state, dict) or not all(hasattr(v, "is_floating_point")
                                              for v in state.values()):
        raise InputError(f"{file} is not a state dict of tensors; pass a Hugging Face BERT "
                         "checkpoint directory")
    return {k: v.detach().float().numpy() if v.is_floating_point() else v.numpy()
            for k, v in state.items()}


def read_hf(path: str | Path, config_data: Mapping[str, Any] | None = None,
            **config_overrides: Any) -> tuple[BertConfig, dict[str, np.ndarray]]:
    """A Hugging Face BERT directory -> its config and its weights under checkpoint names
    (`config_data`: its config.json as already read, `bertjax.io.source.locate`).

    Reads checkpoints of every BERT class of transformers (`bertjax.heads`) and bare BertModel
    ones (with or without the `bert.` prefix, TF-era gamma/beta names too), as safetensors,
    `pytorch_model.bin` or transformers-v4 Flax msgpack. A `classifier.*` head is the one of the
    architecture config.json names (`bertjax.config.heads.classifier_of`). Leaves out the tied
    decoder and the position-id buffer.
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a directory; pass a Hugging Face BERT checkpoint "
                                "directory (config.json + model.safetensors)")
    data = read_config_json(path) if config_data is None else dict(config_data)
    try:
        config = BertConfig.from_hf_dict(data, **config_overrides)
    except (TypeError, ValueError) as err:
        raise InputError(f"{path / CONFIG}: {_one_line(err)}; fix it, or pass a directory whose "
                         "config.json describes a BERT") from err
    architecture = architecture_in(data)
    raw = read_hf_tensors(path)
    check_weights_family(raw, config.model_type, str(path / CONFIG))
    tensors = {normalise_hf_key(from_family_name(k, config.model_type, architecture)): v
               for k, v in raw.items()}
    _check_tied(tensors)
    arrays = {from_hf_name(k, architecture=architecture): v for k, v in tensors.items()
              if k not in HF_DERIVED_KEYS}
    if "cls.predictions.bias" not in tensors and "cls.predictions.decoder.bias" in tensors:
        arrays[from_hf_name("cls.predictions.bias")] = tensors["cls.predictions.decoder.bias"]
    return config, arrays


def architecture_of(path: str | Path) -> str | None:
    """The class a Hugging Face directory's config.json says its weights are (`architectures`),
    a v4 Flax class as the class it mirrors; None if it names none."""
    return architecture_in(read_config_json(Path(path)))


def architecture_in(data: Mapping[str, Any]) -> str | None:
    """`architecture_of` for config.json's content, by bertjax's name for the class: a v4 Flax
    class (`FlaxBertForMaskedLM`) and another family's (`RobertaForMaskedLM`) as the BERT class
    it is (`BertForMaskedLM`)."""
    names = data.get("architectures")
    if not isinstance(names, list) or not names:
        return None
    family = FAMILIES.get(str(data.get("model_type", "bert")), FAMILIES["bert"])
    return family.bertjax_name(str(names[0]))


def read_config_json(path: Path) -> dict[str, Any]:
    """The config.json of the directory `path`, as a dict (missing or damaged: an error naming
    the file)."""
    file = path / CONFIG
    if not file.is_file():
        raise FileNotFoundError(f"no {CONFIG} in {path}; a Hugging Face model directory has one")
    return _read_json(file)


def _read_json(file: Path) -> dict[str, Any]:
    """A JSON object from `file`; damage (not UTF-8, not JSON, not an object) is a ValueError
    naming it."""
    try:
        data = json.loads(file.read_bytes())
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        raise InputError(f"{file} is not valid JSON ({_one_line(err)}); it is damaged: restore "
                         "it (or download the model again)") from None
    if not isinstance(data, dict):
        raise InputError(f"{file} holds a JSON {type(data).__name__}, not an object; it is "
                         "damaged: restore it (or download the model again)")
    return data


def _check_tied(tensors: dict[str, np.ndarray]) -> None:
    decoder = tensors.get("cls.predictions.decoder.weight")
    words = tensors.get("bert.embeddings.word_embeddings.weight")
    if decoder is not None and words is not None and not np.array_equal(decoder, words):
        raise InputError(
            "cls.predictions.decoder.weight differs from bert.embeddings.word_embeddings.weight: "
            "this checkpoint has an untied MLM decoder, which bertjax (tied, as BERT) cannot hold"
        )


def hf_name(name: str, base_model_prefix: str, model_type: str = "bert") -> str:
    """A parameter name of a class with this `base_model_prefix` -> its Hugging Face name in a
    `model_type` checkpoint: the encoder under `bert.` (`roberta.`, ...), or bare for the
    encoder itself (as transformers saves BertModel)."""
    full = to_hf_name(checkpoint_name(name, base_model_prefix))
    return to_family_name(full if base_model_prefix else full.removeprefix(BASE_PREFIX),
                          model_type)


def write_hf(
    path: str | Path, arrays: Mapping[str, np.ndarray], config: BertConfig,
    model_cls: type[Model], *, tokenizer: Any = None, overwrite: bool = False,
) -> Path:
    """Write a `model_cls`'s `arrays` (our PyTorch names) as a directory that transformers loads as
    that class (`config.json` + `model.safetensors`), plus, given a `Tokenizer`, the files
    `AutoTokenizer` reads.

    The decoder weight is tied to the word embeddings, so (as transformers itself does) it is not
    written. The directory is written aside and renamed into place, so a crash or Ctrl-C leaves
    either the old directory or the new one, never a mixture. An existing `path` is written only
    if it is empty, or replaced if it holds a model and `overwrite` is set
    (`check_export_directory`).
    """
    path = Path(path)
    check_export_directory(path, overwrite=overwrite)
    tensors = {hf_name(name, model_cls.base_model_prefix, config.model_type):
               np.ascontiguousarray(value)
               for name, value in arrays.items()}
    with atomic_directory(path, replace=True) as tmp:
        safetensors.numpy.save_file(tensors, tmp / SAFETENSORS, metadata={"format": "pt"})
        follow_umask(tmp / SAFETENSORS)  # safetensors creates it 0600
        # the class's row names it (ModernBertModel is a `BertModel`: the family's bare encoder)
        spec = getattr(model_cls, "spec", None)
        config.save_hf_json(tmp / CONFIG, architecture=spec.name if spec else model_cls.__name__,
                            token_ids=_token_ids(config, tokenizer))
        if tokenizer is not None:
            _save_tokenizer(tokenizer, tmp, config)
    return path


def _token_ids(config: BertConfig, tokenizer: Any) -> dict[str, int]:
    """config.json's special-token ids the family's config has (`Family.config_token_ids`),
    from `tokenizer` (none without one)."""
    if tokenizer is None:
        return {}
    return {key: getattr(tokenizer.special, role) for key, role in config.family.config_token_ids}


def _save_tokenizer(tokenizer: Any, directory: Path, config: BertConfig) -> None:
    """`tokenizer.json` (and WordPiece's `vocab.txt`) and the two small JSON files
    `AutoTokenizer` reads, naming the family's tokenizer class and special tokens."""
    tokenizer.save(directory)
    specials = {f"{k}_token": v for k, v in tokenizer.special_tokens.items()}
    if config.family.pair_separators == 2:  # RoBERTa's <s> and </s> also begin and end text
        specials |= {"bos_token": specials["cls_token"], "eos_token": specials["sep_token"]}
    (directory / "special_tokens_map.json").write_text(json.dumps(specials, indent=2) + "\n")
    settings = {"tokenizer_class": config.family.class_name("BertTokenizer"),
                "do_lower_case": tokenizer.lowercase,
                "model_max_length": config.max_sequence_length, **specials}
    (directory / "tokenizer_config.json").write_text(json.dumps(settings, indent=2) + "\n")


# What a model directory holds, whoever wrote it: its config beside weights, tokenizer files
# (any library's) and the small files transformers and the Hub put beside them. A directory
# holding anything else (a user's notes, a subdirectory) is never replaced.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".msgpack", ".h5", ".pt", ".pth", ".ckpt")
_TOKENIZER_FILES = frozenset({"tokenizer.json", "vocab.txt", "vocab.json", "merges.txt",
                              "sentencepiece.bpe.model", "spiece.model", "tokenizer.model"})
_MODEL_FILES = _TOKENIZER_FILES | {
    CONFIG, "generation_config.json", "tokenizer_config.json", "special_tokens_map.json",
    "added_tokens.json", "README.md", ".gitattributes", *(f"{name}.index.json" for name in (
        SAFETENSORS, PYTORCH_BIN, FLAX_WEIGHTS))}


def _is_weights(name: str) -> bool:
    return name.endswith(_WEIGHT_SUFFIXES) or name.startswith("tf_model.")


def held_model(path: Path) -> str | None:
    """The model the directory `path` holds, in words ("a RobertaForMaskedLM model (model_type
    roberta, saved by transformers 4.57.6) with its tokenizer"); None if it holds none (no
    config.json beside weights)."""
    names = {p.name for p in path.iterdir()}
    if CONFIG not in names or not any(_is_weights(n) for n in names):
        return None
    try:
        data = json.loads((path / CONFIG).read_bytes())
    except (OSError, ValueError):
        data = None
    data = data if isinstance(data, dict) else {}
    classes = data.get("architectures")
    about = [f"model_type {data['model_type']}"] if "model_type" in data else []
    if "transformers_version" in data:
        about.append(f"saved by transformers {data['transformers_version']}")
    words = (f"a {classes[0]} model" if isinstance(classes, list) and classes
             else "a model whose config.json names no class")
    words += f" ({', '.join(about)})" if about else ""
    return words + (" with its tokenizer" if names & _TOKENIZER_FILES else "")


def check_export_directory(path: str | Path, what: str = "output directory", *,
                           overwrite: bool = False, force: str = "overwrite=True",
                           inputs: Inputs | None = None) -> None:
    """Raise an OSError naming `what`, `path` and the fix unless `write_hf` may write `path`: a
    new or empty directory, or - with `overwrite` (named `force` in messages) - one that holds a
    model, whoever wrote it, and nothing a model directory does not hold; never one of `inputs`,
    nor inside or holding one (`bertjax.common.input_overlap`). A refusal names what the
    directory holds. Call it before any work."""
    names = directory_entries(path, what, inputs)
    path = Path(path)
    if not names:
        return
    model = held_model(path)
    if model is None:
        raise FileExistsError(
            f"{what} {path} already holds files that are not a model ({listing(names)}); choose "
            f"another {what} (a new or empty directory): a directory is replaced only if it "
            f"holds a model, and only with {force}")
    other = [p.name for p in path.iterdir()
             if not (p.is_file() and (p.name in _MODEL_FILES or _is_weights(p.name)))]
    if other:
        raise FileExistsError(
            f"{what} {path} holds {model} and files no model has ({listing(sorted(other))}): it "
            f"is never replaced, even with {force}; move those files out, or choose another "
            f"{what} (a new or empty directory)")
    if not overwrite:
        raise FileExistsError(
            f"{what} {path} already holds {model} ({listing(names)}); pass {force} to replace "
            f"it, or choose another {what} (a new or empty directory)")
