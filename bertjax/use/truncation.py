"""Saying that a text was cut to fit: which text (as the user gave it: "text 2", "--query",
"lines.txt:7"), by how many tokens, the limit, and what to do about it."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from bertjax.use.encode import Encoded, TruncationWarning


def cut_message(name: str, cut: int, max_length: int, model_limit: int,
                option: str = "max_length") -> str:
    """The warning: NAME has N more tokens than LIMIT: cut to fit; FIX. `option` is what raises
    `max_length` when it is below the model's `model_limit` positions (e.g. "--max-length")."""
    if max_length >= model_limit:
        return (f"{name} has {cut} more tokens than the model's {model_limit} positions allow: "
                "cut to fit; shorten it to keep all of it")
    return (f"{name} has {cut} more tokens than the {max_length} allowed: cut to fit; raise "
            f"{option} (the model takes up to {model_limit}) or shorten it")


def warn_cut(encoded: Encoded | Any, names: Sequence[str], max_length: int, model_limit: int,
             option: str = "max_length", stacklevel: int = 3) -> None:
    """A `TruncationWarning` (`cut_message`) for each row of `encoded` that was cut."""
    for name, cut in zip(names, encoded.cut, strict=True):
        if cut:
            warnings.warn(cut_message(name, cut, max_length, model_limit, option),
                          TruncationWarning, stacklevel=stacklevel)
