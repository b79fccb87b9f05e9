"""The checks the public `bertjax.use` functions make of their arguments before any work, as the
command line checks its options: a message naming the argument and the fix, instead of an error
from deep inside (a string iterated character by character, a head that is not there, the ids of
another tokenizer's vocabulary read as this model's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bertjax.data.tokenizer import fits_vocabulary
from bertjax.errors import InputError


def check_texts(texts: Any, argument: str = "texts") -> None:
    """TypeError unless `texts` is a sequence of strings: one string (which would be read as its
    characters) or an item of another type (None, a number, bytes) is named with its index."""
    if isinstance(texts, str | bytes):
        raise TypeError(f"{argument} must be a list of strings, got one {type(texts).__name__}; "
                        f"pass [{argument[:-1] if argument.endswith('s') else argument}] for one")
    if not isinstance(texts, Sequence):
        raise TypeError(f"{argument} must be a list of strings, got {type(texts).__name__}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            fix = " (decode bytes first: text.decode('utf-8'))" if isinstance(text, bytes) else ""
            raise TypeError(f"{argument}[{i}] is {type(text).__name__}, not a string{fix}")


def check_head(model: Any, head: str, function: str, suggestion: str) -> None:
    """TypeError unless `model` is a bertjax model with the head `function` runs (`head`, one of
    its class's `head_modules`); `suggestion` names a class that has it."""
    if not hasattr(type(model), "head_modules") or not hasattr(model, "config"):
        raise TypeError(f"{function} takes a bertjax model (e.g. from bertjax.from_pretrained), "
                        f"got {type(model).__name__}")
    if head not in type(model).head_modules:
        raise TypeError(f"{function} needs a model with the {head} head; a "
                        f"{type(model).__name__} has none: load the model with "
                        f"model_cls=bertjax.{suggestion} (or a class with that head)")


def check_tokenizer(config: Any, tokenizer: Any) -> None:
    """InputError unless `tokenizer`'s ids are this model's vocabulary: not more tokens than the
    model has rows, nor so many fewer that the rest could not be padding (`fits_vocabulary`)."""
    if not hasattr(tokenizer, "vocab_size") or not hasattr(tokenizer, "encode_batch"):
        raise TypeError(f"tokenizer must be a bertjax.Tokenizer (e.g. from "
                        f"bertjax.from_pretrained), got {type(tokenizer).__name__}")
    tokens, rows = int(tokenizer.vocab_size), int(config.vocab_size)
    if not fits_vocabulary(tokens, rows):
        raise InputError(f"the tokenizer has {tokens:,} tokens but the model's vocabulary has "
                         f"{rows:,} rows: it is another model's tokenizer, whose ids would be "
                         "read as other words; pass the tokenizer loaded with this model "
                         "(bertjax.from_pretrained returns both)")


def check_model_and_tokenizer(model: Any, tokenizer: Any, function: str, head: str | None = None,
                              suggestion: str = "BertModel") -> None:
    """The model (with `head`, if one is needed) and tokenizer of a `bertjax.use` function."""
    if head is not None:
        check_head(model, head, function, suggestion)
    elif not hasattr(model, "config"):
        raise TypeError(f"{function} takes a bertjax model (e.g. from bertjax.from_pretrained), "
                        f"got {type(model).__name__}")
    check_tokenizer(model.config, tokenizer)
