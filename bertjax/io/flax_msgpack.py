"""transformers-v4 Flax BERT checkpoints (`flax_model.msgpack`, or shards named by
`flax_model.msgpack.index.json`, which `bertjax.io.hf` finds), as written by
`FlaxBert*.save_pretrained` of transformers 4.x, read as tensors under Hugging Face's PyTorch
names.

transformers 5 removed Flax: nothing current reads these files. Here they are parsed with
`flax.serialization.msgpack_restore` (msgpack with array extension types: data only, nothing in
the file is ever executed) and renamed as transformers 4's own Flax-to-PyTorch loader did: the
'/'-joined parameter path with the leaf renamed (`kernel` -> `weight`, transposed; `scale`,
`embedding` -> `weight`), so `bertjax.io.hf` reads them as it reads safetensors.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from bertjax.errors import InputError
from bertjax.io.names import LEAF_RENAMES

FLAX_WEIGHTS = "flax_model.msgpack"
FLAX_WEIGHTS_INDEX = "flax_model.msgpack.index.json"
# Every BERT checkpoint has its word embeddings under this path (a bare FlaxBertModel without the
# `bert/` prefix): a msgpack without it is not a BERT.
_WORD_EMBEDDINGS = ("embeddings", "word_embeddings", "embedding")


def read_flax_tensors(files: list[Path]) -> dict[str, np.ndarray]:
    """The parameters of these msgpack files under Hugging Face's PyTorch names, float32."""
    flat: dict[tuple[str, ...], np.ndarray] = {}
    for file in files:
        flat.update(_read_msgpack(file))
    if not any(path[-3:] == _WORD_EMBEDDINGS for path in flat):
        raise InputError(
            f"{files[0] if len(files) == 1 else files[0].parent} holds no BERT weights (no "
            f"{'/'.join(_WORD_EMBEDDINGS)}; found {', '.join(sorted({p[0] for p in flat})[:5])}): "
            "pass the directory of a FlaxBert* checkpoint")
    return dict(_torch_named(path, value, files) for path, value in flat.items())


def _read_msgpack(file: Path) -> dict[tuple[str, ...], np.ndarray]:
    """One msgpack file -> {parameter path: array}. A shard holds a flat dict of '/'-joined
    paths, a whole checkpoint a nested dict; both come out flat."""
    from flax.serialization import msgpack_restore  # the canonical reader of Flax's format

    try:
        tree = msgpack_restore(file.read_bytes())
    except Exception as err:  # noqa: BLE001 - msgpack raises ExtraData, ValueError, ... on damage
        raise InputError(f"{file} is not a readable Flax msgpack checkpoint "
                         f"({type(err).__name__}: {' '.join(str(err).split())[:200]}); it is "
                         "damaged or incomplete: copy (or save) it again") from err
    if not isinstance(tree, Mapping):
        raise InputError(f"{file} holds a msgpack {type(tree).__name__}, not a dict of "
                         "parameters: pass the directory of a FlaxBert* checkpoint")
    flat: dict[tuple[str, ...], np.ndarray] = {}
    _flatten(tree, (), flat, file)
    return flat


def _flatten(tree: Any, path: tuple[str, ...], out: dict[tuple[str, ...], np.ndarray],
             file: Path) -> None:
    if isinstance(tree, Mapping):
        for key, sub in tree.items():
            _flatten(sub, (*path, *str(key).split("/")), out, file)
        return
    if not isinstance(tree, np.ndarray):
        raise InputError(f"{file} holds a {type(tree).__name__} at {'/'.join(path)}, not an "
                         "array: it is not a Flax parameter checkpoint")
    out[path] = tree


def _torch_named(path: tuple[str, ...], value: np.ndarray,
                 files: list[Path]) -> tuple[str, np.ndarray]:
    """('bert', 'encoder', 'layer', '0', ..., 'kernel') -> ('bert.encoder.layer.0....weight',
    the array transposed to PyTorch's (out, in)), as transformers 4 converted Flax to PyTorch."""
    *modules, leaf = path
    if leaf not in LEAF_RENAMES:
        raise InputError(f"{files[0].parent}: parameter {'/'.join(path)} has the leaf {leaf!r}, "
                         f"which no BERT parameter has ({', '.join(LEAF_RENAMES)}): not a "
                         "FlaxBert* checkpoint")
    name, transposed = LEAF_RENAMES[leaf]
    value = np.asarray(value, dtype=np.float32)
    return ".".join([*modules, name]), np.ascontiguousarray(value.T) if transposed else value
