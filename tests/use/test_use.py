"""Using a trained BERT: from_pretrained (Hugging Face and run directories), export, fill-mask and
next sentence against transformers, and the commands' handling of bad input.

Tolerances: logits 1e-5 max abs; probabilities 1e-5 max abs (transformers' own float32 round-off
is far below that).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tokenizers
import torch
import transformers
from flax import nnx
from use_helpers import count_row_sharing, peaked_checkpoint, pipeline_fill_mask, sentences, tiny_run

import bertjax
from bertjax import BertConfig, BertForPreTraining
from bertjax.cli.main import main
from bertjax.errors import InputError
from bertjax.inputs import check_batch
from bertjax.model import BertModel
from bertjax.use.encode import TruncationWarning, encode
from bertjax.use.fill_mask import fill_mask
from bertjax.use.next_sentence import next_sentence_probability

TOL = 1e-5
ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["To be, or not to be: that is the [MASK].", "The [MASK] of Denmark is [MASK] .",
         "[MASK] lord, my [MASK] lord!"]


@pytest.fixture(scope="module")
def peaked(tmp_path_factory) -> Path:
    return peaked_checkpoint(tmp_path_factory.mktemp("peaked") / "model")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A `bertjax pretrain` run of 6 steps with checkpoints at 3 and 6 (evaluated at both)."""
    run = tiny_run(tmp_path_factory.mktemp("run") / "run")
    return run


@pytest.mark.slow
def test_export_of_a_run_loads_in_transformers_and_autotokenizer(run_dir, tmp_path, capsys):
    assert main(["convert", str(run_dir), str(tmp_path / "hf")]) == 0
    assert "wrote" in capsys.readouterr().out
    names = sorted(p.name for p in (tmp_path / "hf").iterdir())
    assert names == ["config.json", "model.safetensors", "special_tokens_map.json", "tokenizer.json",
                     "tokenizer_config.json", "vocab.txt"]
    ours, tokenizer = bertjax.from_pretrained(run_dir)
    theirs, info = transformers.BertForPreTraining.from_pretrained(
        tmp_path / "hf", output_loading_info=True, attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    # tokenizer.json alone adds [CLS] and [SEP] too (as transformers 4 reads it, and `tokenizers`)
    raw = tokenizers.Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    tokens = raw.encode("to be", "or not").tokens
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and tokens.count("[SEP]") == 2
    texts = sentences(40)[-8:]
    enc = hf_tok(texts, padding=True, return_tensors="np")
    mine = encode(tokenizer, texts, max_length=128, pad_to=enc["input_ids"].shape[1])
    np.testing.assert_array_equal(enc["input_ids"], mine.input_ids)
    np.testing.assert_array_equal(enc["attention_mask"], mine.attention_mask)
    with torch.no_grad():
        ref = theirs.eval()(**{k: torch.from_numpy(v) for k, v in enc.items()})
    out = ours(mine.input_ids, mine.token_type_ids, mine.attention_mask)
    assert float(np.abs(np.asarray(out.mlm_logits) - ref.prediction_logits.numpy()).max()) <= TOL
    assert float(np.abs(np.asarray(out.nsp_logits) - ref.seq_relationship_logits.numpy()).max()) <= TOL


def test_run_directory_best_step_and_named_steps(run_dir):
    from bertjax.train.checkpoint import Checkpointer

    ckpt = Checkpointer(run_dir / "checkpoints")
    best, steps = ckpt.best_step(), ckpt.steps()
    ckpt.close()
    assert steps == [3, 6] and best in steps
    by_default, _ = bertjax.from_pretrained(run_dir)
    chosen, _ = bertjax.from_pretrained(run_dir, step=best)
    other, _ = bertjax.from_pretrained(run_dir, step=9 - best)
    a, b, c = (np.asarray(m.mlm_head.bias[...]) for m in (by_default, chosen, other))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    with pytest.raises(ValueError, match=r"has no checkpoint step 4; it has steps \[3, 6\]"):
        bertjax.from_pretrained(run_dir, step=4)
    encoder, _ = bertjax.from_pretrained(run_dir, model_cls=BertModel)
    ids = np.array([[2, 30, 31, 3]])
    np.testing.assert_array_equal(np.asarray(encoder(ids).sequence_output),
                                  np.asarray(by_default.bert(ids).sequence_output))


def test_from_pretrained_errors_name_the_problem(tmp_path, peaked):
    with pytest.raises(InputError, match="does not exist; pass a Hugging Face BERT directory"):
        bertjax.from_pretrained(tmp_path / "nope")
    with pytest.raises(InputError, match="neither config.json .* nor run_config.json"):
        bertjax.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="not a `bertjax pretrain` run directory"):
        bertjax.from_pretrained(peaked, step=3)
    other = tmp_path / "t5"
    other.mkdir()
    (other / "config.json").write_text('{"model_type": "t5"}')
    with pytest.raises(ValueError, match="model_type 't5', a family bertjax does not have"):
        bertjax.from_pretrained(other)


@pytest.mark.slow
@pytest.mark.parametrize("max_tokens", [None, 128])  # 128: packed, a row a batch
def test_fill_mask_equals_the_transformers_pipeline(peaked, max_tokens, monkeypatch):
    import bertjax.use.fill_mask as module

    model, tokenizer = bertjax.from_pretrained(peaked)
    sharing = count_row_sharing(monkeypatch, module)
    ours = fill_mask(model, tokenizer, TEXTS, top_k=5, max_tokens=max_tokens)
    refs = pipeline_fill_mask(peaked, TEXTS, device="cpu")
    # the budget puts several texts in a row: a leak between them would show
    assert (max(sharing) > 1) if max_tokens else not sharing
    for text, predictions, ref in zip(TEXTS, ours, refs, strict=True):
        assert len(predictions) == len(ref) == text.count("[MASK]")
        for mine, theirs in zip(predictions, ref, strict=True):
            assert [p.id for p in mine] == [r["token"] for r in theirs]
            assert [p.token for p in mine] == [tokenizer.id_to_token(r["token"]) for r in theirs]
            diff = max(abs(p.probability - r["score"]) for p, r in zip(mine, theirs, strict=True))
            assert diff <= TOL
            assert mine[0].probability > 0.05  # peaked: the order is not a coin toss


@pytest.mark.slow
@pytest.mark.parametrize("max_tokens", [None, 128])
def test_next_sentence_equals_transformers(peaked, max_tokens, monkeypatch):
    import bertjax.use.next_sentence as module

    model, tokenizer = bertjax.from_pretrained(peaked)
    lines = sentences(60)
    first, second = lines[10:16], lines[11:17][::-1]
    sharing = count_row_sharing(monkeypatch, module)
    ours = next_sentence_probability(model, tokenizer, first, second, max_tokens=max_tokens)
    assert (max(sharing) > 1) if max_tokens else not sharing  # pairs shared a row when packed
    theirs = transformers.BertForNextSentencePrediction.from_pretrained(peaked).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(peaked)
    enc = hf_tok(first, second, padding=True, return_tensors="pt")
    with torch.no_grad():
        ref = torch.softmax(theirs(**enc).logits, -1)[:, 0].numpy()
    assert ours.shape == (6,) and float(np.abs(ours - ref).max()) <= TOL
    assert float(ours.max() - ours.min()) > 1e-3  # the pairs really differ


@pytest.mark.slow
def test_commands_print_predictions(peaked, capsys):
    assert main(["fill-mask", str(peaked), TEXTS[1], "--top-k", "3"]) == 0
    out = capsys.readouterr().out
    model, tokenizer = bertjax.from_pretrained(peaked)
    best = fill_mask(model, tokenizer, [TEXTS[1]], top_k=3)[0]
    for m, top in enumerate(best, 1):
        assert f"[MASK] {m}: " + ", ".join(f"{p.token} {p.probability:.4f}" for p in top) in out
    assert main(["nsp", str(peaked), "To be, or not to be.", "That is the question."]) == 0
    p = next_sentence_probability(model, tokenizer, ["To be, or not to be."],
                                  ["That is the question."])[0]
    assert f"P(IsNext) = {p:.6f}" in capsys.readouterr().out


def test_commands_refuse_bad_input(peaked, tmp_path, capsys):
    assert main(["fill-mask", str(peaked), "no mask here"]) == 2
    assert "text 1 has no [MASK] token" in capsys.readouterr().err
    lines = tmp_path / "lines.txt"
    lines.write_text("a [MASK] here\n\nnone here\n")
    assert main(["fill-mask", str(peaked), "--file", str(lines)]) == 2
    assert f"{lines}:3 has no [MASK] token" in capsys.readouterr().err
    assert main(["nsp", str(peaked), "", "B"]) == 2
    assert "sentence A is empty; give its text" in capsys.readouterr().err
    assert main(["nsp", str(tmp_path / "missing"), "A", "B"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["fill-mask", str(peaked), "--file", str(tmp_path / "none.txt")]) == 2
    assert "--file" in capsys.readouterr().err


@pytest.mark.slow
def test_model_without_an_mlm_head_is_refused_for_fill_mask(tmp_path):
    from bertjax.data import Tokenizer

    tokenizer = Tokenizer.train(sentences(100), vocab_size=200)
    config = BertConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size)
    bare = tmp_path / "bare"
    bertjax.save_pretrained(BertModel(config, rngs=nnx.Rngs(0)), bare, tokenizer)
    proc = subprocess.run([sys.executable, "-m", "bertjax.cli", "fill-mask", str(bare), "a [MASK]"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert "has no weights for mlm_head, which BertForMaskedLM needs" in proc.stderr


def test_long_text_is_cut_with_a_warning_naming_it(peaked):
    model, tokenizer = bertjax.from_pretrained(peaked)
    long = " ".join(sentences(200)) + " [MASK]"
    with pytest.warns(TruncationWarning, match="text 2 has .* more tokens than the model's 128"):
        with pytest.raises(ValueError, match=r"text 2: 1 of its 1 \[MASK\] tokens were cut off"):
            fill_mask(model, tokenizer, [TEXTS[0], long], names=["text 1", "text 2"])
    # a [MASK] that survives does not hide one that was cut
    with pytest.warns(TruncationWarning), pytest.raises(
            ValueError, match=r"line 1: 1 of its 2 \[MASK\] tokens were cut off"):
        fill_mask(model, tokenizer, ["[MASK] " + long])


def test_rows_with_and_without_a_second_segment_are_each_built_alone(peaked):
    _, tokenizer = bertjax.from_pretrained(peaked)
    pair_batch = encode(tokenizer, ["to be", "or not"], ["that is", None], max_length=32)
    alone = encode(tokenizer, ["or not"], max_length=32)
    n = int(alone.attention_mask.sum())
    assert pair_batch.tokens[1] == alone.tokens[0] and pair_batch.tokens[1][-1] == "[SEP]"
    assert pair_batch.attention_mask[1].sum() == n and not pair_batch.token_type_ids[1].any()


@pytest.mark.slow
def test_a_loaded_run_scores_what_the_run_recorded(run_dir):
    """from_pretrained(run) is the trained model itself: on the run's held-out batches it scores
    exactly the evaluation the run logged at that checkpoint."""
    from bertjax.jobs.pretrain.data import open_data
    from bertjax.losses import metrics_from_sums, pretraining_sums
    from bertjax.runs import config as rc
    from bertjax.runs.layout import RunDir
    from bertjax.train.metrics import read_jsonl

    run = RunDir(run_dir)
    data = open_data(rc.RunConfig.from_dict(run.saved_config()), run)
    for step in (3, 6):
        model, _ = bertjax.from_pretrained(run_dir, step=step)

        def sums(batch, model=model):
            out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                        batch["masked_positions"])
            return pretraining_sums(out.mlm_logits, out.nsp_logits, batch)

        parts = [{k: float(v) for k, v in sums(b).items()} for b in data.eval_batches]
        mine = metrics_from_sums({k: sum(p[k] for p in parts) for k in parts[0]})
        logged = next(r for r in read_jsonl(run.metrics, "eval") if r["step"] == step)
        assert mine["mlm_loss"] == pytest.approx(logged["mlm_loss"], abs=1e-5)
        assert mine["mlm_accuracy"] == pytest.approx(logged["mlm_accuracy"], abs=1e-9)


def test_a_tokenizer_larger_than_the_model_is_refused_not_clamped(peaked):
    # under jit an id past the embedding table would be clamped to its last row, silently; the
    # tokenizer is refused before any text is encoded (issue 45), whatever ids the text has
    model, tokenizer = bertjax.from_pretrained(peaked)
    small = BertForPreTraining(model.config.replace(vocab_size=100), rngs=nnx.Rngs(0))
    assert tokenizer.vocab_size > 100
    with pytest.raises(ValueError, match=rf"the tokenizer has {tokenizer.vocab_size} tokens but "
                                         "the model's vocabulary has 100 rows"):
        fill_mask(small, tokenizer, ["the king of [MASK] is dead"])
    with pytest.raises(ValueError, match=r"vocabulary has 100 rows"):
        next_sentence_probability(small, tokenizer, ["the king is dead"], ["long live the king"])
    ids = {"input_ids": np.full((1, 4), 150, np.int32)}  # the batch check still stands behind it
    with pytest.raises(ValueError, match=r"input_ids has values outside \[0, vocab_size=100\).*"
                                         "check the tokenizer matches the model config"):
        check_batch(small.config, ids)
