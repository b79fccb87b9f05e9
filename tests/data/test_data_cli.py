"""`bertjax vocab`, `bertjax data` and `bertjax bench data` on small corpora."""

from __future__ import annotations

import json
import os

import pytest
from data_helpers import minilm_dir

from bertjax.cli.main import main
from bertjax.data import PretrainingBatches, Shards, Tokenizer


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    docs = [[f"Sentence {s} of document {d} tells of kings and queens, number {d * s}."
             for s in range(12)] for d in range(30)]
    path.write_text("\n\n".join("\n".join(d) for d in docs) + "\n", encoding="utf-8")
    return path


def test_vocab_then_data_then_batches(tmp_path, corpus, capsys):
    vocab = tmp_path / "vocab"
    assert main(["vocab", "--corpus", str(corpus), "--vocab-size", "300", "--out", str(vocab)]) == 0
    out = capsys.readouterr().out
    assert "[PAD]=0" in out
    assert (vocab / "vocab.txt").is_file() and (vocab / "tokenizer.json").is_file()
    tok = Tokenizer.load(vocab)
    assert tok.vocab_size <= 300 and tok.special.pad == 0

    shards = tmp_path / "shards"
    assert main(["data", "--corpus", str(corpus), "--vocab", str(vocab), "--out", str(shards),
                 "--seq-len", "32", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "30 documents, 360 sentences" in out and "unknown-token rate 0.0000%" in out
    assert "sentence pairs for seq_len 32" in out
    meta = json.loads((shards / "meta.json").read_text())
    assert meta["documents"] == 30 and meta["unknown_rate"] == 0.0
    assert meta["vocab_sha256"] == tok.vocab_hash and list(shards.glob("pairs-s32-*.npy"))
    batch = next(PretrainingBatches(shards, seq_len=32, global_batch_size=16, max_predictions=5))
    assert batch["input_ids"].shape == (16, 32)

    # refuses to overwrite without --force (one line, exit 2); --force replaces
    assert main(["data", "--corpus", str(corpus), "--vocab", str(vocab), "--out", str(shards)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["data", "--corpus", str(corpus), "--vocab", str(minilm_dir()), "--out",
                 str(shards), "--force", "--seq-len", "0", "--no-progress"]) == 0
    assert Shards(shards).vocab_size == 30522


def test_data_command_bad_inputs(tmp_path, corpus, capsys):
    vocab = str(minilm_dir() / "vocab.txt")
    assert main(["data", "--corpus", str(tmp_path / "missing.txt"), "--vocab", vocab,
                 "--out", str(tmp_path / "o")]) == 2
    assert "missing.txt' does not exist" in capsys.readouterr().err
    single = tmp_path / "single.txt"
    single.write_text("just one document.\nstill the same one.\n")
    assert main(["data", "--corpus", str(single), "--vocab", vocab, "--out", str(tmp_path / "o"),
                 "--no-progress"]) == 2
    assert "1 document(s); at least 2" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_bench_data_reports_rates(tmp_path, corpus, capsys):
    cores = os.sched_getaffinity(0)
    code = main(["bench", "data", "--corpus", str(corpus), "--vocab", str(minilm_dir()),
                 "--seq-len", "32", "--batch-size", "16", "--max-predictions", "5",
                 "--steps", "2", "--repeats", "1", "--warmup", "0", "--json",
                 str(tmp_path / "data.json")])
    assert code == 0
    assert os.sched_getaffinity(0) == cores  # the one-core pin is undone afterwards
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads((tmp_path / "data.json").read_text())
    stamp = result["provenance"]  # what the docs' tables name: machine, command, commit, date
    assert stamp["kind"] == "data" and set(stamp) == {"kind", "machine", "command", "commit", "date"}
    assert "cores" in stamp["machine"] and len(stamp["date"]) == 10
    assert result["tokenise_mb_per_s"] > 0 and result["sequences_per_s"] > 0
    # the two rates describe the same batches: 32 tokens per sequence (each rounded on its own)
    assert abs(result["tokens_per_s"] - 32 * result["sequences_per_s"]) <= 32
    assert result["documents"] == 30 and result["pairs"] > 16
    assert any(f"{result['sequences_per_s']:,} masked sequences/s" in line for line in lines)


def test_bench_needs_a_choice(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.splitlines()) == 1 and "bench --help" in err


def test_vocab_says_when_the_corpus_gives_fewer_tokens_than_asked(tmp_path, corpus, capsys):
    """A --vocab-size far above what the corpus holds is not silently shrunk (issue 29)."""
    assert main(["vocab", "--corpus", str(corpus), "--vocab-size", "900000", "--out",
                 str(tmp_path / "v")]) == 0
    captured = capsys.readouterr()
    size = Tokenizer.load(tmp_path / "v").vocab_size
    assert size < 900000 and f"vocabulary of {size} tokens" in captured.out
    assert captured.err.strip() == (
        f"note: the corpus gave {size} tokens, fewer than --vocab-size 900000: every piece seen "
        "at least --min-frequency 2 times (a larger corpus gives more)")
