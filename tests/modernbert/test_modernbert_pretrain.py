"""`bertjax pretrain --model.model-type modernbert`: ModernBERT's recipe for the options a run
leaves out (a masked LM alone at 30% on packed rows, warm-up-stable-decay, its AdamW settings),
the WSD schedule's rates against the formula worked by hand (Optax's and the PyTorch mirror's),
the settings it refuses in one line, and a tiny run end to end: trained at those rates, loaded
back as ModernBERT's masked LM, converted to a directory transformers loads with the same logits
(1e-5), and resumed bitwise after an interruption."""

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
import torch
import transformers
from use_helpers import DATA_CACHE, state_leaves

import bertjax
from bert_torch.train import make_optimizer as torch_optimizer
from bertjax.cli.main import main
from bertjax.data import PretrainingBatches
from bertjax.inputs import packing_options
from bertjax.jobs.pretrain.job import TRAIN_METRIC_KEYS, pretrain
from bertjax.runs import config as rc
from bertjax.runs.recipes import MODERNBERT
from bertjax.train.metrics import read_jsonl
from bertjax.train.optim import learning_rate_schedule
from bertjax.train.saved import read_state
from bertjax.train.schedule import OptimConfig

PEAK = 8e-4  # ModernBERT's peak learning rate, the recipe's
# 8 steps: warm-up over 2, the last half (4 updates) decaying; checkpoints at 3, 4 (eval), 6, 8
FLAGS = ["--model.model-type=modernbert", "--model.preset=tiny", "--data.vocab-size=300",
         "--data.seq-len=32", "--data.batch-size=4", "--data.eval-batches=2",
         "--optim.warmup-steps=2", "--optim.decay-fraction=0.5", "--train.steps=8",
         "--train.eval-every=4", "--train.checkpoint-every=3", "--train.log-every=2"]
# The update after k updates, worked by hand (peak 1): warm-up k / 2, the peak, then from update
# 4 of 8 the decay 1 - sqrt(share of the 4 decay updates done)
RUN_RATES = [0.0, 0.5, 1.0, 1.0, 1.0, 1 - math.sqrt(0.25), 1 - math.sqrt(0.5), 1 - math.sqrt(0.75)]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, str]:
    """A tiny 8-step ModernBERT run with the recipe's defaults, and what the command printed
    (its progress lines on stderr too)."""
    out = tmp_path_factory.mktemp("modernbert") / "run"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        assert main(["pretrain", "--output-dir", str(out), "--no-progress", *FLAGS]) == 0
    return out, printed.getvalue()


def test_the_recipe_fills_the_options_left_out_and_given_ones_win() -> None:
    config = rc.load(None, {"model.model_type": "modernbert"})
    assert (config.train.objective, config.model_class) == ("mlm", "BertForMaskedLM")
    assert (config.data.mask_prob, config.data.packing, config.data.predictions) == (
        0.3, "best-fit", 39)  # ceil(128 x 0.3)
    o = config.optim
    assert (o.optimizer, o.schedule, o.decay_share, o.learning_rate, o.b1, o.b2, o.eps,
            o.weight_decay) == ("adamw", "wsd", 0.2, 8e-4, 0.9, 0.98, 1e-6, 0.0125)
    assert config.model.local_layers == 0  # no position table to initialise
    model = config.bert_config()
    assert (model.model_type, model.num_hidden_layers, model.hidden_size, model.intermediate_size,
            model.layer_norm_eps) == ("modernbert", 4, 256, 384, 1e-5)  # the mini preset's
    assert rc.RunConfig.from_dict(config.to_dict()) == config  # what run_config.json reads as
    mine = rc.load(None, {"model.model_type": "modernbert", "data.mask_prob": 0.15,
                          "optim.schedule": "linear"})
    assert (mine.data.mask_prob, mine.optim.schedule, mine.optim.decay_share, mine.optim.b2,
            mine.data.packing) == (0.15, "linear", None, 0.98, "best-fit")
    bert = rc.load(None, {"train.objective": "mlm"})  # BERT's recipe as it was
    assert (bert.data.mask_prob, bert.data.packing, bert.optim.schedule, bert.optim.b2,
            bert.optim.learning_rate) == (0.4, "auto", "linear", 0.999, 1e-3)


def test_print_config_says_so_and_a_file_naming_the_family_gets_the_recipe(tmp_path,
                                                                           capsys) -> None:
    assert main(["pretrain", "--model.model-type=modernbert", "--data.mask-prob=0.2",
                 "--print-config"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("# model_type modernbert: its pre-training recipe")
    assert all(f"#   {name} = " in printed for name in MODERNBERT)
    for line in ("mask_prob = 0.2", 'packing = "best-fit"', 'schedule = "wsd"',
                 "decay_fraction = 0.2", "b2 = 0.98", 'objective = "mlm"', "intermediate_size = 384"):
        assert f"\n{line}\n" in printed, line
    (tmp_path / "run.toml").write_text(printed)
    assert main(["pretrain", "--print-config", f"--config={tmp_path / 'run.toml'}"]) == 0
    assert capsys.readouterr().out == printed  # read back as printed
    (tmp_path / "family.toml").write_text('[model]\nmodel_type = "modernbert"\n')
    assert main(["pretrain", "--print-config", f"--config={tmp_path / 'family.toml'}",
                 "--data.mask-prob=0.2"]) == 0
    assert capsys.readouterr().out == printed
    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 0.4; modernbert: 0.3)" in text and "--model.model-type modernbert:" in text


@pytest.mark.parametrize(("flags", "says"), [
    (["--model.model-type=modernbert", "--train.objective=mlm+nsp"],
     "model_type='modernbert' has no next-sentence head"),
    (["--model.model-type=modernbert", "--optim.decay-fraction=1.5"],
     "--optim.decay-fraction: expected a number in [0, 1], got '1.5'"),
    (["--optim.decay-fraction=0.3"], "optim.decay_fraction (0.3) sets the wsd schedule's decay"),
    (["--model.model-type=modernbert", "--optim.schedule=linear", "--optim.decay-fraction=0.3"],
     "schedule is 'linear': pass schedule wsd"),
    (["--model.model-type=modernbert", "--model.local-attention-layers=2"],
     "modernbert (rotary positions) has none of"),
])
def test_bad_settings_are_one_line_and_exit_2(flags, says, capsys) -> None:
    status = 0
    try:
        status = main(["pretrain", *flags, "--print-config"])
    except SystemExit as exit_:  # argparse's own errors (a value out of range) exit there
        status = exit_.code
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err, err


# (warm-up, decay_fraction, updates) -> the rate of each update after k updates, worked by hand
HAND = [
    ((2, 0.4, 10), [0.0, 0.5, 1, 1, 1, 1, 1, 1 - math.sqrt(1 / 4), 1 - math.sqrt(2 / 4),
                    1 - math.sqrt(3 / 4), 0.0, 0.0]),  # decay from update 6, 0 past the end
    ((2, 0.0, 5), [0.0, 0.5, 1, 1, 1, 1]),  # no decay: the peak to the end
    ((5, 0.5, 8), [0.0, 0.2, 0.4, 0.6, 0.8, 1 - math.sqrt(1 / 4), 1 - math.sqrt(2 / 4),
                   1 - math.sqrt(3 / 4)]),  # a warm-up into the decay: the lower of the two
    ((0, None, 10), [1, 1, 1, 1, 1, 1, 1, 1, 1, 1 - math.sqrt(1 / 2)]),  # the default share: 0.2
]


@pytest.mark.parametrize(("shape", "rates"), HAND)
def test_wsd_gives_the_hand_computed_rates_in_optax_and_pytorch(shape, rates) -> None:
    """Optax's float32 schedule within 1e-6 (relative), PyTorch's LambdaLR within 1e-12."""
    warmup, fraction, total = shape
    optim = OptimConfig(learning_rate=1e-3, warmup_steps=warmup, schedule="wsd",
                        decay_fraction=fraction)
    schedule = learning_rate_schedule(optim, total)
    optimizer, scheduler = torch_optimizer(torch.nn.Linear(2, 2), optim, total)
    for step, rate in enumerate(rates):
        assert float(schedule(step)) == pytest.approx(1e-3 * rate, rel=1e-6, abs=1e-12), step
        assert scheduler.get_last_lr()[0] == pytest.approx(1e-3 * rate, rel=1e-12, abs=0), step
        optimizer.step()  # no gradients: changes nothing, keeps the call order torch expects
        scheduler.step()


@pytest.mark.slow
def test_the_run_trains_a_masked_lm_on_packed_rows_at_the_wsd_rates(run) -> None:
    run_dir, printed = run
    train = read_jsonl(run_dir / "metrics.jsonl", "train")
    assert [r["step"] for r in train] == list(range(1, 9))
    assert all(math.isfinite(r["loss"]) and r["loss"] == r["mlm_loss"] for r in train)
    assert not any(k.startswith("nsp_") for r in train for k in r)
    assert [r["learning_rate"] for r in train] == pytest.approx(
        [PEAK * rate for rate in RUN_RATES], rel=1e-6, abs=1e-12)
    assert [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl", "eval")] == [4, 8]
    assert "tiny modernbert BertForMaskedLM" in printed
    segments, rows = map(int, re.search(r"packing: best-fit, (\d+) segments in about (\d+) rows",
                                        printed).groups())
    assert rows < 0.95 * segments  # several segments to a row
    saved = json.loads((run_dir / "run_config.json").read_text())
    assert (saved["model"]["model_type"], saved["data"]["mask_prob"], saved["optim"]["schedule"],
            saved["optim"]["weight_decay"]) == ("modernbert", 0.3, "wsd", 0.0125)


@pytest.mark.slow
def test_it_loads_as_modernberts_masked_lm_and_converts_with_the_same_logits(run, tmp_path,
                                                                            capsys) -> None:
    model, tokenizer = bertjax.from_pretrained(run[0])
    config = model.config
    assert type(model) is bertjax.BertForMaskedLM and config.model_type == "modernbert"
    assert config.family.class_name(type(model).__name__) == "ModernBertForMaskedLM"
    assert (config.intermediate_size, config.layer_norm_eps) == (192, 1e-5)  # the tiny preset's
    out = tmp_path / "hf"
    assert main(["convert", str(run[0]), str(out)]) == 0
    assert "loads it as ModernBertForMaskedLM" in capsys.readouterr().out  # its own check
    hf, info = transformers.AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert type(hf).__name__ == "ModernBertForMaskedLM"
    assert {k: v for k, v in info.items() if v} == {}  # no missing, unexpected or mismatched keys
    ids = transformers.AutoTokenizer.from_pretrained(out)(
        "To be, or not to [MASK]: that is the question.")["input_ids"]
    assert ids[0] == tokenizer.special.cls and tokenizer.special.mask in ids
    with torch.no_grad():
        theirs = hf.eval()(torch.tensor([ids])).logits[0].numpy()
    ours = np.asarray(model(jnp.asarray([ids])).mlm_logits[0])
    assert np.abs(theirs).max() > 0.5  # logits well away from 0
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_packed_segments_score_as_each_segment_alone(run) -> None:
    """Packed rows compute what the unpadded segments would (attention and the local windows
    inside each segment, rotary positions restarting in each): a packed batch's masked-LM logits
    at its predictions equal those of its segments one per row within 1e-5 (attention leaking
    across the shared row of a barely trained model moved them 3.5e-3)."""
    model, tokenizer = bertjax.from_pretrained(run[0])
    it = PretrainingBatches(run[0] / "data" / "train", seq_len=32, global_batch_size=4,
                            max_predictions=10, mask_prob=0.3, tokenizer=tokenizer,
                            next_sentence=False, packing="best-fit")
    packed = it.batch_at(0, 0)
    assert (packed["cls_positions"] >= 0).sum() > 4  # several segments share a row
    index, _ = it.plan(0).rows(0, 4, 4)
    alone = it.make_batch(index, 0)

    def predictions(batch: dict) -> tuple[np.ndarray, np.ndarray]:
        b = jax.tree.map(jnp.asarray, batch)
        out = model(b["input_ids"], b["token_type_ids"], b["attention_mask"],
                    b["masked_positions"], **packing_options(b))
        chosen = batch["masked_weights"] > 0
        return batch["masked_ids"][chosen], np.asarray(out.mlm_logits)[chosen]

    (ids, logits), (ids_alone, logits_alone) = predictions(packed), predictions(alone)
    assert len(ids) > 20 and np.array_equal(ids, ids_alone)  # the same predictions, in order
    np.testing.assert_allclose(logits, logits_alone, rtol=0, atol=1e-5)


@pytest.mark.slow
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
    assert result.steps == 8 and any("resuming at step 4" in n for n in notes), notes
    (step_a, a), (step_b, b) = (read_state(d / "checkpoints") for d in (run[0], tmp_path / "run"))
    assert step_a == step_b == 8
    for x, y in zip(state_leaves(a), state_leaves(b), strict=True):
        assert np.array_equal(x, y), "parameters / optimizer state differ after resume"
    keys = ("step", *(k for k in TRAIN_METRIC_KEYS if not k.startswith("nsp_")))
    records = [[{k: r[k] for k in keys} for r in read_jsonl(d / "metrics.jsonl", "train")]
               for d in (run[0], tmp_path / "run")]
    assert records[0] == records[1]
    assert read_jsonl(run[0] / "metrics.jsonl", "eval") == read_jsonl(tmp_path / "run" /
                                                                       "metrics.jsonl", "eval")


@pytest.mark.slow
def test_the_run_loads_as_its_bare_encoder_and_bench_embed_reads_it(run, tmp_path, capsys) -> None:
    """`from_pretrained(RUN, model_cls=BertModel)` is the family's bare encoder, ModernBertModel
    (it built BERT's, which refused the config), and `bench embed --model RUN` times it beside
    transformers' ModernBertModel with the same vectors (1e-5)."""
    model, _ = bertjax.from_pretrained(run[0], model_cls=bertjax.BertModel)
    assert type(model).__name__ == "ModernBertModel" and model.config.model_type == "modernbert"
    path = tmp_path / "embed.json"
    assert main(["bench", "embed", "--model", str(run[0]), "--lines", "12", "--repeats", "1",
                 "--batch-size", "4", "--json", str(path)]) == 0, capsys.readouterr().err
    report = json.loads(path.read_text())
    assert report["bertjax_class"] == report["transformers_class"] == "ModernBertModel"
    for row in report["rows"][:2]:
        assert row["max_abs_diff"] < 1e-5, row
