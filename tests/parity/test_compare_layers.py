"""bertjax's own `parity.compare` (issue 60): its per-layer rows (hidden_states.*, attentions.*)
come from the capture `parity.compare_modules` uses, each with whether the inputs its layer was
fed passed, so a report (and `bertjax parity`) names the first layer that diverged. The numbers
are the same as the model's own outputs give: the capture reads values the jitted program
returns anyway.
"""

from __future__ import annotations

import torch
from flax import nnx
from ports import move_weight

import bert_torch
import parity
import parity.tensors
from bertjax import BertConfig, BertForPreTraining
from bertjax.cli.main import main
from parity.module_report import ModuleRow
from parity.tensors import compare, random_batch

TINY = BertConfig.from_preset("tiny")


def _model(config: BertConfig) -> BertForPreTraining:
    """A random BertForPreTraining made by its PyTorch mirror and converted: no random numbers
    drawn in JAX, whose initialisers compile op by op (seconds)."""
    torch.manual_seed(0)
    return parity.torch_to_flax(bert_torch.BertForPreTraining(config).state_dict(), config)


def _moved(model: BertForPreTraining, path: str, by: float) -> BertForPreTraining:
    """A copy of `model` with the first entry of the weight at dotted `path` moved by `by`."""
    wrong = nnx.clone(model)
    move_weight(wrong, path, by)
    return wrong


def test_the_per_layer_rows_are_captured_and_name_the_first_layer_to_diverge(monkeypatch):
    right = _model(TINY)
    wrong = _moved(right, "bert.embeddings.layer_norm.scale", 1e-3)
    batch = random_batch(TINY, batch_size=2, seq_len=12, num_predictions=3, seed=0)
    report = compare(wrong, batch, masked=False, reference=right)  # the forward: no gradients
    layers = [r for r in report.rows if isinstance(r, ModuleRow)]
    assert [r.name for r in layers] == [
        "attentions.0", "attentions.1", "hidden_states.0", "hidden_states.1", "hidden_states.2"]
    assert {r.module for r in layers} == {"bert.embeddings", "bert.layers.0", "bert.layers.1"}
    assert report.layers == ("bert.embeddings", "bert.layers.0", "bert.layers.1")
    assert report.first_divergence == "bert.embeddings", report.format()
    assert not report.row("hidden_states.1").inputs_passed
    # without the capture: the model's own hidden states and attentions, the same numbers
    monkeypatch.setattr(parity.tensors, "_per_layer", lambda *_: None)
    uncaptured = compare(wrong, batch, masked=False, reference=right)
    assert uncaptured.format() == report.format() and uncaptured.first_divergence is None
    assert [(r.name, r.max_abs, r.noise_abs) for r in uncaptured.rows] == [
        (r.name, r.max_abs, r.noise_abs) for r in report.rows]


def test_the_command_names_the_first_layer_to_diverge(monkeypatch, capsys):
    real = parity.tensors.compare

    def with_one_wrong_weight(model, batch, **options):  # layer 1's output dense, moved by 1e-3
        return real(_moved(model, "bert.layers.1.output.kernel", 1e-3), batch, reference=model,
                    **options)

    monkeypatch.setattr(parity.tensors, "compare", with_one_wrong_weight)
    assert main(["parity", "--preset", "tiny", "--seq-len", "12", "--no-masked-positions"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == ("first divergence: bert.layers.1, the first layer whose output is outside "
                       "its bar while its input was inside")
    assert next(line for line in out if line.startswith("hidden_states.1 ")).endswith(" ok")
    assert next(line for line in out if line.startswith("hidden_states.2 ")).endswith(" FAIL")


def test_layers_run_inside_a_transform_keep_the_model_s_own_rows():
    """`scan_layers` (as `remat`'s jax.checkpoint) runs the layers in a trace of their own: not
    captured, the rows are the model's own hidden states, as before."""
    model = _model(TINY.replace(scan_layers=True))
    batch = random_batch(TINY, batch_size=2, seq_len=12, num_predictions=3, seed=0)
    report = compare(model, batch, masked=False)  # no gradients: the forward alone
    assert report.passed and report.layers == () and report.first_divergence is None
    assert not any(isinstance(r, ModuleRow) for r in report.rows)
    assert report.row("hidden_states.2").max_abs <= 1e-5
