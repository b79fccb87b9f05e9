"""Tokenizers through Hugging Face `tokenizers`: train a WordPiece vocabulary, or load `vocab.txt`
/ any `tokenizer.json` (WordPiece, RoBERTa's byte-level BPE, XLM-R's SentencePiece Unigram);
special-token ids are always looked up in the vocabulary, by the spellings of the model's family
(`bertjax.config.FAMILIES`: [MASK] or <mask>)."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import re
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import tokenizers
from tokenizers import BertWordPieceTokenizer
from tokenizers.processors import BertProcessing, RobertaProcessing

from bertjax.common.files import read_text, write_text_atomic
from bertjax.config import MAX_VOCAB_SIZE
from bertjax.config.families import BERT_SPECIAL_TOKENS, FAMILIES, Family
from bertjax.errors import InputError

SPECIAL_TOKENS: dict[str, str] = dict(BERT_SPECIAL_TOKENS)  # what `train` gives a vocabulary
MASK = SPECIAL_TOKENS["mask"]  # how a user writes the mask in text, whatever the model spells
SAVED_FILES = ("tokenizer.json", "vocab.txt")  # what `Tokenizer.save` writes
MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + 1  # the special tokens and one more
CONTINUATION = "##"  # WordPiece's prefix of a piece that continues a word
# A model's vocabulary may be padded past its tokenizer's (to a multiple of 8, 64 or 128, for
# faster matmuls); more unused rows than this say the tokenizer is another model's.
VOCAB_PADDING = 128
_RESERVED = re.compile(r"^\[[^\]]+\]$")  # [unused0], [PAD], ... never random replacements


@dataclasses.dataclass(frozen=True)
class SpecialTokens:
    """Ids of the special tokens in one vocabulary."""

    pad: int
    unk: int
    cls: int
    sep: int
    mask: int

    @property
    def ids(self) -> tuple[int, ...]:
        return dataclasses.astuple(self)


class Tokenizer:
    """A `tokenizers.Tokenizer` (WordPiece, byte-level BPE or Unigram) plus what the pipeline
    needs: the family's special tokens and their ids, its pair template, the vocabulary size.

    Build a model config from it with
    `BertConfig(vocab_size=tok.vocab_size, pad_token_id=tok.special.pad, ...)`.
    """

    def __init__(self, tokenizer: tokenizers.Tokenizer, source: str = "<memory>",
                 family: Family | None = None):
        # a tokenizer.json may pad/truncate every encoding (all-MiniLM pads to 128): sentences
        # must come out whole and unpadded, pair creation does the fitting (and bertjax's own
        # encoding never asks the post-processor for [CLS]/[SEP])
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self.tokenizer = tokenizer
        self.source = source
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        # the family whose special tokens these are: the model's, or the first that fits
        self.family = family or next((f for f in FAMILIES.values()
                                      if all(t in vocab for t in f.specials.values())),
                                     FAMILIES["bert"])
        self.special_tokens = self.family.specials  # role -> spelling
        missing = [tok for tok in self.special_tokens.values() if tok not in vocab]
        if missing:
            raise InputError(
                f"vocabulary {source} lacks the special tokens {', '.join(missing)}; add them "
                "(one per line in vocab.txt) or train a vocabulary with `bertjax vocab`"
            )
        self.special = SpecialTokens(**{k: vocab[v] for k, v in self.special_tokens.items()})
        if tokenizer.post_processor is None:  # a trained one: what tokenizer.json users expect
            processing = RobertaProcessing if self.family.pair_separators == 2 else BertProcessing
            tokenizer.post_processor = processing(
                (self.special_tokens["sep"], self.special.sep),
                (self.special_tokens["cls"], self.special.cls))
        self.vocab_size = max(tokenizer.get_vocab_size(with_added_tokens=True),
                              max(vocab.values()) + 1)
        self._vocab = vocab

    # --- construction ----------------------------------------------------------------------------

    @classmethod
    def train(
        cls,
        sentences: Iterable[str],
        vocab_size: int = 8000,
        *,
        lowercase: bool = True,
        min_frequency: int = 2,
        limit_alphabet: int = 1000,
        show_progress: bool = False,
        family: Family | None = None,
    ) -> Tokenizer:
        """Train on an iterator of sentences; `[PAD]` gets id 0, then `[UNK] [CLS] [SEP] [MASK]`.

        `family` (default BERT's) spells the special tokens, in that order: a RoBERTa's
        vocabulary has `<pad> <unk> <s> </s> <mask>` (ids 0 to 4) and its pair template. The
        vocabulary is WordPiece whatever the family: RoBERTa's byte-level BPE and XLM-R's
        SentencePiece are not trained here (they load from a tokenizer.json).

        Deterministic: the same sentences and options give the same vocabulary, ids included, in
        any process. `tokenizers` alone does not: it numbers the continuation pieces ("##e") in
        the order of a randomly seeded hash map and breaks ties between equally frequent merges
        by those numbers. Here the words are counted first, the continuation pieces are given
        fixed ids (sorted, right after the special tokens) and the alphabet is chosen by count,
        then character, so nothing is left to the hash order.
        """
        if not MIN_VOCAB_SIZE <= vocab_size <= MAX_VOCAB_SIZE:
            raise InputError(f"vocab_size must be from {MIN_VOCAB_SIZE} to {MAX_VOCAB_SIZE:,}, "
                             f"got {vocab_size:,}")
        if limit_alphabet < 1:
            raise InputError(f"limit_alphabet must be at least 1, got {limit_alphabet}")
        family = family or FAMILIES["bert"]
        specials = list(family.specials.values())
        wp = BertWordPieceTokenizer(lowercase=lowercase, strip_accents=None if lowercase else False)
        words = _word_counts(wp._tokenizer, sentences)
        if not words:
            raise InputError("cannot train a vocabulary on an empty corpus; check --corpus")
        alphabet = _alphabet(words, limit_alphabet)
        continuations = sorted({CONTINUATION + c for w in words for c in w[1:] if c in alphabet})
        wp.train_from_iterator(
            _repeated_words(words), vocab_size=vocab_size, min_frequency=min_frequency,
            limit_alphabet=len(alphabet), initial_alphabet=alphabet,
            special_tokens=[*specials, *continuations], show_progress=show_progress,
        )
        tokenizer = cls(_only_special_tokens_added(wp._tokenizer, specials),
                        source=f"trained (vocab_size={vocab_size})", family=family)
        if tokenizer.vocab_size > vocab_size:
            warnings.warn(f"the vocabulary has {tokenizer.vocab_size} tokens, not {vocab_size}: the "
                          f"special tokens, the corpus's {len(alphabet)} characters and their "
                          f"{len(continuations)} '##' forms are always kept", stacklevel=2)
        return tokenizer

    @classmethod
    def load(cls, path: str | os.PathLike, *, lowercase: bool = True,
             family: Family | None = None) -> Tokenizer:
        """From `tokenizer.json`, `vocab.txt`, or a directory holding one (tokenizer.json first).

        `lowercase` applies to a bare `vocab.txt` only; `tokenizer.json` carries its normaliser.
        `family`: the model's, whose special tokens to look up (None: the first that fits).
        """
        path = Path(path)
        if path.is_dir():
            for name in SAVED_FILES:  # tokenizer.json first
                if (path / name).is_file():
                    return cls.load(path / name, lowercase=lowercase, family=family)
            raise FileNotFoundError(
                f"vocabulary directory {path} holds neither tokenizer.json nor vocab.txt; pass "
                "one of those files, or train a vocabulary with `bertjax vocab`"
            )
        if not path.is_file():
            raise FileNotFoundError(
                f"vocabulary {path} does not exist; pass a vocab.txt, a tokenizer.json or a "
                "directory from `bertjax vocab`"
            )
        if path.suffix == ".json":
            try:
                tokenizer = tokenizers.Tokenizer.from_file(str(path))
            except Exception as err:  # tokenizers raises a bare Exception
                reason = " ".join(str(err).split())
                raise InputError(f"{path} is not a valid tokenizer.json ({reason}); give a "
                                 "tokenizer.json written by tokenizers or `bertjax vocab`") from err
        else:
            tokens = read_text(path, what="vocabulary").splitlines()
            if not any(t.strip() for t in tokens):
                raise InputError(f"vocabulary {path} is empty; one token per line expected")
            missing = [t for t in SPECIAL_TOKENS.values() if t not in tokens]
            if missing:  # checked before tokenizers, which would fail with a vaguer message
                raise InputError(
                    f"vocabulary {path} lacks the special tokens {', '.join(missing)}; add them "
                    "(one per line) or train a vocabulary with `bertjax vocab`"
                )
            wp = BertWordPieceTokenizer(str(path), lowercase=lowercase,
                                        strip_accents=None if lowercase else False)
            tokenizer = wp._tokenizer
        return cls(tokenizer, source=str(path), family=family)

    def save(self, directory: str | os.PathLike) -> None:
        """Write `tokenizer.json` and, for WordPiece, `vocab.txt` (ids in order) into
        `directory`, each written aside and renamed into place (a crash never leaves half a
        file)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        json_file, vocab_file = SAVED_FILES
        write_text_atomic(directory / json_file, self.tokenizer.to_str(pretty=True))
        if self.wordpiece:  # a BPE or Unigram vocabulary is only whole in tokenizer.json
            write_text_atomic(directory / vocab_file,
                              "".join(t + "\n" for t in self.id_to_token_list()))

    # --- use -------------------------------------------------------------------------------------

    def id_to_token_list(self) -> list[str]:
        tokens = [f"[unused_id_{i}]" for i in range(self.vocab_size)]
        for token, i in self._vocab.items():
            tokens[i] = token
        return tokens

    def id_to_token(self, i: int) -> str:
        return self.tokenizer.id_to_token(int(i)) or self.special_tokens["unk"]

    def token_text(self, i: int) -> str:
        """How token `i` reads in text: a WordPiece token as it is ("##ing" joins the word
        before), a byte-level or SentencePiece one decoded ("Ġthe" -> " the")."""
        return self.id_to_token(i) if self.wordpiece else self.tokenizer.decode([int(i)])

    @property
    def wordpiece(self) -> bool:
        """Whether this is a WordPiece vocabulary (BERT's), not BPE or Unigram."""
        return type(self.tokenizer.model).__name__ == "WordPiece"

    def with_mask_token(self, text: str) -> str:
        """`text` with each [MASK] written as this vocabulary's mask token (`<mask>`)."""
        mask = self.special_tokens["mask"]
        return text if mask == MASK else text.replace(MASK, mask)

    def token_to_id(self, token: str) -> int | None:
        return self._vocab.get(token)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, without [CLS]/[SEP]."""
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    @property
    def lowercase(self) -> bool:
        """Whether the normaliser lower-cases text (an uncased vocabulary)."""
        def lowers(spec: dict | None) -> bool:
            if not spec:
                return False
            if spec.get("type") == "Sequence":
                return any(lowers(n) for n in spec.get("normalizers", []))
            return spec.get("type") == "Lowercase" or bool(spec.get("lowercase"))

        return lowers(json.loads(self.tokenizer.to_str()).get("normalizer"))

    @property
    def vocab_hash(self) -> str:
        """sha256 of the token -> id table: shards remember which vocabulary made them."""
        table = json.dumps(sorted(self._vocab.items(), key=lambda kv: kv[1]), ensure_ascii=False)
        return hashlib.sha256(table.encode()).hexdigest()

    def replacement_ids(self) -> np.ndarray:
        """Ids a masked token may be replaced with: every token except bracketed ones ([PAD],
        [unused3], ...) and added special tokens."""
        special = {i for i, t in self.tokenizer.get_added_tokens_decoder().items() if t.special}
        special |= set(self.special.ids)
        ids = [i for t, i in self._vocab.items() if i not in special and not _RESERVED.match(t)]
        return np.array(sorted(ids), dtype=np.int32)

    def continuation_mask(self) -> np.ndarray:
        """Bool per id: True for WordPiece continuation pieces ("##ing"), for whole-word masking."""
        out = np.zeros(self.vocab_size, dtype=bool)
        model = json.loads(self.tokenizer.model.__getstate__())
        prefix = model.get("continuing_subword_prefix") or CONTINUATION
        for token, i in self._vocab.items():
            out[i] = token.startswith(prefix) and len(token) > len(prefix)
        return out


# --- deterministic training --------------------------------------------------------------------


def fits_vocabulary(tokens: int, rows: int) -> bool:
    """Whether a tokenizer of `tokens` ids can be the one of a model with `rows` embedding rows:
    not more, and not so many fewer that the rest could not be padding (`VOCAB_PADDING`)."""
    return tokens <= rows < tokens + VOCAB_PADDING


def _word_counts(tokenizer: tokenizers.Tokenizer, sentences: Iterable[str]) -> Counter[str]:
    """How often each word occurs, after the tokenizer's own normaliser and pre-tokenizer (the
    words its trainer would count)."""
    normalizer, pre_tokenizer = tokenizer.normalizer, tokenizer.pre_tokenizer
    counts: Counter[str] = Counter()
    sentences = iter(sentences)
    while batch := list(itertools.islice(sentences, 1024)):  # one call per 1024 sentences
        text = normalizer.normalize_str("\n".join(batch))  # a newline separates words too
        counts.update(w for w, _ in pre_tokenizer.pre_tokenize_str(text))
    return counts


def _alphabet(words: Counter[str], limit: int) -> list[str]:
    """The `limit` most frequent characters, ties broken by the character."""
    chars: Counter[str] = Counter()
    for word, n in words.items():
        for c in word:
            chars[c] += n
    kept = sorted(chars, key=lambda c: (-chars[c], c))[:limit]
    return sorted(kept)


def _repeated_words(words: Counter[str], chunk: int = 4096) -> Iterator[str]:
    """The counted words as text the trainer counts back to the same numbers (a word is either
    one punctuation mark or has none, so joining copies with spaces keeps them apart)."""
    for word in sorted(words):
        left = words[word]
        while left:
            n = min(left, chunk)
            yield " ".join([word] * n)
            left -= n


def _only_special_tokens_added(tokenizer: tokenizers.Tokenizer, specials: list[str]
                               ) -> tokenizers.Tokenizer:
    """The trained tokenizer without the continuation pieces as added tokens (they were added
    only to fix their ids; as added tokens they would be matched in raw text): `specials` alone."""
    spec = json.loads(tokenizer.to_str())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] in specials]
    return tokenizers.Tokenizer.from_str(json.dumps(spec))
