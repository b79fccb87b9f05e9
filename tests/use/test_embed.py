"""Sentence embeddings (`bertjax.use.embed`, `bertjax embed`, `bertjax similarity`) with the real
all-MiniLM-L6-v2 checkpoint, against sentence-transformers' recipe computed from transformers'
last_hidden_state and against `SentenceTransformer.encode` itself.

Tolerance: 1e-5 max abs difference of the vectors (the last hidden states of bertjax and
transformers agree within 1e-5 on real tokens, tests/parity/test_real_checkpoint.py; a masked mean and a
division by a norm of ~1-10 do not enlarge that).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import transformers
from data_helpers import minilm_dir
from tokenizers import Tokenizer
from use_helpers import sentences

from bertjax import BertModel
from bertjax.bench.embed import format_table, run_embed_benchmark
from bertjax.cli.main import main
from bertjax.pretrained import from_pretrained
from bertjax.use.embed import embed, nearest, sentence_transformers_settings, sorted_batches
from bertjax.use.encode import TruncationWarning, encode, jitted_forward
from bertjax.use.packed import packed_layouts

TOL = 1e-5
BATCH = 8  # several sorted batches of the 32 lines, two padded widths
PACKED = 256  # max_tokens: rows of 64 tokens, four per batch, several batches of packed lines


@pytest.fixture(scope="module")
def lines() -> list[str]:
    return sentences(32)


@pytest.fixture(scope="module")
def minilm():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, tokenizer = from_pretrained(minilm_dir(), model_cls=BertModel)
    assert not [str(w.message) for w in caught if "initialis" in str(w.message)]
    return model, tokenizer


@pytest.fixture(scope="module")
def hf_last_hidden(lines):
    """transformers' last_hidden_state (B, S, H) and attention mask (B, S) of `lines` in one
    batch padded to the longest, tokenised by the checkpoint's own tokenizer.json."""
    tokenizer = Tokenizer.from_file(str(minilm_dir() / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    enc = tokenizer.encode_batch(lines)
    ids, types, mask = (torch.tensor([getattr(e, f) for e in enc], dtype=torch.long)
                        for f in ("ids", "type_ids", "attention_mask"))
    model = transformers.BertModel.from_pretrained(str(minilm_dir()), attn_implementation="eager")
    with torch.no_grad():
        hidden = model.eval()(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    return hidden.numpy(), mask.numpy()


def sentence_transformers_recipe(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """sentence-transformers' Pooling(mean) + Normalize, in numpy (float64)."""
    m = mask[:, :, None].astype(np.float64)  # (B, S, 1)
    mean = (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)  # (B, H)
    return mean / np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)


def test_lines_cover_several_lengths_and_need_sorting(minilm, lines):
    _, tokenizer = minilm
    lengths = [len(ids) for ids in tokenizer.encode_batch(lines)]
    assert max(lengths) >= 3 * 16 - 2 and min(lengths) <= 3, lengths  # widths 16 and 48
    assert lengths != sorted(lengths)  # the sort really permutes them
    widths = {b.input_ids.shape[1] for _, b in sorted_batches(tokenizer, lines, batch_size=BATCH,
                                                               max_length=512)}
    assert widths == {16, 48}, widths


@pytest.mark.slow
@pytest.mark.parametrize("max_tokens", [None, PACKED])
def test_mean_normalized_matches_transformers_recipe(minilm, lines, hf_last_hidden, max_tokens):
    model, tokenizer = minilm
    ours = embed(model, tokenizer, lines, pooling="mean", normalize=True, batch_size=BATCH,
                 max_tokens=max_tokens)
    ref = sentence_transformers_recipe(*hf_last_hidden)
    assert ours.shape == (32, 384) and ours.dtype == np.float32
    diff = np.abs(ours - ref).max()
    print(f"max |bertjax - transformers recipe| = {diff:.2e}")
    assert diff <= TOL, diff
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)


@pytest.mark.slow
def test_mean_normalized_matches_sentence_transformers(minilm, lines):
    # HF_HUB_OFFLINE=1 (conftest): the model directory is local, so it loads without network;
    # should a future sentence-transformers need the hub for it, only this comparison is skipped.
    sentence_transformers = pytest.importorskip("sentence_transformers")
    try:
        st = sentence_transformers.SentenceTransformer(str(minilm_dir()), device="cpu")
    except OSError as err:
        pytest.skip(f"SentenceTransformer cannot load all-MiniLM-L6-v2 offline: {err}")
    model, tokenizer = minilm
    ours = embed(model, tokenizer, lines, pooling="mean", normalize=True, batch_size=BATCH)
    ref = st.encode(lines, batch_size=BATCH, convert_to_numpy=True)
    diff = np.abs(ours - ref).max()
    print(f"max |bertjax - SentenceTransformer.encode| = {diff:.2e}")
    assert diff <= TOL, diff


@pytest.mark.slow
def test_order_restored_and_padding_free(minilm, lines):
    """Each line alone (no padding, no sorting) gives the vector it gets in sorted padded batches."""
    model, tokenizer = minilm
    together = embed(model, tokenizer, lines, batch_size=BATCH)  # mean, not normalised
    alone = np.concatenate([embed(model, tokenizer, [line]) for line in lines])
    diff = np.abs(together - alone).max()
    print(f"max |together - one by one| = {diff:.2e}")
    assert diff <= TOL, diff
    assert np.abs(together[1:] - together[:-1]).max() > 0.1  # distinct rows, not one repeated


@pytest.mark.slow
@pytest.mark.parametrize("max_tokens", [None, PACKED])
def test_cls_pooling_is_first_hidden_state(minilm, lines, hf_last_hidden, max_tokens):
    model, tokenizer = minilm
    ours = embed(model, tokenizer, lines, pooling="cls", batch_size=BATCH, max_tokens=max_tokens)
    batch = encode(tokenizer, lines, max_length=512)
    direct = np.asarray(jitted_forward(model)(batch.arrays()).sequence_output)[:, 0]  # (N, H)
    assert np.abs(ours - direct).max() <= TOL
    assert np.abs(ours - hf_last_hidden[0][:, 0]).max() <= TOL


@pytest.mark.slow
def test_packed_lines_are_their_unpacked_vectors(minilm, lines):
    """Packed into shared rows (several lines a row, the last batch completed with empty rows),
    every line's vector is the one it gets alone; a budget below one row is refused by name."""
    model, tokenizer = minilm
    long_line = " ".join(lines[:28])  # 199 tokens, far longer than the rest: rows of its own
    lines = [*lines, long_line]
    unpacked = embed(model, tokenizer, lines, batch_size=BATCH)
    for budget in (256, 1024, 8192):  # rows of 64 and of the long line's length, then one batch
        packed = embed(model, tokenizer, lines, max_tokens=budget)
        diff = np.abs(packed - unpacked).max()
        print(f"max_tokens {budget}: max |packed - unpacked| = {diff:.2e}")
        assert diff <= TOL, diff
    batches = packed_layouts(encode(tokenizer, lines, max_length=512).attention_mask.sum(1),
                             max_tokens=1024, limit=512)
    assert {layout.seq_len for _, layout in batches} == {64, 208}  # the bulk, the long line
    with pytest.raises(ValueError, match=r"max_tokens \(--max-tokens\) 50 holds no packed row "
                                         r"of 64 tokens.*pass max_tokens \(--max-tokens\) 64"):
        embed(model, tokenizer, lines[:32], max_tokens=50)


def test_nearest_finds_the_line_itself(minilm, lines):
    model, tokenizer = minilm
    vectors = embed(model, tokenizer, lines, batch_size=BATCH)  # not normalised: cosine still
    for i in (3, 17, 29):
        query = embed(model, tokenizer, [lines[i]])[0]
        best = nearest(vectors, query, 4)
        assert best[0][0] == i and abs(best[0][1] - 1.0) <= TOL, best
        scores = [s for _, s in best]
        assert scores == sorted(scores, reverse=True)
        unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        for j, score in best:
            assert abs(score - unit[j] @ query / np.linalg.norm(query)) <= 1e-6
    assert len(nearest(vectors, query, 100)) == len(lines)


@pytest.mark.slow
def test_edge_cases(minilm, lines):
    model, tokenizer = minilm
    empty = embed(model, tokenizer, [])
    assert empty.shape == (0, 384) and empty.dtype == np.float32
    with pytest.raises(ValueError, match="line 3 is empty or only whitespace"):
        embed(model, tokenizer, ["a", "b", " \t", "c"])
    with pytest.raises(TypeError, match="not one string"):
        embed(model, tokenizer, "a sentence")
    with pytest.raises(ValueError, match="pooling"):
        embed(model, tokenizer, ["a"], pooling="max")
    with pytest.warns(TruncationWarning, match="line 30 has") as caught:  # original numbering
        cut = embed(model, tokenizer, lines, max_length=40, batch_size=BATCH)
    assert len(caught) == 1
    assert cut.shape == (32, 384) and np.isfinite(cut).all()


def test_sentence_transformers_settings(tmp_path):
    assert sentence_transformers_settings(minilm_dir()) == {
        "normalize": True, "pooling": "mean", "max_length": 256}
    assert sentence_transformers_settings(tmp_path) == {}  # not a sentence-transformers model
    (tmp_path / "modules.json").write_text(
        '[{"type": "sentence_transformers.models.Pooling", "path": "pool"}]')
    (tmp_path / "pool").mkdir()
    (tmp_path / "pool" / "config.json").write_text('{"pooling_mode_max_tokens": true}')
    assert sentence_transformers_settings(tmp_path) == {
        "normalize": False, "unsupported_pooling": "max"}


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.slow
def test_embed_command_writes_vectors_and_nearest(minilm, lines, tmp_path, capsys):
    model, tokenizer = minilm
    file = _write(tmp_path / "lines.txt", "\n".join(lines) + "\n")
    out = tmp_path / "sub" / "vectors.npy"
    assert main(["embed", str(minilm_dir()), "--file", file, "--out", str(out),
                 "--batch-size", str(BATCH), "--query", lines[17], "--top-k", "3"]) == 0
    printed = capsys.readouterr().out
    vectors = np.load(out)
    expected = embed(model, tokenizer, lines, pooling="mean", normalize=True, batch_size=BATCH)
    assert vectors.shape == (32, 384) and vectors.dtype == np.float32
    assert np.abs(vectors - expected).max() <= 1e-6  # the model's sentence-transformers settings
    assert "32 x 384" in printed and "sentences/s" in printed and "mean pooling, normalized" in printed
    first = printed.split("(cosine similarity):\n")[1].splitlines()[0]
    assert first.split()[1:4] == ["+1.0000", "line", "18:"], first
    assert not list(tmp_path.glob("sub/.*tmp*"))  # the temporary file was renamed away
    assert main(["embed", str(minilm_dir()), "--file", file, "--out", str(tmp_path / "v.npy"),
                 "--batch-size", "8", "--max-tokens", "256"]) == 2  # refused, not ignored
    assert "--batch-size does nothing with --max-tokens" in capsys.readouterr().err


@pytest.mark.slow
def test_similarity_command_prints_nearest_lines(lines, tmp_path, capsys):
    file = _write(tmp_path / "lines.txt", "\n".join(lines))
    assert lines[0] == lines[15] == "Who's there?"  # the same text twice: lines 1 and 16
    assert main(["similarity", str(minilm_dir()), "--file", file, "--query", lines[0],
                 "--pooling", "cls", "--no-normalize", "--batch-size", str(BATCH)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert "cls pooling, not normalized" in printed[0]
    start = next(i for i, p in enumerate(printed) if "cosine similarity" in p)
    ranked = printed[start + 1:]
    assert len(ranked) == 5
    assert {r.split()[3] for r in ranked[:2]} == {"1:", "16:"}
    assert all(r.split()[1] == "+1.0000" and r.endswith("Who's there?") for r in ranked[:2])
    scores = [float(r.split()[1]) for r in ranked]
    assert scores == sorted(scores, reverse=True) and scores[2] < 0.99


@pytest.mark.parametrize("command", ["embed", "similarity"])
def test_bad_inputs_exit_2_with_a_message(command, tmp_path, capsys):
    model = str(minilm_dir())
    good = _write(tmp_path / "good.txt", "one line\nanother line\n")
    plain = tmp_path / "plain"  # a directory of other files (not the one --out goes into)
    plain.mkdir()
    _write(plain / "notes.txt", "mine\n")
    cases = [
        ([model, "--file", str(tmp_path / "missing.txt")], "missing.txt does not exist"),
        ([model, "--file", _write(tmp_path / "empty.txt", "\n")], "empty.txt is empty"),
        ([model, "--file", _write(tmp_path / "blank.txt", "a\nb\n  \nc\n")],
         "blank.txt: line 3 is empty"),
        ([str(tmp_path / "no-model"), "--file", good], "no-model does not exist"),
        ([str(plain), "--file", good], "holds neither config.json"),
        ([good, "--file", good], "good.txt is a file"),
    ]
    extra = ["--out", str(tmp_path / "v.npy")] if command == "embed" else ["--query", "a"]
    for arguments, message in cases:
        assert main([command, *arguments, *extra]) == 2, arguments
        err = capsys.readouterr().err
        assert err.startswith(f"bertjax {command}: error: ") and message in err, err
        assert "Traceback" not in err
    assert not (tmp_path / "v.npy").exists()


@pytest.mark.slow
def test_benchmark_rows_agree(lines):
    # the test's 32 lines in batches of 8: the shapes bertjax compiled for the tests above
    result = run_embed_benchmark(lines, batch_size=BATCH, repeats=1, keep_vectors=True, quiet=True,
                                 max_tokens=PACKED)
    assert result["lines"] == 32 and result["repeats"] == 1 and result["max_length"] == 256
    assert [r["row"] for r in result["rows"]] == [
        "bertjax (jit, packed)", "bertjax (jit)", "transformers eager (sdpa)"]
    for row in result["rows"]:
        assert row["sentences_per_s"] == pytest.approx(32 / row["median_s"])
        assert len(row["times_s"]) == 1 and row["first_s"] > 0
    rates = [r["sentences_per_s"] for r in result["rows"]]
    assert result["ratio"] == result["rows"][0]["ratio"] == pytest.approx(rates[0] / rates[2])
    assert result["rows"][1]["ratio"] == pytest.approx(rates[1] / rates[2])
    packed, ours, theirs = result["vectors"].values()
    assert packed.shape == ours.shape == theirs.shape == (32, 384)
    assert np.abs(packed - theirs).max() == pytest.approx(result["max_abs_diff"])
    assert result["rows"][1]["max_abs_diff"] == pytest.approx(np.abs(ours - theirs).max())
    assert max(result["max_abs_diff"], result["rows"][1]["max_abs_diff"]) <= TOL
    ((R, S, _),) = result["packed_shapes"]  # one shape, its slots mostly real tokens
    assert (R, S) == (4, 64) and result["packed_slots"] < result["padded_tokens"]
    assert "packed: " in format_table(result) and "vs transformers" in format_table(result)
    assert result["max_abs_diff"] <= TOL
    assert result["real_tokens"] < result["padded_tokens"]
    assert all(s % 16 == 0 for _, s in result["shapes"])
