"""Shared builders for the tests of `bertjax.use` and its commands (no tests here).

`tiny_checkpoint()` is a small random BERT with a WordPiece vocabulary trained on two scenes of
Shakespeare, saved as a Hugging Face directory (what `bertjax export` writes), made once per
process.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import shutil
import tempfile
from pathlib import Path

from flax import nnx

from bertjax import BertConfig, BertForPreTraining, save_pretrained
from bertjax.data import WordPieceTokenizer, corpus_documents

_TMP = Path(tempfile.mkdtemp(prefix="bertjax-use-tests-"))
atexit.register(shutil.rmtree, _TMP, ignore_errors=True)


def sentences(n: int = 400) -> list[str]:
    """The first `n` sentences of the held-out plays."""
    docs = corpus_documents("shakespeare", split="eval")
    return list(itertools.islice((s for d in docs for s in d), n))


@functools.cache
def tiny_checkpoint(seed: int = 0) -> Path:
    """A Hugging Face directory: tiny BertForPreTraining (random weights) + its tokenizer."""
    tokenizer = WordPieceTokenizer.train(sentences(), vocab_size=400)
    config = BertConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size,
                                    pad_token_id=tokenizer.special.pad)
    out = _TMP / f"tiny-{seed}"
    save_pretrained(BertForPreTraining(config, rngs=nnx.Rngs(seed)), out, tokenizer)
    return out
