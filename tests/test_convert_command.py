"""`bertjax convert`: a checkpoint of one class written as
a Hugging Face directory of the same or another class, checked before it is put in place.

Each conversion is checked here independently of the command's own check: transformers loads
the directory with nothing missing or unexpected and reproduces bertjax's outputs within
`HF_TOL`; a head `--as` adds is the one the seed makes, the encoder is the source's, bit for bit;
a failed check leaves nothing on disk.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx
from safetensors.numpy import load_file
from use_helpers import tiny_checkpoint, tiny_run

import bertjax
import bertjax.pretrained
from bertjax import BertConfig, save_pretrained
from bertjax.cli import convert as convert_command
from bertjax.cli.main import main
from bertjax.config.heads import MODELS
from bertjax.data import Tokenizer
from bertjax.heads import MODEL_CLASSES
from bertjax.io import verify
from bertjax.io.hf import hf_name
from bertjax.io.weights import model_to_numpy
from bertjax.train.saved import best_step

HF_TOL = 1e-4  # transformers vs bertjax, float32 (the command's own tolerance is checked too)
WORDS = "bert.embeddings.word_embeddings.weight"


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.load(tiny_checkpoint())


@pytest.fixture(scope="module")
def qa(tmp_path_factory, tokenizer) -> Path:
    """A Hugging Face directory of a tiny BertForQuestionAnswering (random weights)."""
    config = BertConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size,
                                    pad_token_id=tokenizer.special.pad)
    path = tmp_path_factory.mktemp("source") / "qa"
    save_pretrained(bertjax.BertForQuestionAnswering(config, rngs=nnx.Rngs(0)), path, tokenizer)
    return path


def _summary(capsys) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return captured.out


def _one_line(err: str, command: str = "convert") -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err[-3000:]
    assert lines[0].startswith(f"bertjax {command}: error: "), lines[0]
    return lines[0]


def _batch(tokenizer, seed: int = 7) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inputs of our own (not the command's probe): two rows, the second padded."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, tokenizer.vocab_size, size=(2, 12)).astype(np.int32)
    ids[:, 0], ids[:, -1] = tokenizer.special.cls, tokenizer.special.sep
    types = np.zeros_like(ids)
    types[:, 6:] = 1
    mask = np.ones_like(ids)
    mask[1, 8:] = 0
    ids[1, 8:] = tokenizer.special.pad
    return ids, types, mask


def _transformers_worst(path: Path, name: str, ours, batch, fields: dict[str, str]) -> float:
    """Load `path` with transformers as `name` (nothing missing or unexpected) and return the
    largest |difference| of its `fields` (ours -> theirs) from bertjax model `ours` on `batch`."""
    hf, info = getattr(transformers, name).from_pretrained(
        path, attn_implementation="eager", output_loading_info=True)
    assert {k: v for k, v in info.items() if v} == {}, info
    ids, types, mask = (torch.from_numpy(x).long() for x in batch)
    with torch.no_grad():
        theirs = hf.float().eval()(ids, token_type_ids=types, attention_mask=mask)
    mine = ours(*(jnp.asarray(x) for x in batch))
    return max(float(np.max(np.abs(np.asarray(getattr(mine, f)) - getattr(theirs, t).numpy())))
               for f, t in fields.items())


def _tensor_count(path: Path) -> tuple[int, int]:
    tensors = load_file(path / "model.safetensors")
    return len(tensors), sum(math.prod(v.shape) for v in tensors.values())


# --- what a conversion writes ---------------------------------------------------------------------


def test_convert_writes_the_class_the_checkpoint_is_and_transformers_reproduces_it(
        qa, tokenizer, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["convert", str(qa), str(out)]) == 0
    summary = _summary(capsys)
    assert json.loads((out / "config.json").read_text())["architectures"] == [
        "BertForQuestionAnswering"]
    tensors, parameters = _tensor_count(out)
    assert f"wrote {out}: BertForQuestionAnswering, 2 layers, hidden 128, vocabulary " \
           f"{tokenizer.vocab_size}" in summary
    assert f"source: {qa} (Hugging Face safetensors, BertForQuestionAnswering)" in summary
    assert f"written: BertForQuestionAnswering, {tensors} tensors, {parameters:,} parameters" \
        in summary
    assert "heads freshly initialised: none" in summary and "heads left out: none" in summary
    assert "verified: bertjax reloads it with the same outputs, max |diff| 0 over " \
           "sequence_output, start_logits, end_logits (tolerance 1e-06)" in summary
    assert f"verified: transformers {transformers.__version__} loads it as " \
           "BertForQuestionAnswering, max |diff|" in summary
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary left beside it
    source, _ = bertjax.from_pretrained(qa)
    fields = {"start_logits": "start_logits", "end_logits": "end_logits"}
    assert _transformers_worst(out, "BertForQuestionAnswering", source, _batch(tokenizer),
                               fields) < HF_TOL
    written = load_file(out / "model.safetensors")
    for name, value in model_to_numpy(source).items():  # a copy: every weight bit for bit
        np.testing.assert_array_equal(written[hf_name(name, "bert")], value, err_msg=name)


def test_convert_as_another_class_adds_a_seeded_head_and_leaves_the_other_out(
        qa, tokenizer, tmp_path, capsys):
    out = tmp_path / "tagger"
    assert main(["convert", str(qa), str(out), "--as", "BertForTokenClassification",
                 "--seed", "3"]) == 0
    captured = capsys.readouterr()
    assert "no weights for token_classifier: freshly initialised (seed 3)" in captured.err
    summary = captured.out
    assert "written: BertForTokenClassification, " in summary
    assert "heads freshly initialised (seed 3): token_classifier" in summary
    assert "heads left out: qa_outputs" in summary
    assert f"verified: transformers {transformers.__version__} loads it as " \
           "BertForTokenClassification" in summary
    assert json.loads((out / "config.json").read_text())["architectures"] == [
        "BertForTokenClassification"]
    written = load_file(out / "model.safetensors")
    assert not any(k.startswith("qa_outputs") for k in written)
    source = model_to_numpy(bertjax.from_pretrained(qa)[0])
    for name, value in source.items():  # the encoder is the source's
        if name.startswith("bert."):
            np.testing.assert_array_equal(written[hf_name(name, "bert")], value, err_msg=name)
    tagger, _ = bertjax.from_pretrained(out)
    fresh = MODEL_CLASSES["BertForTokenClassification"](tagger.config, rngs=nnx.Rngs(3))
    np.testing.assert_array_equal(np.asarray(tagger.token_classifier.kernel[...]),
                                  np.asarray(fresh.token_classifier.kernel[...]))
    assert _transformers_worst(out, "BertForTokenClassification", tagger, _batch(tokenizer),
                               {"logits": "logits"}) < HF_TOL


@pytest.mark.parametrize("name", ["BertModel", "BertForPreTraining", "BertForMultipleChoice"])
def test_convert_as_each_kind_of_output_is_checked_by_transformers(qa, tmp_path, capsys, name):
    """A bare encoder, two heads at once, and (B, C, S) inputs: the probe and the field table."""
    out = tmp_path / "out"
    assert main(["convert", str(qa), str(out), "--as", name]) == 0
    summary = _summary(capsys)
    fields = ", ".join(MODELS[name].hf_outputs.values())
    assert f"loads it as {name}, max |diff|" in summary and f"over {fields}, relative to" in summary
    assert json.loads((out / "config.json").read_text())["architectures"] == [name]


def test_convert_of_a_run_names_the_step_it_wrote(tmp_path, capsys):
    run = tiny_run(tmp_path / "run")
    capsys.readouterr()
    best = best_step(run / "checkpoints")
    other = ({3, 6} - {best}).pop()
    for argv, step in (([], best), (["--step", str(other)], other)):
        out = tmp_path / f"out-{step}"
        assert main(["convert", str(run), str(out), *argv]) == 0
        assert f"({'bertjax pretrain run'}, step {step}, BertForPreTraining)" in _summary(capsys)
        expected, _ = bertjax.from_pretrained(run, step=step)
        written = load_file(out / "model.safetensors")
        np.testing.assert_array_equal(written[hf_name(WORDS, "bert")],
                                      model_to_numpy(expected)[WORDS])
    # the best step damaged: the step written is the readable one the warning names
    target = max((run / "checkpoints" / str(best) / "state" / "d").iterdir(),
                 key=lambda p: p.stat().st_size)
    target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    assert main(["convert", str(run), str(tmp_path / "fallback")]) == 0
    captured = capsys.readouterr()
    assert f"bertjax pretrain run, step {other}, " in captured.out
    warning, = captured.err.strip().splitlines()  # shown once, as export always showed it
    assert warning.startswith("bertjax convert: warning: ") and f"loaded step {other}" in warning


# --- a failed check leaves nothing ----------------------------------------------------------------


def _perturbing_reload(monkeypatch, source: Path, interrupt: bool = False) -> None:
    """bertjax's reload of the written directory (not the source's load) gets one weight off by
    1e-2 (the [CLS] row of the word embeddings, in every probe row), or raises Ctrl-C."""
    real = verify.load_model

    def reload(path, *args, **kwargs):  # the check's reload of the directory written aside
        model, report = real(path, *args, **kwargs)
        assert Path(path) != source
        if interrupt:
            raise KeyboardInterrupt
        words = model.bert.embeddings.word_embeddings.embedding
        words[...] = words[...].at[2, 0].add(1e-2)
        return model, report

    monkeypatch.setattr(verify, "load_model", reload)


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("earlier", [False, True], ids=["new", "over an earlier export"])
@pytest.mark.parametrize("failure", ["bertjax reload", "transformers", "Ctrl-C"])
def test_a_failed_check_leaves_no_out_dir_and_no_temporary(qa, tokenizer, tmp_path, capsys,
                                                          monkeypatch, failure, earlier):
    assert tokenizer.special.cls == 2  # the perturbed row is in every probe row
    out = tmp_path / "out"
    if earlier:
        assert main(["convert", str(tiny_checkpoint()), str(out)]) == 0
    before = _snapshot(tmp_path)
    capsys.readouterr()
    if failure == "transformers":
        real = transformers.BertForQuestionAnswering.from_pretrained

        def perturbed(*args, **kwargs):
            model, info = real(*args, **kwargs)
            with torch.no_grad():
                model.qa_outputs.bias += 1e-3
            return model, info

        monkeypatch.setattr(transformers.BertForQuestionAnswering, "from_pretrained", perturbed)
    else:
        _perturbing_reload(monkeypatch, qa, interrupt=failure == "Ctrl-C")
    code = main(["convert", str(qa), str(out), *(["--force"] * earlier)])
    err = capsys.readouterr().err
    if failure == "Ctrl-C":
        assert code == 130 and "interrupted" in err and "Traceback" not in err
    else:
        line = _one_line(err)
        assert code == 2
        assert f"the directory written for {out} failed its check" in line
        assert f"{out} was not written (a model there stays as it was)" in line
        if failure == "transformers":
            assert re.search(r"bertjax's (start|end)_logits is 0\.001\d* away from transformers "
                             r"[\d.]+ BertForQuestionAnswering's (start|end)_logits, relative to "
                             r"the outputs' scale, against its float64 run", line), line
        else:
            assert "reloaded by bertjax, its " in line and "(tolerance 1e-06)" in line
    assert _snapshot(tmp_path) == before  # no OUT_DIR (or the earlier one intact), no temporary


def test_the_check_fails_without_the_reference_it_is_checked_against(qa, tmp_path, capsys,
                                                                    monkeypatch):
    """The break-it-once check of the tolerance itself: a 1e-7 change passes (rounding), the
    same change at a tolerance of 0 does not."""
    real = verify.load_model

    def reload(path, *args, **kwargs):  # the check's reload of the directory written aside
        model, report = real(path, *args, **kwargs)
        bias = model.qa_outputs.bias
        bias[...] = bias[...] + 1e-7
        return model, report

    monkeypatch.setattr(verify, "load_model", reload)
    assert main(["convert", str(qa), str(tmp_path / "a")]) == 0
    capsys.readouterr()
    monkeypatch.setattr(verify, "COPY_TOLERANCE", 0.0)
    assert main(["convert", str(qa), str(tmp_path / "b")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert re.search(r"its (start|end)_logits differs from the model's by 1\.\d+e-07 \(tolerance "
                     r"0\)", line), line
    assert not (tmp_path / "b").exists()


# --- without transformers, other compute settings, options --------------------------------------


def test_without_transformers_the_check_is_skipped_with_a_note(qa, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` fails
    assert main(["convert", str(qa), str(tmp_path / "out")]) == 0
    summary = _summary(capsys)
    assert "not checked with transformers: it is not installed" in summary
    assert "verified: bertjax reloads it with the same outputs" in summary


def test_a_bfloat16_model_is_compared_with_transformers_in_float32(qa, tokenizer, tmp_path):
    """A run that trained in bfloat16: the copy check computes as the model does, the
    transformers check compares float32 with float32 (bfloat16 itself is further off)."""
    model, _ = bertjax.from_pretrained(qa, dtype="bfloat16")
    written = save_pretrained(model, tmp_path / "w", tokenizer)
    batch = verify.probe_inputs(model.config, tokenizer, choices=False)
    ours, line = verify.check_copy(model, written, batch)
    assert "max |diff| 0 " in line
    assert "max |diff|" in verify.check_transformers(model, ours, written, batch)
    assert _transformers_worst(written, "BertForQuestionAnswering", model, batch,
                               {"start_logits": "start_logits"}) > verify.TRANSFORMERS_TOLERANCE


def test_probe_inputs_have_cls_sep_padding_and_both_token_types(tokenizer):
    config = BertConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size)
    for choices, shape in ((False, (3, 16)), (True, (3, 2, 16))):
        ids, types, mask = verify.probe_inputs(config, tokenizer, choices=choices)
        assert ids.shape == types.shape == mask.shape == shape
        assert (ids[..., 0] == tokenizer.special.cls).all()
        assert (ids[:2, ..., -1] == tokenizer.special.sep).all()
        assert (ids[-1, ..., 7] == tokenizer.special.sep).all() and mask[-1].sum() == 8 * (
            2 if choices else 1)
        assert (ids[-1, ..., 8:] == tokenizer.special.pad).all() and (mask[:2] == 1).all()
        assert set(np.unique(types[0])) == {0, 1}
        assert ((ids[..., 1:-1] >= 5) | (mask[..., 1:-1] == 0) | (ids[..., 1:-1] ==
                tokenizer.special.sep)).all()


def test_as_offers_every_class_and_refuses_others_in_one_line(qa, tmp_path, capsys):
    assert set(convert_command.CLASS_NAMES) == set(MODEL_CLASSES) == set(MODELS)
    with pytest.raises(SystemExit) as exited:  # argparse's error, as for every command
        main(["convert", str(qa), str(tmp_path / "out"), "--as", "BertForQA"])
    assert exited.value.code == 2
    line = _one_line(capsys.readouterr().err)
    assert "invalid choice: 'BertForQA'" in line and "'BertForQuestionAnswering'" in line
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit):
        main(["--help"])
    listing = capsys.readouterr().out
    assert "\n    convert " in listing and "\n    export " not in listing  # no old names


# --- a model with large outputs (issue 29) -------------------------------------------------------


@pytest.fixture(scope="module")
def large_outputs(tmp_path_factory, tokenizer) -> Path:
    """A random transformers BertForPreTraining with initializer_range 0.35, saved by
    transformers itself: its activations are so large that bertjax's and transformers' float32
    outputs are each about 2e-5 of the logits' scale from a float64 run, more than 1e-5."""
    config = transformers.BertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=256, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=512, max_position_embeddings=128,
        initializer_range=0.35, pad_token_id=tokenizer.special.pad)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("source") / "large"
    transformers.BertForPreTraining(config).save_pretrained(path)
    tokenizer.save(path)
    return path


def _probe_scale(path: Path, tokenizer) -> float:
    """max |prediction_logits| of transformers on the command's own probe inputs."""
    hf = transformers.BertForPreTraining.from_pretrained(path, attn_implementation="eager").eval()
    config = bertjax.from_pretrained(path)[0].config
    ids, types, mask = (torch.from_numpy(x).long()
                        for x in verify.probe_inputs(config, tokenizer, choices=False))
    with torch.no_grad():
        return float(hf(ids, token_type_ids=types, attention_mask=mask)
                     .prediction_logits.abs().max())


def test_a_model_with_large_outputs_converts_and_a_drift_is_still_refused(
        large_outputs, tokenizer, tmp_path, capsys, monkeypatch):
    command = "convert"
    scale = _probe_scale(large_outputs, tokenizer)
    assert scale > 10
    capsys.readouterr()  # transformers' own loading bar
    out = tmp_path / "out"
    assert main([command, str(large_outputs), str(out)]) == 0
    summary = _summary(capsys)
    assert "verified: transformers" in summary and "against its float64 run" in summary
    ours, _ = bertjax.from_pretrained(out)
    probe = verify.probe_inputs(ours.config, tokenizer, choices=False)
    worst = _transformers_worst(out, "BertForPreTraining", ours, probe,
                                MODELS["BertForPreTraining"].hf_outputs)
    assert worst / scale > verify.TRANSFORMERS_TOLERANCE  # float32 round-off alone is more

    real = transformers.BertForPreTraining.from_pretrained

    def drifted(*args, **kwargs):  # transformers' logits 1e-3 (of their scale) away
        model, info = real(*args, **kwargs)
        with torch.no_grad():
            model.cls.predictions.bias += 1e-3 * scale
        return model, info

    monkeypatch.setattr(transformers.BertForPreTraining, "from_pretrained", drifted)
    capsys.readouterr()
    assert main([command, str(large_outputs), str(tmp_path / "drifted")]) == 2
    err = capsys.readouterr().err
    line = _one_line(err, command)
    assert re.search(r"bertjax's mlm_logits is 0\.001\d* away from transformers [\d.]+ "
                     r"BertForPreTraining's prediction_logits", line), line
    assert not (tmp_path / "drifted").exists()
