"""Next-sentence prediction's options: where NotNext's B comes from (`data.not_next`) and the
two losses' weights (`train.mlm_loss_weight`, `train.nsp_loss_weight`)."""

from __future__ import annotations

import hashlib
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from data_helpers import fresh_dir, minilm_tokenizer, shakespeare_shards
from flax import nnx
from use_helpers import DATA_CACHE

from bertjax import BertConfig
from bertjax.data import PretrainingBatches, Shards, create_pairs, write_shards
from bertjax.data import pairs as pairs_module
from bertjax.errors import InputError
from bertjax.heads import BertForPreTraining
from bertjax.runs import config as rc
from bertjax.runs.layout import RunDir
from bertjax.train.objectives import PRETRAINING, pretraining


def _docs(n: int, sentences: int = 6) -> list[list[str]]:
    return [[f"document {d} sentence {s} says something about thing {d * 7 + s}."
             for s in range(sentences)] for d in range(n)]


def _halves(shards: Shards, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(document of A, document of B, the first document of the corpus's second half)."""
    starts = shards.document_token_offsets()
    doc_a = np.searchsorted(starts, pairs[:, 0], side="right") - 1
    doc_b = np.searchsorted(starts, pairs[:, 2], side="right") - 1
    cut = int(np.searchsorted(starts[:-1], starts[-1] / 2, side="right"))
    return doc_a, doc_b, cut


@pytest.mark.slow
@pytest.mark.parametrize("not_next", ["far", "any"])
def test_far_not_next_takes_b_from_the_other_half_of_the_corpus(not_next: str) -> None:
    """With "far", every NotNext B comes from the half of the corpus A is not in, while "any"
    (BERT's rule) draws from both halves; IsNext and the 50/50 balance are the same either way."""
    shards = shakespeare_shards()
    pairs = create_pairs(shards, 128, seed=7, not_next=not_next)
    doc_a, doc_b, cut = _halves(shards, pairs)
    label = pairs[:, 4]
    nxt = label == pairs_module.IS_NEXT
    assert (doc_a[nxt] == doc_b[nxt]).all()
    assert (doc_a[~nxt] != doc_b[~nxt]).all()
    assert abs(np.mean(label) - 0.5) < 0.01
    other_half = (doc_a[~nxt] < cut) != (doc_b[~nxt] < cut)
    if not_next == "far":
        assert other_half.all()
        # both halves give A: the rule runs both ways
        assert (doc_a[~nxt] < cut).mean() == pytest.approx(0.5, abs=0.05)
    else:
        assert other_half.mean() == pytest.approx(0.5, abs=0.05)


def test_any_keeps_the_pairs_and_the_cache_name_runs_were_made_with() -> None:
    """"any" is the rule every run before the option used: the same pairs bitwise (the digest
    of the pairs the code before the option made) in a cache file of the same name."""
    out = fresh_dir("not-next") / "s"
    write_shards(_docs(40), minilm_tokenizer(), out)
    shards = Shards(out)
    pairs = create_pairs(shards, 32, seed=3)
    assert np.array_equal(pairs, create_pairs(shards, 32, seed=3, not_next="any"))
    assert hashlib.sha256(pairs.tobytes()).hexdigest()[:16] == "afa8a388e8848efc"
    assert not np.array_equal(pairs, create_pairs(shards, 32, seed=3, not_next="far"))
    assert pairs_module.pairs_path(shards, 32, 0.1, 1, 3).name == "pairs-s32-p0.1-d1-r3.npy"
    assert pairs_module.pairs_path(shards, 32, 0.1, 1, 3, "far").name == \
        "pairs-s32-p0.1-d1-r3-nfar.npy"
    # the batches take the rule, and each rule its own cache file (as the job keeps them)
    any_rule = PretrainingBatches(out, seq_len=32, global_batch_size=8, max_predictions=5,
                                  cache_pairs=True)
    far = PretrainingBatches(out, seq_len=32, global_batch_size=8, max_predictions=5,
                             not_next="far", cache_pairs=True)
    assert np.array_equal(far.pairs, create_pairs(shards, 32, seed=0, not_next="far"))
    assert not np.array_equal(far.pairs, any_rule.pairs)
    assert sorted(p.name for p in out.glob("pairs-*.npy")) == [
        "pairs-s32-p0.1-d1-r0-nfar.npy", "pairs-s32-p0.1-d1-r0.npy"]


def test_an_unknown_not_next_rule_is_refused() -> None:
    with pytest.raises(InputError, match=r"not_next must be one of any, far, got 'near'"):
        create_pairs(shakespeare_shards(), 64, not_next="near")
    with pytest.raises(InputError, match=r"data.not_next must be one of any, far, got "
                                         r"'near'"):
        rc.load(None, {"data.not_next": "near"})


def test_held_out_and_training_batches_follow_the_runs_rule(monkeypatch) -> None:
    """The job's batches (training and held-out) are made with the run's `data.not_next`."""
    from bertjax.jobs.pretrain import data as pretrain_data

    config = rc.load(None, {"data.not_next": "far"})
    options = pretrain_data._batch_options(config, minilm_tokenizer())
    assert options["not_next"] == "far"
    assert pretrain_data._batch_options(rc.load(None, {"data.not_next": "any"}),
                                        minilm_tokenizer())["not_next"] == "any"


@pytest.mark.parametrize(("name", "value", "message"), [
    ("train.nsp_loss_weight", "-1", "train.nsp_loss_weight must be a number >= 0, got '-1'"),
    ("train.mlm_loss_weight", "nan", "train.mlm_loss_weight must be a number >= 0, got 'nan'"),
    ("train.mlm_loss_weight", "inf", "train.mlm_loss_weight must be a number >= 0, got 'inf'"),
])
def test_a_loss_weight_out_of_range_is_refused(name: str, value: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        rc.load(None, {name: value})


def test_both_loss_weights_zero_is_refused() -> None:
    with pytest.raises(InputError, match="both 0: nothing would be trained"):
        rc.load(None, {"train.mlm_loss_weight": "0", "train.nsp_loss_weight": "0"})
    assert rc.load(None, {"train.mlm_loss_weight": "0"}).train.nsp_loss_weight == 1.0


def test_a_run_saved_before_the_options_resumes_as_it_was_made(tmp_path) -> None:
    """A run_config.json written before these options was made with both weights 1 and
    NotNext from any other document: it reads so, and a resume with those values matches."""
    saved = rc.RunConfig().to_dict()
    for section, field in (("train", "mlm_loss_weight"), ("train", "nsp_loss_weight"),
                           ("data", "not_next")):
        del saved[section][field]
    run = RunDir(tmp_path)
    run.config.write_text(json.dumps(saved))
    loaded = run.saved_config()
    assert loaded["train"]["mlm_loss_weight"] == loaded["train"]["nsp_loss_weight"] == 1.0
    assert loaded["data"]["not_next"] == "any"
    assert rc.differences(loaded, rc.RunConfig.from_dict(loaded)) == []
    # the default recipe draws NotNext far away: a bare --resume of such a run names it
    assert rc.RunConfig().data.not_next == "far"
    assert rc.differences(loaded, rc.RunConfig()) == ["data.not_next: saved 'any', requested 'far'"]


def _gradients(objective, batch):
    config = BertConfig.from_preset("tiny", vocab_size=64)
    model = BertForPreTraining(config, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model, nnx.Param)
    counts = objective.counts(batch)

    def loss(p):
        sums = objective.forward_sums(nnx.merge(graphdef, p), batch, None)
        return objective.loss(sums, counts), objective.metrics(sums)

    (value, metrics), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)  # not op by op
    return value, metrics, grads


def _batch() -> dict[str, jax.Array]:
    rng = np.random.default_rng(0)
    B, S, P = 4, 16, 3
    return {"input_ids": jnp.asarray(rng.integers(5, 64, (B, S)), jnp.int32),
            "token_type_ids": jnp.asarray(np.arange(S)[None] >= 8, jnp.int32).repeat(B, 0),
            "attention_mask": jnp.ones((B, S), jnp.int32),
            "masked_positions": jnp.asarray([[1, 5, 9]] * B, jnp.int32),
            "masked_ids": jnp.asarray(rng.integers(5, 64, (B, P)), jnp.int32),
            "masked_weights": jnp.ones((B, P), jnp.float32),
            "next_sentence_label": jnp.asarray([0, 1, 0, 1], jnp.int32)}


def _norm(tree) -> float:
    return float(sum(jnp.sum(x ** 2) for x in jax.tree.leaves(tree)) ** 0.5)


@pytest.mark.slow
def test_loss_weights_scale_each_part_and_zero_leaves_it_out_of_the_gradient() -> None:
    batch = _batch()
    value, metrics, _ = _gradients(pretraining(2.0, 3.0), batch)
    expected = 2.0 * metrics["mlm_loss"] + 3.0 * metrics["nsp_loss"]
    assert float(value) == pytest.approx(float(expected), rel=1e-6)
    assert float(metrics["loss"]) == pytest.approx(float(expected), rel=1e-6)
    base, base_metrics, _ = _gradients(PRETRAINING, batch)  # BERT's 1 + 1
    assert float(base) == pytest.approx(float(base_metrics["mlm_loss"] + base_metrics["nsp_loss"]))
    _, _, nsp_alone = _gradients(pretraining(0.0, 1.0), batch)
    assert _norm(nsp_alone["mlm_head"]) == 0.0  # MLM's head gets nothing from NSP
    assert _norm(nsp_alone["nsp_head"]) > 0 and _norm(nsp_alone["bert"]["pooler"]) > 0
    _, _, mlm_alone = _gradients(pretraining(1.0, 0.0), batch)
    assert _norm(mlm_alone["nsp_head"]) == 0.0 and _norm(mlm_alone["bert"]["pooler"]) == 0.0
    assert _norm(mlm_alone["mlm_head"]) > 0


@pytest.mark.slow
def test_the_pretraining_job_trains_on_the_weighted_loss_with_its_rule(tmp_path) -> None:
    """A short run with both options set: every logged step's loss is the weighted sum, and
    run_config.json holds the options (what --resume checks)."""
    from bertjax.jobs.pretrain.job import pretrain

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join("\n".join(doc) for doc in _docs(40)) + "\n")
    config = rc.load(None, {
        "model.preset": "tiny", "data.corpus": str(corpus), "data.vocab_size": "200",
        "data.seq_len": "32", "data.max_predictions": "5", "data.batch_size": "8",
        "data.eval_batches": "2", "data.not_next": "far", "train.steps": "3",
        "train.log_every": "1", "train.eval_every": "3", "train.checkpoint_every": "3",
        "train.mlm_loss_weight": "0.5", "train.nsp_loss_weight": "2"})
    run_dir = tmp_path / "run"
    pretrain(config, run_dir, progress=False, log=lambda _: None, data_cache=DATA_CACHE)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]
    for r in train:
        assert r["loss"] == pytest.approx(0.5 * r["mlm_loss"] + 2 * r["nsp_loss"], rel=1e-5)
    saved = json.loads((run_dir / "run_config.json").read_text())
    assert saved["train"]["mlm_loss_weight"] == 0.5 and saved["train"]["nsp_loss_weight"] == 2
    assert saved["data"]["not_next"] == "far"
    assert list((run_dir / "data" / "train").glob("pairs-*-nfar.npy"))
