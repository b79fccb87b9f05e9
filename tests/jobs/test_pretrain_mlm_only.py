"""`bertjax pretrain --train.objective mlm`: a RoBERTa pre-trained as a masked LM alone on
full-sentence segments (packed), no NSP head; loading it back, fill-mask, convert, resume; the
settings, the refused NSP objective and the default objective left as it was.

One tiny run (`run`, module-scoped) serves every test that reads a run."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from use_helpers import DATA_CACHE

import bertjax
from bertjax.cli.main import main
from bertjax.data import PretrainingBatches, Shards
from bertjax.data.segments import create_segments
from bertjax.jobs.pretrain.data import held_out_batches
from bertjax.jobs.pretrain.job import TRAIN_METRIC_KEYS, initialise_model, pretrain
from bertjax.runs import config as rc
from bertjax.runs.layout import RunDir
from bertjax.train.metrics import read_jsonl
from bertjax.train.objectives import MASKED_LM, pretraining_means
from bertjax.train.saved import read_params, read_state

pytestmark = pytest.mark.slow  # trains or compiles at length: CI runs the file, the fast tier leaves it out

SEQ_LEN = 32
FLAGS = ["--model.preset=tiny", "--model.model-type=roberta", "--train.objective=mlm",
         "--model.hidden-dropout-prob=0.1", "--data.vocab-size=200", f"--data.seq-len={SEQ_LEN}",
         "--data.max-predictions=5", "--data.batch-size=4", "--data.eval-batches=2",
         "--data.packing=best-fit", "--optim.learning-rate=3e-3", "--optim.warmup-steps=1",
         "--train.steps=6", "--train.eval-every=3", "--train.checkpoint-every=3"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, str]:
    """A 6-step RoBERTa masked-LM run and what the command printed."""
    out = tmp_path_factory.mktemp("mlm") / "run"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["pretrain", "--output-dir", str(out), "--no-progress", *FLAGS]) == 0
    return out, printed.getvalue()


def _records(run_dir: Path, kind: str) -> list[dict]:
    return read_jsonl(run_dir / "metrics.jsonl", kind)


def test_the_run_trains_a_masked_lm_and_reports_no_nsp(run) -> None:
    run_dir, printed = run
    train, evals = _records(run_dir, "train"), _records(run_dir, "eval")
    assert [r["step"] for r in train] == list(range(1, 7)) and [r["step"] for r in evals] == [3, 6]
    assert all(math.isfinite(r["loss"]) and r["loss"] == r["mlm_loss"] for r in train)
    assert not any(k.startswith("nsp_") for r in train + evals for k in r)
    # the model at step 0 on the same held-out batches: both evaluations are well below it
    config, tokenizer = RunDir(run_dir).finished_config()
    untrained = initialise_model(config, tokenizer.vocab_size, tokenizer.special.pad)
    assert type(untrained) is bertjax.BertForMaskedLM
    batches = held_out_batches(RunDir(run_dir), config, tokenizer, packing="best-fit")
    sums = [MASKED_LM.forward_sums(untrained, jax.tree.map(jnp.asarray, b), None) for b in batches]
    start = float(pretraining_means(jax.tree.map(lambda *x: sum(x), *sums))["mlm_loss"])
    assert abs(start - math.log(tokenizer.vocab_size)) < 0.1  # about a uniform guess
    assert max(e["mlm_loss"] for e in evals) < start - 0.05, (start, evals)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 6 and summary["eval"]["mlm_loss"] == evals[-1]["mlm_loss"]
    assert not any(k.startswith("nsp_") for k in summary["eval"])
    assert "NSP" not in printed and "held-out MLM accuracy" in printed
    assert (run_dir / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list((run_dir / "data" / "train").glob("segments-s32.npy"))
    assert not list((run_dir / "data" / "train").glob("pairs-*.npy"))


def test_the_checkpoint_holds_a_roberta_masked_lm_without_nsp_weights(run) -> None:
    params = read_params(run[0] / "checkpoints", 6)
    assert set(params) == {"bert", "mlm_head"}  # no nsp_head
    assert "pooler" not in params["bert"]
    embeddings = params["bert"]["embeddings"]
    rows = {name: embeddings[name]["embedding"]["value"].shape[0]
            for name in ("position_embeddings", "token_type_embeddings")}
    # RoBERTa's positions start at pad + 1 = 1: the preset's 128 positions after one more row
    assert rows == {"position_embeddings": 128 + 1, "token_type_embeddings": 1}


def test_it_loads_as_the_familys_masked_lm_with_its_special_tokens(run) -> None:
    model, tokenizer = bertjax.from_pretrained(run[0])
    assert type(model) is bertjax.BertForMaskedLM
    assert bertjax.checkpoint_class(run[0]) is bertjax.BertForMaskedLM
    config = model.config
    assert (config.model_type, config.type_vocab_size, config.max_sequence_length) == (
        "roberta", 1, 128)
    assert tokenizer.family.model_type == "roberta"
    assert [tokenizer.id_to_token(i) for i in tokenizer.special.ids] == [
        "<pad>", "<unk>", "<s>", "</s>", "<mask>"]
    assert config.pad_token_id == tokenizer.special.pad == 0
    with pytest.raises(bertjax.InputError, match="roberta has no next-sentence head"):
        bertjax.from_pretrained(run[0], model_cls=bertjax.BertForPreTraining)


def test_fill_mask_on_the_run_prints_the_models_own_top_pieces(run, capsys) -> None:
    text = "To be, or not to [MASK]: that is the question."
    assert main(["fill-mask", str(run[0]), text]) == 0
    out = capsys.readouterr().out
    shown = re.findall(r"(\S+) (\d\.\d{4})", out.split("[MASK] 1: ")[1])  # a piece may be ","
    model, tokenizer = bertjax.from_pretrained(run[0])
    (top,), = bertjax.fill_mask(model, tokenizer, [text], top_k=5)
    assert len(shown) == 5 and shown[0] == (top[0].token, f"{top[0].probability:.4f}")


def test_convert_writes_what_transformers_loads_as_roberta_for_masked_lm(run, tmp_path,
                                                                         capsys) -> None:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    out = tmp_path / "hf"
    assert main(["convert", str(run[0]), str(out)]) == 0
    assert "transformers" in capsys.readouterr().out  # the command's own check of the export
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["RobertaForMaskedLM"] and config["model_type"] == "roberta"
    hf, info = transformers.AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert type(hf).__name__ == "RobertaForMaskedLM"
    assert {k: v for k, v in info.items() if v} == {}  # no missing, unexpected or mismatched keys
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    ids = hf_tok("to be, or not to <mask>.")["input_ids"]
    model, tokenizer = bertjax.from_pretrained(run[0])
    assert ids[0] == tokenizer.special.cls and ids[-1] == tokenizer.special.sep
    at = ids.index(tokenizer.special.mask)
    with torch.no_grad():
        theirs = hf.eval()(torch.tensor([ids])).logits[0, at].numpy()
    ours = np.asarray(model(jnp.asarray([ids]), None, None, jnp.asarray([[at]])).mlm_logits[0, 0])
    np.testing.assert_allclose(ours, theirs, atol=1e-4)


def test_segments_are_whole_sentences_of_one_document_covering_the_text(run) -> None:
    shards = Shards(run[0] / "data" / "train")
    table = create_segments(shards, SEQ_LEN)
    most = SEQ_LEN - 2  # [CLS] segment [SEP]
    a0, a1 = table[:, 0], table[:, 1]
    assert np.array_equal(table[:, 2], a1) and np.array_equal(table[:, 3], a1)  # no B
    assert a0[0] == 0 and a1[-1] == len(shards.tokens) and np.array_equal(a0[1:], a1[:-1])
    length = a1 - a0
    assert (length >= 1).all() and (length <= most).all()
    sentences = np.asarray(shards.sentence_offsets)
    documents = sentences[np.asarray(shards.document_offsets)]
    # whole sentences, but for a sentence longer than a segment: cut into full-length pieces
    at_start, at_end = np.isin(a0, sentences), np.isin(a1, sentences)
    assert (at_start[1:] | (length[:-1] == most)).all()
    assert (at_end | (length == most)).all()
    # packed up to the length: a segment that ends a sentence, within its document, ends because
    # the next sentence did not fit
    follows = np.flatnonzero(at_end[:-1] & ~np.isin(a1[:-1], documents))
    assert len(follows) > 100
    next_sentence = np.diff(sentences)[np.searchsorted(sentences, a1[follows])]
    assert (length[follows] + next_sentence > most).all()
    # no segment crosses a document's start
    assert not ((documents[None, :] > a0[:, None]) & (documents[None, :] < a1[:, None])).any()


def test_packed_segments_score_as_each_segment_alone(run) -> None:
    """RoBERTa's positions restart at pad + 1 in every packed segment (its `position_ids` from
    0, moved by the model): the MLM sums of a packed batch equal those of its segments one per
    row, where the positions come from the padding."""
    model, tokenizer = bertjax.from_pretrained(run[0])
    it = PretrainingBatches(run[0] / "data" / "train", seq_len=SEQ_LEN, global_batch_size=4,
                            max_predictions=5, tokenizer=tokenizer, next_sentence=False,
                            packing="best-fit")
    packed = it.batch_at(0, 0)
    assert "sequence_ids" in packed
    assert not any(k.startswith("next_sentence") for k in packed)
    assert not packed["token_type_ids"].any()
    rows, slots = np.nonzero(packed["cls_positions"] >= 0)
    assert len(rows) > 4  # several segments share a row
    starts = packed["cls_positions"][rows, slots]
    assert (packed["input_ids"][rows, starts] == tokenizer.special.cls).all()
    index, _ = it.plan(0).rows(0, 4, 4)
    alone = it.make_batch(index, 0)
    ends = alone["attention_mask"].sum(1) - 1
    assert (alone["input_ids"][np.arange(len(index)), ends] == tokenizer.special.sep).all()
    sums = [jax.device_get(MASKED_LM.forward_sums(model, jax.tree.map(jnp.asarray, b), None))
            for b in (packed, alone)]
    assert sums[0]["mlm_weight"] == sums[1]["mlm_weight"] > 0
    for key in ("mlm_loss_sum", "mlm_correct"):
        assert sums[0][key] == pytest.approx(sums[1][key], rel=1e-5, abs=1e-5)


def test_an_interrupted_run_resumes_bitwise(run, tmp_path) -> None:
    config = rc.RunConfig.from_dict(json.loads((run[0] / "run_config.json").read_text()))
    quiet = {"progress": False, "log": lambda _: None, "data_cache": DATA_CACHE}

    def crash(step: int, metrics: dict) -> None:
        if step == 5:
            raise RuntimeError("stopped on purpose")

    with pytest.raises(RuntimeError, match="on purpose"):
        pretrain(config, tmp_path / "run", on_step=crash, **quiet)
    notes: list[str] = []
    result = pretrain(config, tmp_path / "run", resume=True, progress=False, log=notes.append)
    assert result.steps == 6 and any("resuming at step 3" in n for n in notes)
    (step_a, a), (step_b, b) = (read_state(d / "checkpoints") for d in (run[0], tmp_path / "run"))
    assert step_a == step_b == 6
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert np.array_equal(x, y), "parameters / optimizer state differ after resume"
    keys = ("step", *(k for k in TRAIN_METRIC_KEYS if not k.startswith("nsp_")))
    records = [[{k: r[k] for k in keys} for r in _records(d, "train")]
               for d in (run[0], tmp_path / "run")]
    assert records[0] == records[1]
    assert _records(run[0], "eval") == _records(tmp_path / "run", "eval")


def test_print_config_read_back_with_config_prints_the_same(tmp_path, capsys) -> None:
    assert main(["pretrain", "--print-config", *FLAGS]) == 0
    first = capsys.readouterr().out
    assert 'model_type = "roberta"' in first and 'objective = "mlm"' in first
    (tmp_path / "run.toml").write_text(first)
    assert main(["pretrain", "--print-config", f"--config={tmp_path / 'run.toml'}"]) == 0
    assert capsys.readouterr().out == first


def test_the_default_objective_is_bert_with_nsp_as_before() -> None:
    config = rc.RunConfig()
    assert (config.model.model_type, config.model_type, config.train.objective) == (
        None, "bert", "mlm+nsp")  # left out: BERT's for this objective
    assert config.next_sentence and config.model_class == "BertForPreTraining"
    assert config.bert_config() == bertjax.BertConfig.from_preset(
        "mini", vocab_size=512, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    # a run saved before these options existed reads as BERT with NSP
    saved = config.to_dict()
    del saved["model"]["model_type"], saved["train"]["objective"]
    assert rc.RunConfig.from_dict(rc.complete_saved(saved)) == config
    # a BERT masked LM alone keeps BERT's positions and two token types
    bert_mlm = rc.load(None, {"train.objective": "mlm", "model.preset": "tiny"})
    assert bert_mlm.model_class == "BertForMaskedLM"
    assert (bert_mlm.bert_config().max_position_embeddings,
            bert_mlm.bert_config().type_vocab_size) == (128, 2)


def test_nsp_for_a_family_without_it_is_one_line_and_exit_2(capsys) -> None:
    assert main(["pretrain", "--model.model-type=roberta", "--print-config"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "has no next-sentence head" in err and "--train.objective mlm" in err
    assert main(["pretrain", "--model.model-type=roberta", "--train.objective=mlm",
                 "--model.preset=tiny", "--model.max-position-embeddings=32",
                 "--data.seq-len=32", "--print-config"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "at least 33" in err


@pytest.mark.parametrize(("family", "written"), [("distilbert", "DistilBertForMaskedLM"),
                                                 ("electra", "ElectraForMaskedLM")])
def test_distilbert_and_electra_architectures_pretrain_as_masked_lms(family, written, tmp_path,
                                                                     capsys) -> None:
    """DistilBERT's (no token types) and ELECTRA's architectures as masked LMs: a short run
    converts to the family's class, which transformers loads (the command's own check)."""
    out = tmp_path / "run"
    flags = [f if not f.startswith("--model.model-type") else f"--model.model-type={family}"
             for f in FLAGS if not f.startswith(("--train.steps", "--train.eval-every",
                                                 "--train.checkpoint-every"))]
    assert main(["pretrain", "--output-dir", str(out), "--no-progress", *flags,
                 "--train.steps=2", "--train.eval-every=2", "--train.checkpoint-every=2"]) == 0
    assert main(["convert", str(out), str(tmp_path / "hf")]) == 0
    assert f"loads it as {written}" in capsys.readouterr().out
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (config["model_type"], config["architectures"]) == (family, [written])
