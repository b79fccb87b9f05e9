"""Run configuration: files, overrides, unknown options/presets, resume mismatch; metrics log."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from use_helpers import DATA_CACHE

from bertjax.cli.main import main
from bertjax.common.options import options
from bertjax.errors import InputError
from bertjax.runs import config as rc
from bertjax.runs.layout import CONTENTS
from bertjax.train.loop import PendingMetrics, TrainClock, flush_and_tick
from bertjax.train.metrics import MetricsWriter, read_jsonl, truncate_jsonl
from bertjax.train.schedule import OptimConfig
from bertjax.viz import curves
from bertjax.viz.curves import plot_curves


def test_file_then_overrides(tmp_path: Path) -> None:
    toml = tmp_path / "run.toml"
    toml.write_text('[model]\npreset = "tiny"\n[optim]\nlearning_rate = 1e-3\n[train]\nsteps = 40\n')
    cfg = rc.load(toml, {"optim.learning_rate": "3e-4", "train.seed": "5"})
    assert cfg.model.preset == "tiny" and cfg.train.steps == 40
    assert cfg.optim.learning_rate == 3e-4 and cfg.train.seed == 5
    as_json = tmp_path / "run.json"
    as_json.write_text(json.dumps(cfg.to_dict()))
    assert rc.load(as_json) == cfg
    as_yaml = tmp_path / "run.yaml"
    as_yaml.write_text("train:\n  steps: 7\n")
    assert rc.load(as_yaml).train.steps == 7


def test_unknown_option_names_close_match_and_lists_all() -> None:
    with pytest.raises(ValueError) as err:
        rc.load(None, {"optim.learnig_rate": "1"})
    text = str(err.value)
    assert "unknown option 'optim.learnig_rate'" in text
    assert "did you mean optim.learning_rate" in text
    assert all(o.name in text for o in options(rc.RunConfig))


def test_unknown_section_and_preset_and_bad_values(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[optimizer]\nlr = 1\n")
    with pytest.raises(ValueError, match=rf"--config {bad}: unknown option 'optimizer.lr'"):
        rc.load(bad)
    with pytest.raises(ValueError, match=r"model.preset must be one of base, .*got 'huge'"):
        rc.load(None, {"model.preset": "huge"})
    with pytest.raises(ValueError, match="train.steps must be a positive integer, got 'many'"):
        rc.load(None, {"train.steps": "many"})
    with pytest.raises(ValueError, match=r"data.seq_len \(1024\) exceeds the model's max_pos"):
        rc.load(None, {"data.seq_len": "1024"})


def test_differences_name_each_field() -> None:
    saved = rc.RunConfig().to_dict()
    requested = rc.load(None, {"optim.learning_rate": "1e-4", "data.batch_size": "32"})
    assert rc.differences(saved, requested) == [
        "data.batch_size: saved 8, requested 32",
        "optim.learning_rate: saved 0.001, requested 0.0001",
    ]
    assert rc.differences(saved, rc.RunConfig()) == []


def test_cli_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["pretrain", "--optim.learnig-rate=1e-3"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "unknown option --optim.learnig-rate (did you mean --optim.learning-rate" in err
    with pytest.raises(SystemExit):
        main(["pretrain", "--optim.learning_rate=1e-3"])  # the field's spelling, not the flag's
    assert "written with '-', not '_': --optim.learning-rate" in capsys.readouterr().err

    with pytest.raises(SystemExit) as exit_info:
        main(["pretrain", "--model.preset=huge"])
    assert exit_info.value.code == 2
    assert ("argument --model.preset: expected one of base, large, medium, mini, small, tiny, "
            "got 'huge'") in capsys.readouterr().err

    assert main(["pretrain", "--print-config", "--train.steps=12"]) == 0
    out = capsys.readouterr().out
    assert "[train]\nsteps = 12\n" in out


def test_print_config_read_back_with_config_prints_the_same(tmp_path: Path, capsys) -> None:
    """Every kind of option (a choice, a float, a bool switch, an int whose default resolves by
    preset) survives --print-config -> --config -> --print-config, and options beside --config
    win over the file."""
    argv = ["pretrain", "--print-config", "--model.preset=tiny", "--no-model.remat",
            "--model.scan-layers", "--optim.learning-rate=3e-4", "--data.corpus=my corpus/*.txt",
            "--train.steps=40"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    (tmp_path / "run.toml").write_text(first)
    assert main(["pretrain", "--print-config", f"--config={tmp_path / 'run.toml'}"]) == 0
    assert capsys.readouterr().out == first
    assert main(["pretrain", "--print-config", f"--config={tmp_path / 'run.toml'}",
                 "--train.steps=7"]) == 0
    assert capsys.readouterr().out == first.replace("steps = 40", "steps = 7")
    loaded = rc.load(tmp_path / "run.toml")
    assert (loaded.model.scan_layers, loaded.model.local_layers, loaded.data.corpus) == (
        True, 0, "my corpus/*.txt")


def test_help_explains_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    text = capsys.readouterr().out
    for option in options(rc.RunConfig):
        assert option.flag in text
    for flag in ("--config", "--output-dir", "--resume", "--coordinator-address",
                 "--num-processes", "--process-id", "--time-limit"):
        assert flag in text
    for name, what in CONTENTS:  # the run directory's files, from their one owner
        assert f"{name}" in text and what in " ".join(text.split())


def test_metrics_log_truncates_on_resume_and_plots(tmp_path: Path) -> None:
    w = MetricsWriter(tmp_path / "metrics.jsonl", tensorboard_dir=tmp_path / "tensorboard")
    for step in range(1, 7):
        w.log("train", step, {"loss": 5.0 - step * 0.1, "mlm_accuracy": 0.01 * step,
                              "learning_rate": 1e-3})
    w.log("eval", 3, {"mlm_loss": 4.0, "mlm_accuracy": 0.1, "baseline_accuracy": 0.05})
    w.log("train", 7, {"loss": float("nan")})
    w.close()
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6, 3, 7]
    assert records[-1]["loss"] == "nan"
    assert any((tmp_path / "tensorboard").iterdir())
    assert truncate_jsonl(tmp_path / "metrics.jsonl", 4) == 5
    w = MetricsWriter(tmp_path / "metrics.jsonl", resume_step=4)
    w.log("train", 5, {"loss": 1.0})
    w.close()
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl", "train")] == [1, 2, 3, 4, 5]
    png = plot_curves(read_jsonl(tmp_path / "metrics.jsonl"), tmp_path / "curves.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_resumed_runs_tensorboard_curve_reads_as_one_run(tmp_path: Path) -> None:
    """TensorBoard (its own reader) shows the resumed run's points from the restored step on,
    none of the abandoned ones after it, also where the two runs log at different steps."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board = tmp_path / "tensorboard"
    w = MetricsWriter(tmp_path / "metrics.jsonl", tensorboard_dir=board)
    for step in range(1, 7):  # killed after step 6; the last checkpoint holds step 4
        w.log("train", step, {"loss": float(step)})
    w.close()
    (first,) = board.iterdir()  # a real resume starts later: its file sorts after this one
    stamp = first.name.split(".")[3]
    first.rename(board / first.name.replace(stamp, f"{int(stamp) - 1:010d}", 1))
    w = MetricsWriter(tmp_path / "metrics.jsonl", tensorboard_dir=board, resume_step=4)
    for step in (6, 8):
        w.log("train", step, {"loss": 100.0 + step})
    w.close()
    curve = EventAccumulator(str(board))
    curve.Reload()
    assert [(e.step, e.value) for e in curve.Scalars("train/loss")] == [
        (1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (6, 106.0), (8, 108.0)]


def test_curves_say_at_which_rate_each_mlm_accuracy_was_masked(tmp_path: Path, monkeypatch) -> None:
    """Trained at 40% and held out at 15%, the two MLM accuracies differ for that alone: the
    legend says so."""
    figures = []
    monkeypatch.setattr(curves, "_save", lambda fig, path: figures.append(fig) or Path(path))
    records = [{"kind": "train", "step": 1, "mlm_accuracy": 0.1, "mlm_loss": 5.0, "learning_rate": 1e-3},
               {"kind": "eval", "step": 1, "mlm_accuracy": 0.2, "baseline_accuracy": 0.05}]
    plot_curves(records, tmp_path / "a.png", masking=(0.4, 0.15))
    plot_curves(records, tmp_path / "b.png")
    labels = [[t.get_text() for t in fig.axes[1].get_legend().get_texts()] for fig in figures]
    assert labels[0][:2] == ["train MLM accuracy, 40% masked", "eval MLM accuracy, 15% masked"]
    assert labels[1][:2] == ["train MLM accuracy", "eval MLM accuracy"]


def test_optim_section_is_the_optimizers_own_config() -> None:
    """One definition per field: the run's [optim] is an OptimConfig (its schedule spans
    train.steps, passed where the optimizer is made); the saved keys, defaults and error messages
    are the run's. A warm-up in steps or as a share: giving one turns the other off."""
    cfg = rc.load(None, {"train.steps": "40", "optim.learning_rate": "5e-4"})
    assert isinstance(cfg.optim, OptimConfig)
    assert cfg.optim == OptimConfig(learning_rate=5e-4, warmup_steps=250)
    assert list(cfg.to_dict()["optim"]) == ["optimizer", "learning_rate", "warmup_steps",
                                            "warmup_fraction", "schedule", "decay_fraction",
                                            "weight_decay", "b1", "b2", "eps", "clip_norm",
                                            "grad_accum_steps", "flatten"]
    assert rc.RunConfig.from_dict(cfg.to_dict()) == cfg
    by_name = {o.name: o for o in options(rc.RunConfig)}
    assert "optim.total_steps" not in by_name
    assert (by_name["optim.learning_rate"].default, by_name["optim.warmup_steps"].default) == (1e-3, 250)
    for field in dataclasses.fields(OptimConfig):  # help text written once, on OptimConfig
        assert by_name[f"optim.{field.name}"].help == field.metadata["help"]
    share = rc.load(None, {"optim.warmup_fraction": "0.1"}).optim
    assert (share.warmup_steps, share.warmup_fraction) == (None, 0.1)  # the default's 250 off
    with pytest.raises(ValueError, match="warmup_steps .3. and warmup_fraction .0.1. both"):
        rc.load(None, {"optim.warmup_fraction": "0.1", "optim.warmup_steps": "3"})
    for override, message in [
        ({"optim.optimizer": "adagrad"}, "optim.optimizer must be one of adamw, "),
        ({"optim.grad_accum_steps": "0"}, "optim.grad_accum_steps must be a positive integer, "
                                          "got '0'"),
        ({"optim.learning_rate": "-1"}, "optim.learning_rate must be a number above 0, got '-1'"),
        ({"optim.learning_rate": "inf"}, "optim.learning_rate must be a number above 0"),
        ({"optim.clip_norm": "-1"}, "optim.clip_norm must be a number >= 0, got '-1'"),
        ({"optim.clip_norm": "nan"}, "optim.clip_norm must be a number >= 0, got 'nan'"),
        ({"optim.b1": "1"}, "optim.b1 must be a probability in [0, 1), got '1'"),
        ({"optim.eps": "inf"}, "optim.eps must be a number above 0, got 'inf'"),
        ({"optim.weight_decay": "nan"}, "optim.weight_decay must be a number >= 0, got 'nan'"),
        ({"optim.total_steps": "9"}, "unknown option 'optim.total_steps'"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            rc.load(None, override)


def test_electra_objective_takes_its_recipe_unless_given(tmp_path: Path, capsys) -> None:
    """`--train.objective electra` takes ELECTRA's learning rate (runs.recipes.ELECTRA) where
    the run gives none; a rate given, in a file or an option, wins; a saved run reads back its
    own."""
    assert rc.load(None, {}).optim.learning_rate == 1e-3  # BERT's recipe
    electra = rc.load(None, {"train.objective": "electra"})
    assert (electra.optim.learning_rate, electra.model_type) == (3e-4, "electra")
    assert rc.load(None, {"train.objective": "electra", "optim.learning_rate": 4e-4}
                   ).optim.learning_rate == 4e-4
    saved = {**electra.to_dict(), "optim": {**electra.to_dict()["optim"], "learning_rate": 1e-3}}
    assert rc.RunConfig.from_dict(saved).optim.learning_rate == 1e-3  # an older run's own
    (tmp_path / "e.toml").write_text('[train]\nobjective = "electra"\n')
    assert rc.load(tmp_path / "e.toml").optim.learning_rate == 3e-4
    assert main(["pretrain", "--train.objective=electra", "--print-config"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("# objective electra: its pre-training recipe")
    assert "\nlearning_rate = 0.0003\n" in printed


def test_max_predictions_follows_the_masking_rate_unless_given() -> None:
    """Unset, `data.max_predictions` is BERT's rule, ceil(seq_len x mask_prob): a shorter sequence
    or another rate gets its own width; given, it wins. The saved configuration holds the number,
    and a saved run reads back as the same run."""
    resolved = {(): 52, (("data.seq_len", "32"),): 13, (("data.mask_prob", "0.15"),): 20,
                (("data.seq_len", "512"), ("data.mask_prob", "0.15"), ("model.preset", "base")): 77,
                (("data.max_predictions", "7"),): 7}
    for overrides, want in resolved.items():
        cfg = rc.load(None, dict(overrides))
        assert (cfg.data.predictions, cfg.to_dict()["data"]["max_predictions"]) == (want, want)
        assert rc.RunConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(InputError, match=r"data.max_predictions \(40\) exceeds data.seq_len"):
        rc.load(None, {"data.seq_len": "32", "data.max_predictions": "40"})


def test_held_out_batches_are_masked_at_bert_rate_whatever_the_run_trains_with(
        tmp_path: Path) -> None:
    """Held-out accuracies compare across recipes: the evaluation masks 15% of the candidates
    (the same pairs and positions as a 15% run's), and a run at another rate is also evaluated
    at its own rate on the same pairs."""
    import numpy as np

    from bertjax.jobs.pretrain.data import open_data
    from bertjax.runs.layout import RunDir

    def rate(batches: list[dict]) -> float:  # masked / maskable ([CLS] and two [SEP] are not)
        masked = sum(float(b["masked_weights"].sum()) for b in batches)
        return masked / sum(float(b["attention_mask"].sum()) - 3 * len(b["attention_mask"])
                            for b in batches)

    small = {"data.vocab_size": "300", "data.seq_len": "64", "data.max_predictions": "40",
             "data.eval_batches": "6", "data.mask_prob": "0.15"}
    # the vocabulary and shards from the suite's data cache, as the other runs take them:
    # masking happens after, as batches are drawn
    at_15 = open_data(rc.load(None, small), RunDir(tmp_path / "a"), cache=DATA_CACHE)
    at_40 = open_data(rc.load(None, {**small, "data.mask_prob": "0.4"}), RunDir(tmp_path / "b"),
                      cache=DATA_CACHE)
    assert at_15.own_rate_batches == []
    assert rate(at_15.eval_batches) == pytest.approx(0.15, abs=0.01)
    assert rate(at_40.own_rate_batches) == pytest.approx(0.40, abs=0.01)
    for a, b in zip(at_15.eval_batches, at_40.eval_batches, strict=True):
        assert all(np.array_equal(a[k], b[k]) for k in a)
    assert (at_40.baseline_token, at_40.baseline_accuracy) == (
        at_15.baseline_token, at_15.baseline_accuracy)


def test_speed_records_count_each_interval_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                 ) -> None:
    """Each flush after the first logs the interval's steps/s (and tokens/s given a token count);
    a flush with no new step logs nothing (the time before it trained nothing); `resume` leaves
    out what the loop did between steps."""
    now = [100.0]
    monkeypatch.setattr("bertjax.train.loop.time.perf_counter", lambda: now[0])
    writer = MetricsWriter(tmp_path / "metrics.jsonl")
    pending = PendingMetrics(lambda m: dict(m), writer, advice=lambda: "")
    clock = TrainClock(total=10, start=0, tokens_per_step=None, progress=False)
    for step, seconds in ((1, 5.0), (3, 1.0), (3, 0.5), (7, 1.5), (9, 1.0)):  # 1: compilation
        now[0] += seconds
        pending.add(step, {"loss": 1.0})
        flush_and_tick(pending, clock, writer, step)
        if step == 7:
            now[0] += 10.0  # an evaluation, say
            clock.resume()
    writer.close()
    speed = read_jsonl(tmp_path / "metrics.jsonl", "speed")
    assert [(r["step"], r["steps_per_s"]) for r in speed] == [(3, 2.0), (7, 4 / 1.5), (9, 2.0)]
    assert "tokens_per_s" not in speed[0]  # no token count (fine-tuning's batches vary)
    assert clock.first_step_s == 5.0 and clock.steps == 8 and clock.seconds == 3.5
    tokens = TrainClock(total=10, start=0, tokens_per_step=64, progress=False)
    assert tokens.tick(1, {}) == {}
    now[0] += 0.5
    assert tokens.tick(2, {}) == {"steps_per_s": 2.0, "tokens_per_s": 128.0}
