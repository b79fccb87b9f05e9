"""Attention pictures (`bertjax.use.attention`, `bertjax attention`): the maps are the model's own
numbers, the PNGs have the promised size and real content, the HTML page is self-contained and
carries the exact weights, and the command reports bad input with exit status 2.

The tiny random checkpoint attends almost uniformly (weights ~1/S), which would let a wrong
token order or a mixed-up head pass unnoticed; the `peaky` model multiplies its query kernels
by 40 so that rows are far from uniform.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from matplotlib import colormaps
from matplotlib.image import imread
from use_helpers import tiny_checkpoint

from bertjax.cli.main import main
from bertjax.model import BertModel
from bertjax.pretrained import from_pretrained
from bertjax.use.attention import AttentionMaps, attention_maps
from bertjax.use.encode import TruncationWarning, encode
from bertjax.viz.attention import (
    BOUNDARY_COLOR,
    CMAP,
    MAX_FIGURE_INCHES,
    grid_layout,
    plot_all,
    plot_layer,
    write_html,
)

A = "The king is dead, long live the king."
B = "Wherefore art thou Romeo?"


@pytest.fixture(scope="module")
def loaded():
    return from_pretrained(tiny_checkpoint(), model_cls=BertModel)


@pytest.fixture(scope="module")
def peaky():
    model, tokenizer = from_pretrained(tiny_checkpoint(), model_cls=BertModel)
    for layer in model.layers:
        kernel = layer.attention.query.kernel
        kernel[...] = kernel[...] * 40.0
    return model, tokenizer


@pytest.fixture(scope="module")
def pair_maps(peaky):
    return attention_maps(*peaky, A, B)


def data_of(page: str) -> dict:
    found = re.findall(r'<script type="application/json" id="attention-data">(.*?)</script>', page, re.S)
    assert len(found) == 1
    return json.loads(found[0])


# --- the numbers ----------------------------------------------------------------------------------


def test_maps_are_the_models_own_attentions(peaky, pair_maps):
    model, tokenizer = peaky
    batch = encode(tokenizer, [A], [B], max_length=128)
    n = int(batch.attention_mask.sum())
    assert pair_maps.tokens == batch.tokens[0] and len(pair_maps.tokens) == n
    assert "[PAD]" not in pair_maps.tokens
    # eager, unpadded forward: no jit, no padding, the same numbers
    out = model(jnp.asarray(batch.input_ids[:, :n]), jnp.asarray(batch.token_type_ids[:, :n]),
                jnp.asarray(batch.attention_mask[:, :n]), output_attentions=True)
    expected = np.stack([np.asarray(a[0]) for a in out.attentions])  # (L, A, S, S)
    assert pair_maps.attentions.dtype == np.float32
    assert pair_maps.attentions.shape == (2, 2, n, n) == expected.shape
    np.testing.assert_allclose(pair_maps.attentions, expected, rtol=0, atol=1e-6)
    np.testing.assert_allclose(pair_maps.attentions.sum(-1), 1.0, rtol=0, atol=1e-6)
    # far from uniform, so the comparison above can tell tokens and heads apart
    assert pair_maps.attentions.max(-1).mean() > 5.0 / n
    assert (pair_maps.num_layers, pair_maps.num_heads, pair_maps.num_tokens) == (2, 2, n)


def test_boundary_is_the_first_token_of_sentence_b(peaky, pair_maps):
    _, tokenizer = peaky
    n_a = len(tokenizer.encode_batch([A])[0])
    n_b = len(tokenizer.encode_batch([B])[0])
    assert pair_maps.boundary == n_a + 2
    assert pair_maps.num_tokens == n_a + n_b + 3
    t = pair_maps.tokens
    assert (t[0], t[pair_maps.boundary - 1], t[-1]) == ("[CLS]", "[SEP]", "[SEP]")
    assert t.count("[SEP]") == 2 and t[pair_maps.boundary] == tokenizer.id_to_token(
        tokenizer.encode_batch([B])[0][0])
    single = attention_maps(*peaky, A)
    assert single.boundary is None and single.tokens == t[:pair_maps.boundary]


def test_a_roberta_pair_starts_sentence_b_after_its_two_separators():
    """RoBERTa's pairs are <s> A </s></s> B </s>, every token of type 0: sentence B starts after
    the separators, as transformers' tokenizer pairs them (the fixture transformers 5 wrote)."""
    import transformers

    path = Path(__file__).resolve().parents[1] / "fixtures" / "families" / "roberta" / "RobertaModel"
    maps = attention_maps(*from_pretrained(path, model_cls=BertModel), "To be or not", "that is")
    hf = transformers.AutoTokenizer.from_pretrained(path)
    pair, b = hf("To be or not", "that is"), hf("that is", add_special_tokens=False)
    assert maps.boundary == len(pair["input_ids"]) - len(b["input_ids"]) - 1  # B, then </s>
    assert maps.tokens[maps.boundary - 2:maps.boundary] == ["</s>", "</s>"]


def test_long_text_is_cut_with_a_warning_naming_it(peaky):
    with pytest.warns(TruncationWarning, match=r"sentence A has \d+ more tokens than the 16 allowed: "
                      r"cut to fit; raise max_length \(the model takes up to 128\) or shorten it"):
        maps = attention_maps(*peaky, "the king " * 30, max_length=16)
    assert maps.num_tokens == 16 and maps.tokens[-1] == "[SEP]"
    np.testing.assert_allclose(maps.attentions.sum(-1), 1.0, rtol=0, atol=1e-6)


@pytest.mark.parametrize(("a", "b", "message"), [
    ("  ", None, "sentence A is empty"),
    (A, "", "sentence B is empty"),
    ("\u200b", None, "sentence A has no tokens in this vocabulary: '\\u200b'"),
])
def test_empty_sentences_are_refused(loaded, a, b, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        attention_maps(*loaded, a, b)


# --- PNG grids ------------------------------------------------------------------------------------


def rgb(hex_color: str) -> np.ndarray:
    return np.array([int(hex_color[i:i + 2], 16) for i in (1, 3, 5)]) / 255


def near(image: np.ndarray, color: np.ndarray, tol: float = 0.02) -> int:
    """How many pixels of `image` (H, W, 4) have `color` (RGB in [0, 1])."""
    return int((np.abs(image[..., :3] - color).max(-1) < tol).sum())


@pytest.mark.slow
def test_png_has_the_figure_size_and_real_content(pair_maps, tmp_path):
    path = plot_layer(pair_maps, 2, tmp_path / "l2.png")
    image = imread(path)  # (H, W, 4) floats in [0, 1]
    labels = max(len(t) for t in pair_maps.tokens)
    assert image.shape == (*grid_layout(pair_maps.num_tokens, 2, labels).pixels, 4)
    colours = np.unique((image[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 200 and image[..., :3].std() > 0.1
    # the layer's largest weight is drawn in the colour map's darkest colour; the boundary in red
    assert near(image, np.array(colormaps[CMAP](1.0)[:3])) > 20
    assert near(image, rgb(BOUNDARY_COLOR)) > 100
    assert sorted(os.listdir(tmp_path)) == ["l2.png"]  # no temporary file left behind


@pytest.mark.slow
def test_png_of_one_sentence_has_no_boundary_and_layers_differ(peaky, tmp_path):
    maps = attention_maps(*peaky, A)
    paths = plot_all(maps, tmp_path / "out")
    assert [p.name for p in paths] == ["layer_01.png", "layer_02.png"]
    first, second = (imread(p) for p in paths)
    assert first.shape == second.shape
    assert near(first, rgb(BOUNDARY_COLOR)) == 0
    assert np.abs(first - second).max() > 0.5  # the heat maps are the layers' own
    assert [p.name for p in plot_all(maps, tmp_path / "two", [2])] == ["layer_02.png"]
    with pytest.raises(ValueError, match="no layer 3: the model has layers 1 to 2"):
        plot_all(maps, tmp_path / "bad", [1, 3])


def test_figure_size_scales_with_tokens_within_limits():
    short, medium, long = (grid_layout(n, 12, 8) for n in (6, 20, 512))
    assert short.width_in < medium.width_in and short.height_in < medium.height_in
    assert long.width_in <= MAX_FIGURE_INCHES and long.height_in <= MAX_FIGURE_INCHES
    assert (short.stride, medium.stride) == (1, 1) and long.stride > 4  # labels thinned, legible
    assert (short.rows, short.cols) == (3, 4) and (grid_layout(8, 2).rows, grid_layout(8, 2).cols) == (1, 2)


# --- HTML page ------------------------------------------------------------------------------------


def test_html_is_one_self_contained_file_with_the_exact_weights(pair_maps, tmp_path):
    write_html(pair_maps, tmp_path / "attention.html")
    assert os.listdir(tmp_path) == ["attention.html"]
    page = (tmp_path / "attention.html").read_text(encoding="utf-8")
    assert "http://" not in page and "https://" not in page
    links = re.findall(r"""(?:src|href)\s*=\s*["']?([^"'\s>]*)""", page, re.I)
    assert not [link for link in links if "//" in link], links
    assert "<link" not in page and "<img" not in page and "@import" not in page
    data = data_of(page)
    got = np.array(data["attentions"], np.float32)  # [layer][head][query][key]
    np.testing.assert_array_equal(got, pair_maps.attentions)  # exact: float32 round trip
    assert data["tokens"] == pair_maps.tokens and data["boundary"] == pair_maps.boundary
    assert (data["num_layers"], data["num_heads"]) == (2, 2) and len(set(data["colors"])) == 2
    for token in pair_maps.tokens:
        assert token in page
    for control in ('id="layer"', 'id="head"', "all heads (overlaid)", "all heads (average)",
                    'value="heat"'):
        assert control in page


def test_html_survives_tokens_that_look_like_markup(tmp_path):
    tokens = ["[CLS]", "</script>", "<!--", "&amp;", "[SEP]"]
    att = np.full((1, 1, 5, 5), 0.2, np.float32)  # (L, A, S, S)
    write_html(AttentionMaps(tokens, None, att, model="<b>m</b>"), tmp_path / "x.html")
    page = (tmp_path / "x.html").read_text(encoding="utf-8")
    assert page.count("</script>") == 2 and "<b>m</b>" not in page
    assert data_of(page)["tokens"] == tokens and data_of(page)["model"] == "<b>m</b>"


# --- the command ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_command_writes_what_it_prints(loaded, tmp_path, capsys):
    out = tmp_path / "pictures"
    assert main(["attention", str(tiny_checkpoint()), A, B, "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    expected = [out / "layer_01.png", out / "layer_02.png", out / "attention.html"]
    assert printed[-3:] == [str(p) for p in expected]
    assert sorted(os.listdir(out)) == ["attention.html", "layer_01.png", "layer_02.png"]
    maps = attention_maps(*loaded, A, B)
    assert printed[0] == f"{maps.num_tokens} tokens: {' '.join(maps.tokens)}"
    data = data_of((out / "attention.html").read_text(encoding="utf-8"))
    np.testing.assert_allclose(np.array(data["attentions"], np.float32), maps.attentions, rtol=0,
                               atol=1e-6)
    assert imread(out / "layer_02.png").shape[:2] == grid_layout(
        maps.num_tokens, 2, max(len(t) for t in maps.tokens)).pixels


@pytest.mark.slow
def test_command_layers_and_truncation_warning(tmp_path, capsys):
    out = tmp_path / "one"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the command reports the cut itself, as a message
        assert main(["attention", str(tiny_checkpoint()), "the king " * 100, "--out", str(out),
                     "--layers", "2"]) == 0
    captured = capsys.readouterr()
    assert re.search(r"^bertjax attention: warning: sentence A has \d+ more tokens than the "
                     r"model's 128 positions allow: cut to fit; shorten it to keep all of it$",
                     captured.err, re.M), captured.err
    assert sorted(os.listdir(out)) == ["attention.html", "layer_02.png"]
    assert captured.out.startswith("128 tokens: [CLS] the king")
    assert len(data_of((out / "attention.html").read_text(encoding="utf-8"))["attentions"]) == 2


@pytest.mark.parametrize(("args", "message"), [
    (["{ckpt}", "   "], "bertjax attention: error: sentence A is empty"),
    (["{ckpt}", A, ""], "bertjax attention: error: sentence B is empty"),
    (["{tmp}/nowhere", A], "bertjax attention: error: model {tmp}/nowhere does not exist"),
    (["{plain}", A], "bertjax attention: error: {plain} holds neither config.json"),
    (["{ckpt}", A, "--layers", "1,3"], "bertjax attention: error: --layers 3: {ckpt} has layers 1 to 2"),
    (["{ckpt}", A, "--step", "5"], "bertjax attention: error: {ckpt} is not a `bertjax pretrain` run"),
])
def test_command_bad_input_exits_2_with_a_message(args, message, tmp_path, capsys):
    (tmp_path / "plain").mkdir()  # a directory of other files, not the one --out goes into
    (tmp_path / "plain" / "notes.txt").write_text("mine\n")
    fill = {"ckpt": str(tiny_checkpoint()), "tmp": str(tmp_path), "plain": str(tmp_path / "plain")}
    argv = ["attention", *(a.format(**fill) for a in args), "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message.format(**fill)), err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_command_rejects_malformed_layers(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["attention", str(tiny_checkpoint()), A, "--layers", "one"])
    assert exit_info.value.code == 2
    assert "'one' is not a comma-separated list of layer numbers" in capsys.readouterr().err
