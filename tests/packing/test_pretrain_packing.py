"""Packed pre-training (`data.packing`): several NSP pairs per row, each masked as alone.

Data (exact integer checks): every pair of a packed row carries the tokens, types, masks and
label it has unpacked; rows keep within seq_len tokens and max_predictions predictions; an epoch
places each pair once; "auto" packs the short-document corpus and leaves the bundled plays
unpacked; resume and process sharding stay exact. Model: the held-out sums are the same packed or
not (within 1e-5, float32 sums in another order), in bertjax and bert_torch's loss; an
interrupted and resumed packed run ends bitwise equal to an uninterrupted one.
"""

from __future__ import annotations

import functools
import json

import jax
import numpy as np
import optax
import pytest
import torch
from data_helpers import fresh_dir, shakespeare_shards
from flax import nnx
from use_helpers import DATA_CACHE

from bert_torch.losses import pretraining_loss as torch_pretraining_loss
from bertjax.config import BertConfig
from bertjax.data import PretrainingBatches, Tokenizer, write_shards
from bertjax.data.corpus import shakespeare_speeches, split_sentences
from bertjax.data.pair_packing import real_token_share
from bertjax.heads import BertForPreTraining
from bertjax.jobs.pretrain.data import held_out_batches
from bertjax.jobs.pretrain.job import TRAIN_METRIC_KEYS, pretrain
from bertjax.losses import metrics_from_sums, pretraining_loss
from bertjax.runs import config as rc
from bertjax.runs.layout import RunDir
from bertjax.train.assembly import assemble
from bertjax.train.metrics import read_jsonl
from bertjax.train.objectives import PRETRAINING
from bertjax.train.saved import read_state
from bertjax.train.step import make_eval_step

pytestmark = pytest.mark.slow  # trains or compiles at length: CI runs the file, the fast tier leaves it out

PLAYS = ("macbeth", "othello", "the-tempest", "king-lear")  # training plays, a quick corpus
SUM_TOL = 1e-5  # held-out means packed vs unpacked: float32 sums in another order


def _speech_documents() -> list[list[str]]:
    """Every speech of `PLAYS` as a document (`shakespeare_speech_documents`, four plays)."""
    return [d for play in PLAYS for d in map(split_sentences, shakespeare_speeches(play)) if d]


@functools.cache
def speeches() -> tuple:
    """Shards of every speech of four plays as its own document, and their 300-piece vocabulary."""
    docs = _speech_documents()
    tok = Tokenizer.train((s for d in docs for s in d), vocab_size=300)
    out = fresh_dir("speeches") / "train"
    write_shards(iter(docs), tok, out, min_documents=2)
    return out, tok


def _batches(**kw) -> PretrainingBatches:
    shards, tok = speeches()
    args = dict(seq_len=64, global_batch_size=16, max_predictions=10, seed=2, cache_pairs=False,
                tokenizer=tok)
    return PretrainingBatches(shards, **{**args, **kw})


def _pair_spans(batch: dict[str, np.ndarray]):
    """(row, first, length, slot) of every pair of a packed batch."""
    for r, cls in enumerate(batch["cls_positions"]):
        for slot, first in enumerate(cls[cls >= 0]):
            yield r, int(first), int((batch["sequence_ids"][r] == slot + 1).sum()), slot


def test_every_packed_pair_is_its_unpacked_row():
    it = _batches(packing="best-fit")
    rows = it.plan(0).rows(0, 16, 16)[0]
    packed, alone = it.batch_at(0, 0), it.make_batch(rows, 0)  # the same pairs, unpacked
    spans = list(_pair_spans(packed))
    assert len(spans) == len(rows) > 16  # more pairs than rows
    for n, (r, first, length, slot) in enumerate(spans):
        assert length == alone["attention_mask"][n].sum()
        span = slice(first, first + length)
        for key in ("input_ids", "token_type_ids"):
            np.testing.assert_array_equal(packed[key][r, span], alone[key][n, :length])
        np.testing.assert_array_equal(packed["position_ids"][r, span], np.arange(length))
        mine = (packed["masked_weights"][r] > 0) & (packed["masked_positions"][r] >= first) & (
            packed["masked_positions"][r] < first + length)
        real = alone["masked_weights"][n] > 0
        np.testing.assert_array_equal(packed["masked_positions"][r][mine] - first,
                                      alone["masked_positions"][n][real])
        np.testing.assert_array_equal(packed["masked_ids"][r][mine], alone["masked_ids"][n][real])
        assert packed["next_sentence_label"][r, slot] == alone["next_sentence_label"][n]
        assert packed["next_sentence_weights"][r, slot] == 1.0
    assert packed["next_sentence_weights"].sum() == len(rows)
    assert packed["masked_weights"].sum() == alone["masked_weights"].sum()
    assert (packed["masked_weights"].sum(1) <= 10).all()  # max_predictions per row
    assert packed["attention_mask"].sum() == alone["attention_mask"].sum()


def test_an_epoch_places_every_pair_once_in_full_rows():
    it = _batches(packing="best-fit")
    plan = it.plan(0)
    assert sorted(plan.pairs.tolist()) == list(range(it.num_pairs))
    tokens = np.bincount(plan.layout.row, weights=plan.layout.length)
    assert tokens.max() <= 64
    unpacked = real_token_share(it.lengths, 64)
    assert unpacked < 0.8 and tokens.sum() / (plan.num_rows * 64) > 0.97
    assert it.steps_in(0) == plan.num_rows // 16 < it.num_pairs // 16
    assert not np.array_equal(it.plan(1).pairs, plan.pairs)  # a new packing every epoch


def test_auto_packs_short_documents_and_leaves_the_bundled_plays_alone():
    scenes = PretrainingBatches(shakespeare_shards(), seq_len=128, global_batch_size=8,
                                packing="auto", cache_pairs=False)
    short = _batches(seq_len=128, max_predictions=20, packing="auto")
    # the measurement behind the default (docs/packing.md): scenes fill 89%, speeches half
    assert real_token_share(scenes.lengths, 128) == pytest.approx(0.89, abs=0.03)
    assert real_token_share(short.lengths, 128) == pytest.approx(0.5, abs=0.1)
    assert scenes.packing == "none" and short.packing == "best-fit"
    unpacked = PretrainingBatches(shakespeare_shards(), seq_len=128, global_batch_size=8,
                                  cache_pairs=False)
    assert all(np.array_equal(x, y) for x, y in zip(
        next(scenes).values(), next(unpacked).values(), strict=True))
    assert rc.complete_saved({"data": {}})["data"]["packing"] == "none"  # runs saved before


def test_resume_and_processes_stay_exact_across_an_epoch_boundary():
    it = _batches(packing="best-fit", global_batch_size=64)
    for _ in range(it.steps_in(0) - 2):
        next(it)
    state = json.loads(json.dumps(it.get_state()))
    expected = [next(it) for _ in range(4)]
    assert it.get_state()["epoch"] == 1
    again = _batches(packing="best-fit", global_batch_size=64)
    again.set_state(state)
    for x, y in zip(expected, [next(again) for _ in range(4)], strict=True):
        assert all(np.array_equal(x[k], y[k]) for k in x)
    parts = [_batches(packing="best-fit", global_batch_size=64, process_index=p,
                      process_count=2) for p in range(2)]
    whole = _batches(packing="best-fit", global_batch_size=64).batch_at(0, 3)
    local = [p.batch_at(0, 3) for p in parts]
    assert all(np.array_equal(whole[k], np.concatenate([x[k] for x in local])) for k in whole)
    with pytest.raises(ValueError, match="packing saved 'best-fit' vs now 'none'"):
        _batches(packing="none", global_batch_size=64).set_state(state)
    old = {k: v for k, v in _batches().get_state().items() if k != "packing"}
    _batches().set_state(old)  # a state saved before packing existed resumes unpacked


def _sums(model, batches) -> dict[str, float]:
    eval_step = jax.jit(make_eval_step(nnx.graphdef(model), objective=PRETRAINING))
    params = nnx.state(model, nnx.Param)
    sums = [jax.device_get(eval_step(params, b)) for b in batches]
    return {k: float(sum(np.float64(s[k]) for s in sums)) for k in sums[0]}


def test_held_out_metrics_are_the_same_packed_or_not():
    it = _batches(seq_len=128, max_predictions=20)
    _, tok = speeches()
    config = BertConfig.from_preset("tiny", vocab_size=tok.vocab_size)
    model = BertForPreTraining(config, rngs=nnx.Rngs(0))
    pairs = it.order(0)[:3 * 16]
    unpacked = [it.make_batch(pairs[i:i + 16], 0) for i in range(0, 48, 16)]
    packed = it.packed_batches(pairs, 0)
    assert len(packed) < len(unpacked)
    a, b = _sums(model, unpacked), _sums(model, packed)
    assert a["mlm_weight"] == b["mlm_weight"] and a["nsp_count"] == b["nsp_count"] == 48
    means_a, means_b = metrics_from_sums(a), metrics_from_sums(b)
    for key in ("mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy"):
        assert abs(means_a[key] - means_b[key]) <= SUM_TOL, key
    # the mirror's loss takes packed NSP the same way (one packed batch, bertjax's logits)
    batch = packed[0]
    options = {k: batch[k] for k in ("sequence_ids", "position_ids", "cls_positions")}
    out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                batch["masked_positions"], **options)
    ours, _ = pretraining_loss(out.mlm_logits, out.nsp_logits, batch)
    theirs, _ = torch_pretraining_loss(
        torch.from_numpy(np.array(out.mlm_logits)), torch.from_numpy(np.array(out.nsp_logits)),
        {k: torch.from_numpy(v) for k, v in batch.items()})
    assert abs(float(ours) - float(theirs)) <= SUM_TOL


def _config(corpus: str, **extra) -> rc.RunConfig:
    return rc.load(overrides={
        "model.preset": "tiny", "model.hidden_dropout_prob": 0.1,
        "model.attention_probs_dropout_prob": 0.1, "data.corpus": corpus,
        "data.vocab_size": 300, "data.seq_len": 64, "data.max_predictions": 10,
        "data.batch_size": 8, "data.eval_batches": 2, "optim.warmup_steps": 2,
        "train.steps": 12, "train.eval_every": 6, "train.checkpoint_every": 4,
        "train.log_every": 2, **extra})


def test_an_interrupted_packed_run_resumes_bitwise(tmp_path):
    corpus = tmp_path / "speeches.txt"
    docs = _speech_documents()[:3000]
    corpus.write_text("".join("\n".join(d) + "\n\n" for d in docs), encoding="utf-8")
    config = _config(str(corpus))  # data.packing: auto, which packs these short documents
    reference = pretrain(config, tmp_path / "ref", progress=False, log=lambda _: None,
                         data_cache=DATA_CACHE)
    assert reference.steps == 12

    def stop(step: int, metrics: dict) -> None:
        if step == 6:
            raise RuntimeError("stopped on purpose")

    with pytest.raises(RuntimeError, match="on purpose"):
        pretrain(config, tmp_path / "run", progress=False, on_step=stop, log=lambda _: None,
                 data_cache=DATA_CACHE)
    notes: list[str] = []
    pretrain(config, tmp_path / "run", resume=True, progress=False, log=notes.append)
    assert any("resuming at step 4" in n for n in notes)
    assert any(n.startswith("packing: best-fit") for n in notes)
    (step_a, a), (step_b, b) = (read_state(tmp_path / d / "checkpoints") for d in ("ref", "run"))
    assert step_a == step_b == 12
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert np.array_equal(x, y), "parameters / optimizer state differ after resume"
    records = [[{k: r[k] for k in ("step", *TRAIN_METRIC_KEYS)}
                for r in read_jsonl(tmp_path / d / "metrics.jsonl", "train")] for d in ("ref", "run")]
    assert records[0] == records[1] and [r["step"] for r in records[0]] == list(range(1, 13))
    assert read_jsonl(tmp_path / "ref" / "metrics.jsonl", "eval") == read_jsonl(
        tmp_path / "run" / "metrics.jsonl", "eval")


def test_accumulated_micro_batches_of_packed_rows_make_the_whole_batch_update():
    """Micro-batches hold different numbers of pairs and predictions: the loss divides by the
    whole batch's counts (pairs from next_sentence_weights), so 2 accumulated halves make the
    update of the batch at once: plain SGD at rate 1, so the parameters' change is the gradient
    (1e-6: float32 sums in another order; Adam's first step would turn that noise into +-lr)."""
    it = _batches(seq_len=128, max_predictions=20, packing="best-fit")
    batch = it.batch_at(0, 0)
    _, tok = speeches()
    config = BertConfig.from_preset("tiny", vocab_size=tok.vocab_size, hidden_dropout_prob=0.0,
                                    attention_probs_dropout_prob=0.0)  # masks differ per micro
    states = []
    for accum in (1, 2):
        training = assemble(BertForPreTraining(config, rngs=nnx.Rngs(0)), optax.sgd(1.0),
                            seed=0, grad_accum_steps=accum)
        state, metrics = training.train_step(training.state, batch)
        states.append((jax.device_get(state.params), jax.device_get(metrics)))
    (a, ma), (b, mb) = states
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert np.abs(np.asarray(x) - np.asarray(y)).max() <= 1e-6
    assert abs(float(ma["loss"]) - float(mb["loss"])) <= 1e-5  # a loss of ~6: 2 float32 ulps
    assert float(ma["tokens"]) == float(batch["attention_mask"].sum())


def test_the_held_out_set_is_the_same_pairs_packed_or_not(tmp_path):
    """`held_out_batches` packs exactly the pairs and masks of its unpacked batches, also when
    they run past the held-out split's first epoch (exact counts and ids)."""
    shards, tok = speeches()
    run = RunDir(tmp_path / "run")
    run.data_root.mkdir(parents=True)
    (run.data_root / "eval").symlink_to(shards)
    per_epoch = PretrainingBatches(shards, seq_len=64, global_batch_size=64, max_predictions=10,
                                   tokenizer=tok, cache_pairs=False).steps_per_epoch
    config = _config("unused", **{"data.batch_size": 64,
                                  "data.eval_batches": per_epoch + 3})  # into epoch 1
    unpacked = held_out_batches(run, config, tok)
    packed = held_out_batches(run, config, tok, packing="best-fit")
    assert len(packed) < len(unpacked) == per_epoch + 3

    def predictions(batches):
        return sorted(int(i) for b in batches for i in b["masked_ids"][b["masked_weights"] > 0])

    assert predictions(packed) == predictions(unpacked)
    assert sum(float(b["next_sentence_weights"].sum()) for b in packed) == 64 * (per_epoch + 3)
    labels = [sorted(np.concatenate([b["next_sentence_label"][b["next_sentence_weights"] > 0]
                                     for b in packed]).tolist()),
              sorted(np.concatenate([b["next_sentence_label"] for b in unpacked]).tolist())]
    assert labels[0] == labels[1]
