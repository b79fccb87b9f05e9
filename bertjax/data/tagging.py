"""Tagged sentences for token classification (named entities, chunks): CoNLL-style or JSON-lines
files, the tag set, and WordPiece encoding with one label per word.

A CoNLL file holds one token per line, its columns split on whitespace, the token first and the
tag last (CoNLL-2003's `EU NNP B-NP B-ORG` reads as ("EU", "B-ORG")), a blank line between
sentences; `-DOCSTART-` lines are skipped. A `.jsonl` file holds one sentence per line:
`{"tokens": ["EU", "rejects"], "tags": ["B-ORG", "O"]}`. Tags are BIO (IOB2): `O`, `B-X` begins
an entity of type X, `I-X` continues it. Every problem is a ValueError naming the file and line.

Words become WordPiece pieces; the first piece of each word carries the word's label and the
others are ignored by the loss (`-100`), or, with `label_all_pieces`, carry it too with B-X
turned into I-X (as the Hugging Face token-classification example does).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from bertjax.common.files import read_text
from bertjax.data.records import json_records
from bertjax.data.tokenizer import Tokenizer
from bertjax.errors import InputError

IGNORE = -100  # the label of a position the loss skips (special tokens, padding, later pieces)
_BIO = re.compile(r"^[BI]-\S+$")
_OTHER_SCHEME = re.compile(r"^[EISLU]-")  # IOBES / BILOU prefixes, named in the message


@dataclasses.dataclass(frozen=True)
class TaggedSentence:
    tokens: tuple[str, ...]
    tags: tuple[str, ...]  # one BIO tag per token
    where: str  # "file:line" of the sentence's first token, for messages


def read_tagged(
    path: str | Path,
    *,
    what: str = "file",
    tokens_field: str = "tokens",
    tags_field: str = "tags",
) -> list[TaggedSentence]:
    """The sentences of a `.jsonl`/`.json` file (one JSON object per line, with `tokens_field`
    and `tags_field` lists) or of any other file read as CoNLL columns (token first, tag last).

    A ValueError names the file (as `what`, e.g. "--train") and line of each problem: tags of
    another length than the tokens, a line of one column, an empty token, a tag that is not BIO
    (IOB2: IOB1's I- that opens an entity, and IOBES or BILOU tags, are refused), no sentences."""
    path = Path(path)
    content = read_text(path, what)
    if path.suffix.lower() in (".jsonl", ".json"):
        sentences = _json_sentences(path, content, tokens_field, tags_field)
    else:
        sentences = _conll_sentences(path, content)
    if not sentences:
        raise InputError(f"{what} {path} holds no sentences; give one token and its tag per line "
                         "with a blank line between sentences (CoNLL), or one JSON object per "
                         f"line with '{tokens_field}' and '{tags_field}' (.jsonl)")
    return sentences


def _conll_sentences(path: Path, content: str) -> list[TaggedSentence]:
    sentences: list[TaggedSentence] = []
    rows: list[tuple[int, str, str]] = []  # (line, token, tag) of the sentence being read

    def close() -> None:
        if rows:
            tags = [tag for _, _, tag in rows]
            _check_bio(tags, lambda i: f"{path}:{rows[i][0]}")
            sentences.append(TaggedSentence(tuple(t for _, t, _ in rows), tuple(tags),
                                            f"{path}:{rows[0][0]}"))
            rows.clear()

    for n, line in enumerate(content.removeprefix("\ufeff").splitlines(), 1):
        columns = line.split()
        if not columns or columns[0] == "-DOCSTART-":
            close()
            continue
        if len(columns) == 1:
            raise InputError(f"{path}:{n} has one column ({columns[0]!r}); give the token first "
                             "and its tag last, separated by whitespace (a blank line ends a "
                             "sentence)")
        rows.append((n, columns[0], columns[-1]))
    close()
    return sentences


def _json_sentences(path: Path, content: str, tokens_field: str, tags_field: str
                    ) -> list[TaggedSentence]:
    sentences = []
    for where, record in json_records(path, content.removeprefix("\ufeff")):
        tokens = _string_list(record, tokens_field, where, "token", "--tokens-field")
        tags = _string_list(record, tags_field, where, "tag", "--tags-field")
        if len(tags) != len(tokens):
            raise InputError(f"{where}: {len(tokens)} tokens but {len(tags)} tags; give one tag "
                             "per token")
        if not tokens:
            raise InputError(f"{where}: the sentence has no tokens; drop the line")
        _check_bio(tags, functools.partial(_tag_place, where))
        sentences.append(TaggedSentence(tuple(tokens), tuple(tags), where))
    return sentences


def _string_list(record: dict, field: str, where: str, item: str, option: str) -> list[str]:
    """`record[field]`, a list of non-empty strings (tokens or tags)."""
    if field not in record:
        fields = ", ".join(map(str, record)) or "none"
        raise InputError(f"{where}: no field '{field}' (fields: {fields}); set {option}")
    values = record[field]
    if not isinstance(values, list):
        raise InputError(f"{where}: field '{field}' is not a list; give a list of {item}s")
    for i, value in enumerate(values):
        if isinstance(value, int) and not isinstance(value, bool) and item == "tag":
            raise InputError(f"{where}: tag {i + 1} is the integer {value}; give tag names "
                             "(e.g. \"B-PER\"), not their ids")
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"{where}: {item} {i + 1} is {json.dumps(value)}; every {item} is "
                             "a non-empty string")
    return values


def _tag_place(where: str, i: int) -> str:
    """How a message names tag `i` of the record at `where`."""
    return f"{where}: tag {i + 1}"


def _check_bio(tags: Sequence[str], where: Callable[[int], str]) -> None:
    """Every tag is O, B-X or I-X, and every I-X continues a B-X or I-X (BIO, also called IOB2)."""
    prev = None
    for i, tag in enumerate(tags):
        if tag != "O" and not _BIO.match(tag):
            hint = (" (IOBES/BILOU tags are not read: convert them to BIO)"
                    if _OTHER_SCHEME.match(tag) else "")
            raise InputError(f"{where(i)}: tag {tag!r} is not a BIO tag; BIO/IOB2 is expected: "
                             f"O, B-TYPE or I-TYPE{hint}")
        if tag.startswith("I-") and prev not in (f"B-{tag[2:]}", tag):
            after = f"follows {prev!r}" if prev else "starts the sentence"
            raise InputError(f"{where(i)}: tag {tag!r} {after}; in BIO/IOB2 an entity begins "
                             f"with B-{tag[2:]} (an I- that opens an entity is IOB1: convert it "
                             "to B-)")
        prev = tag


def label_list(sentences: Sequence[TaggedSentence]) -> tuple[str, ...]:
    """The tag set of `sentences`: "O" first, then B-X and I-X for every type X seen (both, so
    that a type seen only in one-word entities still has an I- label), sorted: label id i is the
    i-th."""
    types = {tag[2:] for s in sentences for tag in s.tags if tag != "O"}
    return ("O", *sorted(f"{p}-{t}" for t in types for p in "BI"))


def b_to_i_ids(label_ids: Mapping[str, int]) -> dict[int, int]:
    """For each label id, the id of the label a word's later pieces get: B-X's I-X (if known),
    any other label itself."""
    out = {}
    for tag, i in label_ids.items():
        inside = f"I-{tag[2:]}" if tag.startswith("B-") else tag
        out[i] = label_ids.get(inside, i)
    return out


def align_labels(
    word_ids: Sequence[int | None],
    tag_ids: Sequence[int],
    *,
    label_all_pieces: bool = False,
    b_to_i: Mapping[int, int] | None = None,
    ignore: int = IGNORE,
) -> list[int]:
    """One label per piece, given each piece's word (`word_ids`: None for special tokens and
    padding, as a Hugging Face fast tokenizer's `word_ids()`) and each word's label id: the
    first piece of a word gets its label, the others `ignore`, or with `label_all_pieces` the
    word's label mapped through `b_to_i` (see `b_to_i_ids`)."""
    if label_all_pieces and b_to_i is None:
        raise InputError("label_all_pieces needs b_to_i (from b_to_i_ids): a word's later pieces "
                         "get I-X, not B-X, or each piece would begin an entity")
    labels, seen = [], set()
    for w in word_ids:
        if w is None:
            labels.append(ignore)
            continue
        if not 0 <= w < len(tag_ids):
            raise InputError(f"word id {w} has no tag: the sentence has {len(tag_ids)} words")
        if w not in seen:
            labels.append(tag_ids[w])
            seen.add(w)
        else:
            labels.append(b_to_i[tag_ids[w]] if label_all_pieces and b_to_i else ignore)
    return labels


def words_cut(word_ids: Sequence[int | None], n_words: int) -> tuple[int, ...]:
    """The words (indices below `n_words`) with no piece in `word_ids`: cut by truncation, so
    they have no label and no prediction."""
    present = {w for w in word_ids if w is not None}
    return tuple(w for w in range(n_words) if w not in present)


@dataclasses.dataclass
class TaggedBatch:
    """Encoded sentences, right padded to `max_length`: [CLS] pieces [SEP] [PAD]..."""

    input_ids: np.ndarray  # (N, S) int32
    token_type_ids: np.ndarray  # (N, S) int32, all 0
    attention_mask: np.ndarray  # (N, S) int32, 1 on [CLS], pieces and [SEP]
    labels: np.ndarray  # (N, S) int32, the ignore label on special tokens, padding, later pieces
    word_ids: np.ndarray  # (N, S) int32, each piece's word, -1 on special tokens and padding
    cut: list[tuple[int, ...]]  # each sentence's words cut to fit max_length

    def arrays(self) -> dict[str, np.ndarray]:
        """The model inputs and the labels."""
        return {"input_ids": self.input_ids, "token_type_ids": self.token_type_ids,
                "attention_mask": self.attention_mask, "labels": self.labels}


def encode_tagged(
    tokenizer: Tokenizer,
    sentences: Sequence[TaggedSentence],
    label_ids: Mapping[str, int],
    max_length: int,
    *,
    label_all_pieces: bool = False,
    ignore: int = IGNORE,
) -> TaggedBatch:
    """[CLS] pieces [SEP] of each sentence, the words split by `tokenizer` one by one (never
    merged across words) and their pieces cut to `max_length - 2`, with labels from `label_ids`
    (tag -> id) aligned by `align_labels`. A word the tokenizer turns into no pieces (a control
    or zero-width character) becomes [UNK], so every word keeps a position and a label."""
    if max_length < 3:
        raise InputError(f"max_length {max_length} leaves no room for a word after [CLS] and "
                         "[SEP]; give at least 3")
    b_to_i = b_to_i_ids(label_ids)
    shape = (len(sentences), max_length)
    out = TaggedBatch(np.full(shape, tokenizer.special.pad, np.int32), np.zeros(shape, np.int32),
                      np.zeros(shape, np.int32), np.full(shape, ignore, np.int32),
                      np.full(shape, -1, np.int32), [])
    pieces = _word_pieces(tokenizer, sentences)
    for row, (sentence, (ids, words)) in enumerate(zip(sentences, pieces, strict=True)):
        ids, words = ids[:max_length - 2], words[:max_length - 2]
        row_ids = [tokenizer.special.cls, *ids, tokenizer.special.sep]
        row_words = [None, *words, None]
        labels = align_labels(row_words, _tag_ids(sentence, label_ids),
                              label_all_pieces=label_all_pieces, b_to_i=b_to_i, ignore=ignore)
        n = len(row_ids)
        out.input_ids[row, :n], out.attention_mask[row, :n], out.labels[row, :n] = \
            row_ids, 1, labels
        out.word_ids[row, :n] = [-1 if w is None else w for w in row_words]
        out.cut.append(words_cut(row_words, len(sentence.tokens)))
    return out


def _tag_ids(sentence: TaggedSentence, label_ids: Mapping[str, int]) -> list[int]:
    unknown = sorted({t for t in sentence.tags if t not in label_ids})
    if unknown:
        raise InputError(f"{sentence.where}: tags the model does not know: {', '.join(unknown)} "
                         f"(known: {', '.join(label_ids)})")
    return [label_ids[t] for t in sentence.tags]


def _word_pieces(tokenizer: Tokenizer, sentences: Sequence[TaggedSentence]
                 ) -> list[tuple[list[int], list[int]]]:
    """(piece ids, word index of each piece) per sentence, without [CLS]/[SEP].

    `Tokenizer` has no method for pre-split words; this uses its Hugging Face
    `tokenizers.Tokenizer` (`.tokenizer`), whose `encode_batch(..., is_pretokenized=True)` keeps
    each word's index in `word_ids`. Words with no pieces get [UNK]."""
    encodings = tokenizer.tokenizer.encode_batch(
        [list(s.tokens) for s in sentences], is_pretokenized=True, add_special_tokens=False)
    out = []
    for sentence, encoding in zip(sentences, encodings, strict=True):
        pieces: list[list[int]] = [[] for _ in sentence.tokens]
        for i, w in zip(encoding.ids, encoding.word_ids, strict=True):
            assert w is not None  # pre-tokenized, no special tokens: every piece has its word
            pieces[w].append(i)
        ids, words = [], []
        for w, word in enumerate(pieces):
            word = word or [tokenizer.special.unk]
            ids.extend(word)
            words.extend([w] * len(word))
        out.append((ids, words))
    return out


def piece_counts(tokenizer: Tokenizer, sentences: Sequence[TaggedSentence]) -> np.ndarray:
    """(N,) tokens each sentence takes as [CLS] pieces [SEP], before any cut."""
    return np.array([len(ids) + 2 for ids, _ in _word_pieces(tokenizer, sentences)], np.int64)
