"""Property-based tests: arbitrary documents (empty lines, one-word documents, sentences longer than
the sequence, unicode and control characters) through corpus parsing, shards, pairs and batches."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from data_helpers import minilm_tokenizer, original_ids
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from bertjax.data import (
    PretrainingBatches,
    Shards,
    mask_tokens,
    split_sentences,
    text_documents,
    write_shards,
)

WORDS = ["the", "king", "unaccustomed", "naïve", "東京", "🙂", "x", "?", "ŧħę", "well-a-day"]
sentence = st.one_of(
    st.text(max_size=40),  # any unicode, control characters included
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),  # short ones
    st.lists(st.sampled_from(WORDS), min_size=20, max_size=120).map(" ".join),  # longer than S
    st.just(""), st.just("   \t"),
)
documents = st.one_of(
    st.lists(st.lists(sentence, max_size=6), max_size=8),  # often empty or a single document
    st.lists(st.lists(sentence, min_size=1, max_size=6), min_size=2, max_size=8),
)
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.slow
@SETTINGS
@given(text=st.text(max_size=200))
def test_split_sentences_loses_nothing_but_whitespace(text):
    out = split_sentences(text)
    assert all(s and s == s.strip() and "\n" not in s for s in out)
    assert "".join("".join(out).split()) == "".join(text.split())


@SETTINGS
@given(docs=st.lists(st.lists(st.text(alphabet=st.characters(
    codec="utf-8",  # a file on disk is UTF-8: lone surrogates cannot be written to it at all
    exclude_characters="\r\n"), max_size=20), max_size=5), max_size=6))
def test_text_format_round_trip(docs):
    lines = [s for d in docs for s in [*d, ""]]
    expected, current = [], []
    for line in lines:  # reference: a line blank after strip() separates documents
        if line.strip():
            current.append(line.strip())
        elif current:
            expected.append(current)
            current = []
    if current:
        expected.append(current)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.txt"
        path.write_bytes("".join(line + "\n" for line in lines).encode("utf-8"))
        assert list(text_documents(path)) == expected


@pytest.mark.slow
@settings(SETTINGS, max_examples=120)
@given(docs=documents, seq_len=st.integers(5, 48), seed=st.integers(0, 2**32 - 1),
       wwm=st.booleans())
def test_any_documents_give_well_formed_batches(docs, seq_len, seed, wwm):
    tok = minilm_tokenizer()
    s = tok.special
    kept = [[ids for ids in tok.encode_batch(d) if ids] for d in docs] if docs else []
    kept = [d for d in kept if d]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "s"
        try:
            meta = write_shards(docs, tok, out, encode_chars=50)
        except ValueError as err:
            assert not kept and "is empty" in str(err)
            return
        shards = Shards(out)
        assert meta["documents"] == len(kept) and meta["sentences"] == sum(map(len, kept))
        assert shards.tokens.tolist() == [t for d in kept for ids in d for t in ids]
        event(f"documents with tokens: {min(len(kept), 2)}+")
        if len(kept) < 2:
            return
        P = min(4, seq_len)
        it = PretrainingBatches(shards, seq_len=seq_len, global_batch_size=1, max_predictions=P,
                                seed=seed, num_epochs=1, tokenizer=tok, whole_word_mask=wwm)
        pairs = np.asarray(it.pairs)
        for r, b in enumerate(it):
            a0, a1, b0, b1, label, _ = pairs[it.order(0)[r]]
            la, lb = a1 - a0, b1 - b0
            assert 1 <= la and 1 <= lb and la + lb + 3 <= seq_len
            orig = original_ids(b)[0]
            n = la + lb + 3
            text = np.concatenate([shards.tokens[a0:a1], shards.tokens[b0:b1]])
            assert orig[0] == s.cls and orig[la + 1] == s.sep and orig[n - 1] == s.sep
            assert (np.delete(orig[1:n - 1], la) == text).all() and (orig[n:] == s.pad).all()
            assert b["attention_mask"][0].tolist() == [1] * n + [0] * (seq_len - n)
            assert b["token_type_ids"][0].tolist() == [0] * (la + 2) + [1] * (lb + 1) + [0] * (
                seq_len - n)
            valid = b["masked_weights"][0] > 0
            positions = b["masked_positions"][0][valid]
            n_cand = int((~np.isin(orig[:n], s.ids)).sum())
            target = min(P, max(1, round(0.15 * n_cand))) if n_cand else 0
            if wwm and n_cand:  # whole words while they fit in the target (the first always)
                assert 1 <= valid.sum() <= target
                continuation = tok.continuation_mask()
                masked = set(positions.tolist())
                # a masked "##" piece is masked with its word: its predecessor is too, unless
                # truncation cut the word's start away (then a special token precedes it)
                assert all(p - 1 in masked for p in masked
                           if continuation[orig[p]] and orig[p - 1] not in s.ids)
            else:
                assert valid.sum() == target
            assert (np.diff(positions) > 0).all() and (positions < n).all()
            assert not np.isin(orig[positions], s.ids).any()
            assert b["next_sentence_label"][0] == label
            for k, v in b.items():
                assert v.dtype == (np.float32 if k == "masked_weights" else np.int32)


@SETTINGS
@given(rows=st.lists(st.lists(st.booleans(), min_size=16, max_size=16), min_size=1, max_size=8),
       P=st.integers(1, 16), seed=st.integers(0, 2**64 - 1))
def test_mask_tokens_chooses_candidates_only(rows, P, seed):  # noqa: N803
    cand = np.array(rows)
    ids = np.arange(cand.size).reshape(cand.shape) % 50 + 200
    keys = np.arange(len(cand), dtype=np.uint64) + np.uint64(seed)
    out, pos, masked, w = mask_tokens(ids, cand, keys, max_predictions=P, mask_id=7,
                                      replacement_ids=np.array([300, 301]))
    for r in range(len(cand)):
        n = int(w[r].sum())
        assert n == (min(P, max(1, round(0.15 * cand[r].sum()))) if cand[r].any() else 0)
        chosen = pos[r, :n]
        assert cand[r, chosen].all() and (np.diff(chosen) > 0).all()
        assert (masked[r, :n] == ids[r, chosen]).all() and (masked[r, n:] == 0).all()
        untouched = np.ones(16, bool)
        untouched[chosen] = False
        assert (out[r, untouched] == ids[r, untouched]).all()
        assert np.isin(out[r, chosen], [7, 300, 301, *ids[r, chosen]]).all()
