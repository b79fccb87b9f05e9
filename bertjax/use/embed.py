"""Sentence embeddings: one vector per line of text, as sentence-transformers computes them.

`mean` pooling is sentence-transformers' (the attention-masked mean of the last hidden state),
`cls` the last hidden state at [CLS]; `normalize` divides by the L2 norm (sentence-transformers'
`Normalize` module). With all-MiniLM-L6-v2, `embed(..., pooling="mean", normalize=True)` gives
`SentenceTransformer(...).encode(...)`'s vectors within 1e-5 (tests/test_embed.py).

Lines are sorted by token length and cut into batches, so a short line is padded only to the
longest line of its own batch (rounded up to `encode.PAD_MULTIPLE`, which bounds the number of
compiled shapes); the original order is restored at the end. With `max_tokens`, lines are packed
into rows instead (`bertjax.use.packed`): batches of a fixed shape holding about `max_tokens`
real tokens each, every line pooled over its own tokens: the same vectors within 1e-5.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tqdm.auto import tqdm

from bertjax.common.files import read_text
from bertjax.data.tokenizer import Tokenizer
from bertjax.errors import InputError
from bertjax.use.arguments import check_model_and_tokenizer
from bertjax.use.encode import Encoded, encode, model_max_length
from bertjax.use.packed import packed_batches, packing_options, sequence_mask
from bertjax.use.truncation import warn_cut

POOLINGS = ("mean", "cls")


def read_lines(path: str | os.PathLike, what: str = "file") -> list[str]:
    """The lines of a UTF-8 file (a trailing newline ends the last line, it adds none); raises a
    ValueError naming (as `what`, e.g. "--file") a missing, binary, non-UTF-8 or empty file, or
    the file and a blank line."""
    path = Path(path)
    text = read_text(path, what)
    if not text.strip():
        raise InputError(f"{what} {path} is empty; it should hold one text per line")
    lines = [line.removesuffix("\r") for line in text.removesuffix("\n").split("\n")]
    try:
        check_lines(lines)
    except ValueError as err:
        raise InputError(f"{path}: {err}") from err
    return lines


def check_lines(lines: Sequence[str]) -> None:
    """Raise a ValueError naming the first empty or whitespace-only line (1-based), which would
    otherwise become a vector of [CLS] [SEP] alone, silently."""
    if isinstance(lines, str):
        raise TypeError("lines must be a sequence of strings, not one string")
    for i, line in enumerate(lines):
        if not isinstance(line, str):
            raise TypeError(f"line {i + 1} is a {type(line).__name__}, not a string")
        if not line.strip():
            raise InputError(f"line {i + 1} is empty or only whitespace; every line must hold text "
                             "(remove blank lines, so that vector i stays line i)")


def sorted_batches(
    tokenizer: Tokenizer,
    lines: Sequence[str],
    *,
    batch_size: int,
    max_length: int,
    warn: bool = True,
) -> Iterator[tuple[np.ndarray, Encoded]]:
    """(indices into `lines`, padded batch) from the shortest lines to the longest.

    Lengths are counted in tokens (one tokenizer pass); ties keep the input order. Truncation
    warnings name the original line numbers (`warn=False`: none, see `Encoded.cut`).
    """
    if batch_size < 1:
        raise InputError(f"batch_size must be at least 1, got {batch_size}")
    lengths = np.array([len(ids) for ids in tokenizer.encode_batch(list(lines))], np.int64)  # (N,)
    order = np.argsort(lengths, kind="stable")  # (N,)
    for start in range(0, len(order), batch_size):
        index = order[start:start + batch_size]  # (b,)
        yield index, encode(tokenizer, [lines[i] for i in index], max_length=max_length,
                            names=[f"line {i + 1}" for i in index], warn=warn)


def embed(
    model: Any,
    tokenizer: Tokenizer,
    lines: Sequence[str],
    *,
    pooling: str = "mean",
    normalize: bool = False,
    batch_size: int = 64,
    max_length: int | None = None,
    progress: bool = False,
    names: Sequence[str] | None = None,
    option: str = "max_length",
    max_tokens: int | None = None,
) -> np.ndarray:
    """(N, H) float32 sentence vectors of `lines`, in their order.

    `model` is a `BertModel` (or a model holding one as `.bert`, whose heads are not run).
    `pooling`: "mean" (attention-masked mean of the last hidden state) or "cls" (its [CLS] row);
    `normalize`: divide each vector by its L2 norm. `max_length` (default: the model's positions)
    cuts longer lines, with a warning naming each (`names`, default "line 1", ...) and what
    raises the limit (`option`). An empty or whitespace-only line is a ValueError naming it; no
    lines give a (0, H) array. `max_tokens`: pack the lines into batches of that many token
    slots (`bertjax.use.packed`; `batch_size` is then unused) instead of sorted padded batches.
    """
    if pooling not in POOLINGS:
        raise InputError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    check_lines(lines)
    encoder = getattr(model, "bert", model)
    check_model_and_tokenizer(encoder, tokenizer, "embed")
    vectors = np.zeros((len(lines), int(encoder.config.hidden_size)), np.float32)  # (N, H)
    if not len(lines):
        return vectors
    limit = model_max_length(encoder)
    if max_length is not None and not 3 <= max_length <= limit:
        raise InputError(f"max_length must be between 3 and the model's {limit} positions, "
                         f"got {max_length}")
    if names is not None and len(names) != len(lines):
        raise InputError(f"got {len(names)} names for {len(lines)} lines")
    names = list(names or [f"line {i + 1}" for i in range(len(lines))])
    max_length = max_length or limit
    graphdef, state = nnx.split(encoder)
    forward = _pooled_forward()
    if max_tokens is not None:
        batches = _packed(encoder, tokenizer, lines, names, max_length, option, max_tokens)
    else:
        batches = _sorted(encoder, tokenizer, lines, names, batch_size, max_length, option)
    with tqdm(total=len(lines), unit="line", desc="embed", disable=not progress) as bar:
        pending: tuple[np.ndarray, Any, Any] | None = None
        for index, arrays, layout in batches:
            # dispatched asynchronously: the next batch is made while this one runs
            result = forward(graphdef, state, arrays, pooling=pooling, normalize=normalize)
            if pending is not None:
                _store(vectors, *pending)
                bar.update(len(pending[0]))
            pending = (index, result, layout)
        assert pending is not None
        _store(vectors, *pending)
        bar.update(len(pending[0]))
    return vectors


def _sorted(encoder: Any, tokenizer: Tokenizer, lines: Sequence[str], names: list[str],
            batch_size: int, max_length: int, option: str) -> Iterator[tuple[Any, Any, None]]:
    """(line indices, model inputs, None) of sorted padded batches, cut lines warned about."""
    limit = model_max_length(encoder)
    for index, batch in sorted_batches(tokenizer, lines, batch_size=batch_size,
                                       max_length=max_length, warn=False):
        warn_cut(batch, [names[i] for i in index], max_length, limit, option, stacklevel=4)
        yield index, batch.arrays(encoder.config), None


def _packed(encoder: Any, tokenizer: Tokenizer, lines: Sequence[str], names: list[str],
            max_length: int, option: str, max_tokens: int) -> Iterator[tuple[Any, Any, Any]]:
    """(line indices, model inputs, layout) of packed batches (`bertjax.use.packed`)."""
    limit = model_max_length(encoder)
    encoded = encode(tokenizer, lines, max_length=max_length, warn=False)
    warn_cut(encoded, names, max_length, limit, option, stacklevel=4)
    for batch in packed_batches(encoded.arrays(encoder.config), max_tokens=max_tokens,
                                limit=limit, pad_id=tokenizer.special.pad,
                                config=encoder.config):
        yield batch.members, batch.arrays, batch.layout


def _store(vectors: np.ndarray, index: np.ndarray, result: Any, layout: Any) -> None:
    """A batch's vectors (B, H), or packed (R, K, H), into their lines' rows of `vectors`."""
    result = np.asarray(result)
    vectors[index] = result if layout is None else layout.from_slots(result)


@functools.cache
def _pooled_forward() -> Any:
    """The jitted forward + pooling, built once per process; it compiles once per model
    architecture (`graphdef`), pooling and input shape, whatever the weights."""
    @functools.partial(jax.jit, static_argnames=("graphdef", "pooling", "normalize"))
    def forward(graphdef: Any, state: Any, arrays: dict[str, jax.Array], *, pooling: str,
                normalize: bool) -> jax.Array:
        out = nnx.merge(graphdef, state)(
            arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"],
            **packing_options(arrays))
        if "sequence_ids" in arrays:  # (R, K, H): per packed line
            return pool_packed(out.sequence_output, arrays["sequence_ids"],
                               arrays["cls_positions"], pooling=pooling, normalize=normalize)
        return pool(out.sequence_output, arrays["attention_mask"], pooling=pooling,
                    normalize=normalize)

    return forward


def pool(hidden: Any, attention_mask: Any, *, pooling: str, normalize: bool) -> Any:
    """(B, S, H) last hidden state + (B, S) mask -> (B, H) float32 sentence vectors, with
    sentence-transformers' constants (mask sum clamped at 1e-9, norm at 1e-12)."""
    hidden = hidden.astype(jnp.float32)  # (B, S, H)
    if pooling == "mean":
        mask = attention_mask.astype(jnp.float32)[:, :, None]  # (B, S, 1)
        vectors = (hidden * mask).sum(1) / jnp.maximum(mask.sum(1), 1e-9)  # (B, H)
    elif pooling == "cls":
        vectors = hidden[:, 0]  # (B, H)
    else:
        raise InputError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    if normalize:
        norm = jnp.linalg.norm(vectors, axis=-1, keepdims=True)  # (B, 1)
        vectors = vectors / jnp.maximum(norm, 1e-12)
    return vectors


def pool_packed(hidden: Any, sequence_ids: Any, cls_positions: Any, *, pooling: str,
                normalize: bool) -> Any:
    """`pool` of each packed sequence: (R, S, H) last hidden state of packed rows -> (R, K, H)
    float32, the mean over the sequence's own tokens or its [CLS] row (zeros in empty slots)."""
    hidden = hidden.astype(jnp.float32)  # (R, S, H)
    if pooling == "mean":
        own = sequence_mask(sequence_ids, cls_positions.shape[1]).astype(jnp.float32)  # (R, K, S)
        sums = jnp.einsum("rks,rsh->rkh", own, hidden, precision=jax.lax.Precision.HIGHEST)
        vectors = sums / jnp.maximum(own.sum(-1), 1e-9)[..., None]  # (R, K, H)
    elif pooling == "cls":
        index = jnp.maximum(cls_positions, 0)[..., None]  # (R, K, 1)
        vectors = jnp.where(cls_positions[..., None] >= 0,
                            jnp.take_along_axis(hidden, index, axis=1), 0.0)  # (R, K, H)
    else:
        raise InputError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    if normalize:
        norm = jnp.linalg.norm(vectors, axis=-1, keepdims=True)  # (R, K, 1)
        vectors = vectors / jnp.maximum(norm, 1e-12)
    return vectors


def nearest(vectors: np.ndarray, query: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The `k` rows of `vectors` (N, H) most cosine-similar to `query` (H,), best first, as
    (row index, cosine similarity); ties keep the lower index first. A zero row scores 0."""
    vectors = np.asarray(vectors, np.float64)
    query = np.asarray(query, np.float64).reshape(-1)  # (H,)
    if vectors.ndim != 2 or vectors.shape[1] != query.shape[0]:
        raise InputError(f"vectors {vectors.shape} and query {query.shape} do not match: "
                         "want (N, H) and (H,)")
    if k < 1:
        raise InputError(f"k must be at least 1, got {k}")
    norms = np.linalg.norm(vectors, axis=1) * np.linalg.norm(query)  # (N,)
    scores = vectors @ query / np.maximum(norms, 1e-12)  # (N,)
    best = np.argsort(-scores, kind="stable")[:k]
    return [(int(i), float(scores[i])) for i in best]


def sentence_transformers_settings(path: str | Path) -> dict[str, Any]:
    """The pooling, normalisation and maximum length a sentence-transformers model directory
    asks for (`modules.json`, `1_Pooling/config.json`, `sentence_bert_config.json`), as
    `embed` keywords; only those found. A pooling bertjax does not do is returned under
    "unsupported_pooling" (e.g. "max"), so that callers can say so."""
    path = Path(path)
    found: dict[str, Any] = {}
    modules = _read_json(path / "modules.json")
    if not isinstance(modules, list):
        return found
    types = {str(m.get("type", "")).rsplit(".", 1)[-1]: m for m in modules if isinstance(m, dict)}
    found["normalize"] = "Normalize" in types
    if "Pooling" in types:
        config = _read_json(path / str(types["Pooling"].get("path", "")) / "config.json") or {}
        modes = [k.removeprefix("pooling_mode_").removesuffix("_tokens").removesuffix("_token")
                 for k, v in config.items() if k.startswith("pooling_mode_") and v is True]
        if isinstance(config.get("pooling_mode"), str):  # newer sentence-transformers write this
            modes = [config["pooling_mode"]]
        if modes == ["mean"] or modes == ["cls"]:
            found["pooling"] = modes[0]
        elif modes:
            found["unsupported_pooling"] = "+".join(modes)
    settings = _read_json(path / "sentence_bert_config.json") or {}
    if isinstance(settings.get("max_seq_length"), int):
        found["max_length"] = settings["max_seq_length"]
    return found


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
