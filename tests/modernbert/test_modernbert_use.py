"""A ModernBERT used and compared as a BERT is: fill-mask with transformers' pipeline's top
tokens (a byte-level BPE tokenizer with BERT's special tokens at the end of the vocabulary), the
same predictions from packed rows, `parity.compare` against the bert_torch mirror (outputs,
attention maps, hidden states, every gradient), and a new ModernBERT exported to a directory
transformers loads with the same logits (`verify_export`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import transformers
from flax import nnx
from modernbert_fixtures import config, directory

import bertjax
from bertjax.cli.main import main
from bertjax.io.verify import verify_export
from parity import compare


@pytest.mark.parametrize("fixture", ["a", "b"])
def test_fill_mask_tops_transformers_pipeline(fixture):
    model, tokenizer = bertjax.from_pretrained(directory(fixture, "BertForMaskedLM"))
    expected = json.loads((directory(fixture, "BertForMaskedLM") / "fill_mask.json").read_text())
    got = bertjax.fill_mask(model, tokenizer, expected["inputs"], top_k=5)
    for predictions, theirs in zip(got, expected["outputs"], strict=True):
        assert [p.id for p in predictions[0]] == [t["token"] for t in theirs]
        np.testing.assert_allclose([p.probability for p in predictions[0]],
                                   [t["score"] for t in theirs], rtol=1e-4)


def test_packed_rows_fill_the_same_masks():
    model, tokenizer = bertjax.from_pretrained(directory("b", "BertForMaskedLM"))
    texts = ["Then let us [MASK], my lord.", "[MASK]", "What light through yonder [MASK]?"] * 3
    alone = bertjax.fill_mask(model, tokenizer, texts, top_k=3)
    packed = bertjax.fill_mask(model, tokenizer, texts, top_k=3, max_tokens=64)
    for a, b in zip(alone, packed, strict=True):
        assert [p.id for p in a[0]] == [p.id for p in b[0]]
        np.testing.assert_allclose([p.probability for p in a[0]],
                                   [p.probability for p in b[0]], rtol=1e-4)


def test_fill_mask_command_fills_as_the_pipeline(capsys):
    """`bertjax fill-mask`: the pipeline's best token first, the text filled as its `sequence`
    (byte-level pieces decoded as the pipeline decodes them)."""
    expected = json.loads((directory("b", "BertForMaskedLM") / "fill_mask.json").read_text())
    assert main(["fill-mask", str(directory("b", "BertForMaskedLM")), expected["inputs"][1]]) == 0
    lines = capsys.readouterr().out.splitlines()
    best = expected["outputs"][1][0]
    assert lines[1] == f"  -> {best['sequence']}"
    assert lines[2].split()[2] == best["token_str"].strip()  # "  [MASK] 1: TOKEN P, ..."


@pytest.mark.slow
@pytest.mark.parametrize(("name", "overrides"), [
    ("BertForMaskedLM", {}),
    ("BertForMultipleChoice", dict(norm_bias=True, attention_bias=True, mlp_bias=True,
                                   classifier_bias=True, classifier_pooling="mean",
                                   layer_types=("sliding_attention", "full_attention") * 2)),
])
def test_parity_passes_every_tensor_gradients_included(name, overrides):
    """The mirror of a ModernBERT of a test shape (4 layers of 30, a window of 6 on 16-token
    rows), as `bertjax parity` compares it: every output, attention map, hidden state and
    gradient within the parity rule, and no first divergent layer."""
    model = getattr(bertjax, name)(config(**overrides), rngs=nnx.Rngs(0))
    report = compare(model)
    assert report.passed, report.format()
    assert report.first_divergence is None
    names = {r.name for r in report.rows}
    assert {"attentions.3", "hidden_states.4", "grad.bert.layers.3.attn.wqkv.weight"} <= names


@pytest.mark.parametrize("name", ["BertForMaskedLM", "BertForSequenceClassification"])
def test_a_new_modernbert_saves_to_what_transformers_loads(name, tmp_path):
    """A model built from a BertConfig, not loaded: reloaded by bertjax and by transformers 5
    with the same outputs (the export check `bertjax convert` runs)."""
    _, tokenizer = bertjax.from_pretrained(directory("a", "BertForMaskedLM"))
    c = config(vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.special.pad,
               classifier_pooling="mean")
    model = getattr(bertjax, name)(c, rngs=nnx.Rngs(0))
    bertjax.save_pretrained(model, tmp_path / "out", tokenizer)
    lines = verify_export(model, tokenizer, tmp_path / "out")
    assert lines[1].startswith(f"verified: transformers {transformers.__version__} loads it as "
                               f"ModernBert{name.removeprefix('Bert')}")


def test_convert_writes_what_transformers_loads(tmp_path, capsys):
    """`bertjax convert` of a ModernBERT checkpoint: written, reloaded by bertjax and checked
    against transformers (`verify_export`) before it is put in place."""
    out = tmp_path / "out"
    assert main(["convert", str(directory("b", "BertForTokenClassification")), str(out)]) == 0
    printed = capsys.readouterr().out
    assert "loads it as ModernBertForTokenClassification" in printed
    _, info = transformers.ModernBertForTokenClassification.from_pretrained(
        out, output_loading_info=True)
    assert {k: v for k, v in info.items() if v} == {}
