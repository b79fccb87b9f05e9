"""Shards, NSP pairs and batches: contents, statistics over 100k+ sequences, resume, sharding."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from data_helpers import (
    fresh_dir,
    minilm_tokenizer,
    original_ids,
    shakespeare_shards,
    shakespeare_tokenizer,
)

from bertjax.data import (
    PretrainingBatches,
    Shards,
    corpus_documents,
    create_pairs,
    shakespeare_documents,
    write_shards,
)

SEQ, PRED = 128, 20


def _docs(n: int, sentences: int = 6) -> list[list[str]]:
    return [[f"document {d} sentence {s} says something about thing {d * 7 + s}."
             for s in range(sentences)] for d in range(n)]


# --- shards --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_shards_hold_every_sentence_and_report_statistics():
    shards, tok = shakespeare_shards(), shakespeare_tokenizer()
    meta = shards.meta
    docs = list(shakespeare_documents("train"))
    assert meta["documents"] == len(docs) == shards.num_documents
    assert meta["sentences"] == sum(map(len, docs)) == shards.num_sentences
    assert meta["tokens"] == shards.num_tokens > 1_000_000
    assert meta["unknown_rate"] < 1e-3 and meta["token_dtype"] == "uint16"
    assert meta["vocab_sha256"] == tok.vocab_hash and meta["special_tokens"]["pad"] == 0
    # spot-check documents against a fresh tokenisation
    offsets, sent = shards.document_offsets, shards.sentence_offsets
    for d in (0, 17, len(docs) - 1):
        expected = tok.encode_batch(docs[d])
        got = [shards.tokens[sent[i]:sent[i + 1]].tolist() for i in range(offsets[d],
                                                                           offsets[d + 1])]
        assert got == expected


def test_long_sentences_are_not_truncated_by_a_tokenizer_json(tmp_path):
    long = " ".join(["word"] * 600)  # all-MiniLM's tokenizer.json truncates/pads to 128
    write_shards([[long], ["short one"]], minilm_tokenizer(), tmp_path / "s")
    shards = Shards(tmp_path / "s")
    assert shards.num_tokens == 600 + 2 and shards.sentence_offsets.tolist() == [0, 600, 602]


def test_write_is_atomic_when_the_corpus_fails_midway(tmp_path):
    def docs():
        yield from _docs(5)
        raise RuntimeError("disk on fire")

    out = tmp_path / "shards"
    with pytest.raises(RuntimeError, match="disk on fire"):
        write_shards(docs(), minilm_tokenizer(), out, encode_chars=10)
    assert not out.exists() and os.listdir(tmp_path) == []
    write_shards(_docs(3), minilm_tokenizer(), out)
    with pytest.raises(FileExistsError, match="already exists"):
        write_shards(_docs(3), minilm_tokenizer(), out)
    with pytest.raises(RuntimeError):  # a failed overwrite keeps the old directory intact
        write_shards(docs(), minilm_tokenizer(), out, overwrite=True)
    assert Shards(out).num_documents == 3 and sorted(os.listdir(tmp_path)) == ["shards"]


def test_empty_and_single_document_corpora_are_rejected(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n   \n")
    with pytest.raises(ValueError, match=r"empty\.txt is empty: no document"):
        write_shards(corpus_documents(empty), minilm_tokenizer(), tmp_path / "a",
                     corpus=str(empty))
    one = tmp_path / "one.txt"
    one.write_text("only one document.\nwith two sentences.\n")
    with pytest.raises(ValueError, match=r"has 1 document\(s\); at least 2 are needed.*blank line"):
        write_shards(corpus_documents(one), minilm_tokenizer(), tmp_path / "b", corpus=str(one),
                     min_documents=2)
    write_shards(corpus_documents(one), minilm_tokenizer(), tmp_path / "c")
    with pytest.raises(ValueError, match=r"1 document\(s\); next-sentence prediction needs"):
        create_pairs(Shards(tmp_path / "c"), 32)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_vocabulary_mismatch_is_refused():
    with pytest.raises(ValueError, match="tokenised with another vocabulary"):
        PretrainingBatches(shakespeare_shards(), tokenizer=minilm_tokenizer())


# --- statistics ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served():
    """One epoch of 100k+ sequences over 9 passes of pair creation (dupe_factor), seq 128."""
    it = PretrainingBatches(shakespeare_shards(), seq_len=SEQ, global_batch_size=512,
                            max_predictions=PRED, dupe_factor=9, seed=3, num_epochs=1,
                            cache_pairs=False)
    batches = list(it)
    cat = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
    index = it.order(0)[:len(cat["input_ids"])]
    return it, cat, index


@pytest.mark.slow
def test_statistics_over_100k_sequences(served, record_property):
    it, b, _ = served
    n = len(b["input_ids"])
    assert n >= 100_000
    s = it.special
    special = np.array(s.ids)
    orig = original_ids(b)
    valid = b["masked_weights"] > 0
    rows = np.broadcast_to(np.arange(n)[:, None], valid.shape)[valid]
    pos = b["masked_positions"][valid]
    maskable = (b["attention_mask"] == 1) & ~np.isin(orig, special)
    masked_fraction = valid.sum() / maskable.sum()
    served_tok = b["input_ids"][rows, pos]
    label = b["masked_ids"][valid]
    is_mask = served_tok == s.mask
    same = served_tok == label
    other = ~is_mask & ~same
    nsp = b["next_sentence_label"].mean()
    stats = {"masked": masked_fraction, "mask": is_mask.mean(), "random": other.mean(),
             "unchanged": same.mean(), "not_next": nsp}
    record_property("data_statistics", json.dumps({k: round(float(v), 5) for k, v in
                                                   stats.items()}))
    print("statistics:", {k: f"{100 * v:.2f}%" for k, v in stats.items()})
    assert abs(masked_fraction - 0.15) < 0.005
    assert abs(is_mask.mean() - 0.8) < 0.01
    assert abs(other.mean() - 0.1) < 0.01
    assert abs(same.mean() - 0.1) < 0.01
    assert abs(nsp - 0.5) < 0.01
    # never a special token or padding as a prediction, nor as a random replacement
    assert not np.isin(label, special).any()
    assert (b["attention_mask"][rows, pos] == 1).all()
    assert not np.isin(served_tok[other], special).any()
    # the rounding rule of the original, over maskable tokens
    n_maskable = maskable.sum(axis=1)
    expected = np.minimum(PRED, np.maximum(1, np.rint(0.15 * n_maskable)))
    assert (valid.sum(axis=1) == expected).all()
    # padding slots are zero
    assert (b["masked_positions"][~valid] == 0).all() and (b["masked_ids"][~valid] == 0).all()
    assert (np.diff(b["masked_positions"], axis=1)[valid[:, 1:]] > 0).all()  # ascending


def test_layout_and_pairs_against_source_offsets(served):
    it, b, index = served
    shards = it.shards
    pairs = np.asarray(it.pairs)[index]
    a0, a1, b0, b1, label, boundary = pairs.T
    la, lb = a1 - a0, b1 - b0
    assert (la >= 1).all() and (lb >= 1).all() and (la + lb + 3 <= SEQ).all()
    length = b["attention_mask"].sum(axis=1)
    assert (length == la + lb + 3).all()
    assert (b["attention_mask"] == (np.arange(SEQ) < length[:, None])).all()
    tt = b["token_type_ids"]
    assert (tt.sum(axis=1) == lb + 1).all() and (tt[np.arange(len(tt)), la + 2] == 1).all()
    orig = original_ids(b)
    s = it.special
    assert (orig[:, 0] == s.cls).all()
    assert (orig[np.arange(len(orig)), la + 1] == s.sep).all()
    assert (orig[np.arange(len(orig)), length - 1] == s.sep).all()
    assert (orig[b["attention_mask"] == 0] == s.pad).all()
    assert (b["next_sentence_label"] == label).all()
    # the served tokens are exactly the source spans (checked on a sample of rows)
    for r in range(0, len(orig), 997):
        text = np.concatenate([shards.tokens[a0[r]:a1[r]], shards.tokens[b0[r]:b1[r]]])
        row = orig[r, 1:length[r] - 1]
        assert (np.delete(row, la[r]) == text).all()
    # IsNext: B continues A in the same document, split at a sentence boundary; NotNext: B from
    # another document
    doc_tokens = shards.document_token_offsets()
    doc_a = np.searchsorted(doc_tokens, a0, side="right") - 1
    doc_b = np.searchsorted(doc_tokens, b0, side="right") - 1
    assert (np.searchsorted(doc_tokens, b1 - 1, side="right") - 1 == doc_b).all()
    assert (np.searchsorted(doc_tokens, a1 - 1, side="right") - 1 == doc_a).all()
    nxt = label == 0
    assert (doc_a[nxt] == doc_b[nxt]).all()
    assert (a1[nxt] <= boundary[nxt]).all() and (boundary[nxt] <= b0[nxt]).all()
    assert np.isin(boundary, shards.sentence_offsets).all()
    assert (doc_a[~nxt] != doc_b[~nxt]).all()


# --- determinism, dynamic masks, resume, sharding ------------------------------------------------


def _iterator(**kw):
    args = dict(seq_len=64, global_batch_size=2048, max_predictions=10, seed=5, cache_pairs=False)
    return PretrainingBatches(shakespeare_shards(), **{**args, **kw})


def _equal(x: dict[str, np.ndarray], y: dict[str, np.ndarray]) -> bool:
    return x.keys() == y.keys() and all(
        x[k].dtype == y[k].dtype and np.array_equal(x[k], y[k]) for k in x)


def test_resume_gives_the_same_batches_bitwise_across_an_epoch_boundary():
    it = _iterator()
    # whole batches of the pairs this (deterministically trained) vocabulary makes
    assert it.steps_per_epoch == len(it.pairs) // 2048 == 9
    for _ in range(8):
        next(it)
    state = json.loads(json.dumps(it.get_state()))
    expected = [next(it) for _ in range(5)]
    assert it.get_state()["epoch"] == 1
    again = _iterator()
    again.set_state(state)
    assert all(_equal(x, y) for x, y in zip(expected, [next(again) for _ in range(5)],
                                            strict=True))
    with pytest.raises(ValueError, match=r"seed saved 5 vs now 6.*same shards"):
        _iterator(seed=6).set_state(state)


def test_seed_determinism_and_dynamic_masks():
    first, other_seed = next(_iterator()), next(_iterator(seed=6))
    assert _equal(first, next(_iterator()))
    assert not np.array_equal(first["input_ids"], other_seed["input_ids"])
    it = _iterator()
    index = np.arange(2048)
    e0, e0_again, e1 = it.make_batch(index, 0), it.make_batch(index, 0), it.make_batch(index, 1)
    assert _equal(e0, e0_again)
    assert np.array_equal(original_ids(e0), original_ids(e1))  # same pairs ...
    changed = (e0["masked_positions"] != e1["masked_positions"]).any(axis=1)
    assert changed.mean() > 0.99  # ... new masks every epoch


def test_processes_get_disjoint_rows_that_make_up_the_global_batch():
    whole = _iterator()
    parts = [_iterator(process_index=p, process_count=4) for p in range(4)]
    for _ in range(3):
        g = next(whole)
        local = [next(p) for p in parts]
        assert all(x["input_ids"].shape == (512, 64) for x in local)
        assert _equal(g, {k: np.concatenate([x[k] for x in local]) for k in g})
    orders = [p.order(0)[p.process_index * 512:(p.process_index + 1) * 512] for p in parts]
    assert len(np.unique(np.concatenate(orders))) == 2048
    with pytest.raises(ValueError, match="not divisible by process_count 3"):
        _iterator(process_count=3, process_index=0)


def test_finite_epochs_and_too_small_corpus(tmp_path):
    it = _iterator(num_epochs=2)
    assert len(it) == 9 and sum(1 for _ in it) == 18
    write_shards(_docs(3, 2), minilm_tokenizer(), tmp_path / "s")
    with pytest.raises(ValueError, match="fewer than one global batch of 256"):
        PretrainingBatches(tmp_path / "s", seq_len=32, max_predictions=5)


def test_pairs_are_cached_next_to_the_shards_when_asked():
    """Reading shards writes nothing there (issue 45: evaluating a run wrote into its
    data/eval/); `cache_pairs=True`, what the pre-training job passes, keeps the pairs."""
    out = fresh_dir("cache") / "s"
    write_shards(_docs(40), minilm_tokenizer(), out)
    before = sorted(p.name for p in out.iterdir())
    reader = PretrainingBatches(out, seq_len=32, global_batch_size=8, max_predictions=5)
    assert sorted(p.name for p in out.iterdir()) == before
    a = PretrainingBatches(out, seq_len=32, global_batch_size=8, max_predictions=5,
                           cache_pairs=True)
    cached = list(out.glob("pairs-*.npy"))
    assert len(cached) == 1 and np.array_equal(a.pairs, reader.pairs)
    b = PretrainingBatches(out, seq_len=32, global_batch_size=8, max_predictions=5)
    assert isinstance(b.pairs, np.memmap) and np.array_equal(a.pairs, b.pairs)
    assert _equal(next(a), next(b))


def test_whole_word_masking_masks_every_piece_of_a_word():
    it = _iterator(whole_word_mask=True, seq_len=128, max_predictions=20, global_batch_size=1024)
    cont = shakespeare_tokenizer().continuation_mask()
    b = next(it)
    orig = original_ids(b)
    chosen = np.zeros(orig.shape, bool)
    valid = b["masked_weights"] > 0
    rows = np.broadcast_to(np.arange(len(orig))[:, None], valid.shape)
    chosen[rows[valid], b["masked_positions"][valid]] = True
    is_cont = cont[orig]
    # a continuation piece is chosen iff the piece before it is (cut words only at the P limit)
    follows = chosen[:, 1:] == chosen[:, :-1]
    broken = is_cont[:, 1:] & ~follows
    assert broken.sum() <= 0.01 * is_cont.sum()
    assert (valid.sum(axis=1) >= 1).all()
    assert abs(valid.sum() / ((b["attention_mask"] == 1) & (orig > 4)).sum() - 0.15) < 0.02
