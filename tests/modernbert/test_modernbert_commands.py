"""A ModernBERT used by every command a BERT is: `embed` (mean and [CLS] pooling), `similarity`,
`classify`, `tag`, `answer`, `choose` and `attention` give transformers 5's outputs on the
fixtures of the matching class (use.json, written by scripts/dev/modernbert_use_outputs.py with
the fixtures), `answer` transformers 4.57's question-answering pipeline's answers
(tests/fixtures/modernbert_qa_pipeline, from a side environment: 5 has no such pipeline);
`nsp` refuses in one line; `--max-length` past the checkpoint's positions is one
line.

Tolerance: 1e-5 absolute on vectors, logits, probabilities and attention weights (transformers'
own float32-vs-float64 distance on these fixtures is under 1e-6: the fixture script prints it);
printed numbers within their last printed digit. Config a has [CLS] pooling, a window of 8 (4
tokens each side) and 64 positions; config b mean pooling and a window of 5 (2 each side).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import transformers
from modernbert_fixtures import FIXTURES, TOL, directory

import bertjax
from bertjax.cli.main import main
from bertjax.data.choices import ChoiceExample
from bertjax.data.labelled import Example
from bertjax.data.squad import QAExample, encode_squad
from bertjax.tasks.classification import predict
from bertjax.tasks.multiple_choice import predict_choices
from bertjax.use.encode import jitted_forward

CONFIGS = ("a", "b")


def _use(config: str, name: str) -> dict:
    return json.loads((directory(config, name) / "use.json").read_text(encoding="utf-8"))


def _softmax(logits) -> np.ndarray:
    z = np.asarray(logits, np.float64)
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.fixture(scope="module")
def loaded():
    """(model, tokenizer) of each fixture a test asks for, loaded once."""
    cache: dict = {}

    def load(config: str, name: str):
        if (config, name) not in cache:
            cache[config, name] = bertjax.from_pretrained(directory(config, name))
        return cache[config, name]

    return load


# --- embed and similarity ---------------------------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS)
def test_embed_gives_transformers_pooled_last_hidden_state(loaded, config):
    """Mean over the attention mask (what ModernBERT embedding models use) and [CLS], padded
    and packed: transformers' ModernBertModel's last hidden state pooled alike."""
    model, tokenizer = loaded(config, "BertModel")
    ref = _use(config, "BertModel")["embed"]
    for pooling in ("mean", "cls"):
        for max_tokens in (None, 64):
            ours = bertjax.embed(model, tokenizer, ref["lines"], pooling=pooling,
                                 max_tokens=max_tokens)
            np.testing.assert_allclose(ours, ref[pooling], rtol=0, atol=TOL)


def test_embed_and_similarity_commands(tmp_path, capsys):
    """`bertjax embed --pooling mean` writes transformers' mean-pooled vectors; `similarity`
    ranks the lines by their cosine to the query's vector (transformers' vectors' cosines)."""
    ref = _use("b", "BertModel")["embed"]
    lines = tmp_path / "lines.txt"
    lines.write_text("\n".join(ref["lines"]) + "\n", encoding="utf-8")
    path = str(directory("b", "BertModel"))
    assert main(["embed", path, "--file", str(lines), "--out", str(tmp_path / "v.npy"),
                 "--pooling", "mean", "--no-progress"]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), ref["mean"], rtol=0, atol=TOL)
    capsys.readouterr()
    assert main(["similarity", path, "--file", str(lines), "--query", ref["lines"][2],
                 "--pooling", "mean", "--top-k", "4", "--no-progress"]) == 0
    vectors = np.asarray(ref["mean"])
    cosines = vectors @ vectors[2] / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(vectors[2]))
    printed = [line.split() for line in capsys.readouterr().out.splitlines() if ". " in line
               and "line" in line]  # "   1. +1.0000  line 3: ..."
    assert [int(row[3].rstrip(":")) - 1 for row in printed] == list(np.argsort(-cosines))
    np.testing.assert_allclose([float(row[1]) for row in printed], np.sort(cosines)[::-1],
                               atol=5e-5 + TOL)


# --- classify, tag, answer, choose ------------------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS)
def test_classify_gives_transformers_probabilities(loaded, config, tmp_path, capsys):
    """Texts and a pair (no token types: [CLS] A [SEP] B [SEP]), [CLS] or mean pooling through
    ModernBERT's head: softmax of transformers' logits, and its pipeline's label first."""
    model, tokenizer = loaded(config, "BertForSequenceClassification")
    ref = _use(config, "BertForSequenceClassification")["examples"]
    examples = [Example(e["text"], e["text_pair"], None, f"example {i}")
                for i, e in enumerate(ref)]
    for max_tokens in (None, 64):
        probs = predict(model, tokenizer, examples, max_length=64, max_tokens=max_tokens)
        np.testing.assert_allclose(probs, _softmax([e["logits"] for e in ref]), rtol=0, atol=TOL)
    file = tmp_path / "examples.jsonl"
    file.write_text("".join(json.dumps({"text": e["text"], "text_pair": e["text_pair"]}) + "\n"
                            for e in ref), encoding="utf-8")
    assert main(["classify", str(directory(config, "BertForSequenceClassification")), "--file",
                 str(file)]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [r[0] for r in rows] == [e["label"] for e in ref]
    np.testing.assert_allclose([float(r[1]) for r in rows], [e["score"] for e in ref],
                               atol=5e-5 + TOL)


@pytest.mark.parametrize("config", CONFIGS)
def test_tag_finds_what_transformers_pipeline_finds(loaded, config):
    """Byte-level pieces grouped into words and character offsets as the token-classification
    pipeline groups them, for each aggregation; scores within 1e-5."""
    model, tokenizer = loaded(config, "BertForTokenClassification")
    ref = _use(config, "BertForTokenClassification")
    for aggregation, theirs in ref["pipeline"].items():
        key = "entity" if aggregation == "none" else "entity_group"
        ours = bertjax.tag(model, tokenizer, ref["texts"], aggregation=aggregation)
        assert [[(e[key], e["start"], e["end"], e["word"]) for e in row] for row in ours] == \
            [[(e[key], e["start"], e["end"], e["word"]) for e in row] for row in theirs]
        np.testing.assert_allclose([e["score"] for row in ours for e in row],
                                   [e["score"] for row in theirs for e in row], atol=TOL)


def test_tag_command_prints_the_pipelines_objects(capsys):
    ref = _use("b", "BertForTokenClassification")
    assert main(["tag", str(directory("b", "BertForTokenClassification")), *ref["texts"],
                 "--aggregation", "first", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [[e["word"] for e in row] for row in printed] == \
        [[e["word"] for e in row] for row in ref["pipeline"]["first"]]


def _best_span_score(start, end, ids, sep: int, max_len: int = 15) -> float:
    """The pipeline's best span score from transformers' logits: softmax over the context's
    pieces and [CLS], [CLS] then left out, the best P(start) * P(end) of a span of at most
    `max_len` pieces."""
    ids = np.asarray(ids)
    seps = np.flatnonzero(ids == sep)
    allowed = np.zeros(len(ids), bool)
    allowed[seps[0] + 1:seps[-1]] = True  # [CLS] q [SEP] context [SEP]
    allowed[0] = True
    p_start, p_end = (_softmax(np.where(allowed, x, -10000.0)) for x in (start, end))
    p_start[0] = p_end[0] = 0.0
    pairs = np.triu(np.tril(np.outer(p_start, p_end), max_len - 1))
    return float(pairs.max())


@pytest.mark.parametrize("config", CONFIGS)
def test_answer_reads_transformers_logits(loaded, config):
    """The question and context as transformers' tokenizer pairs them, the start and end logits
    transformers gives there (1e-5), and the best answer scored from them."""
    model, tokenizer = loaded(config, "BertForQuestionAnswering")
    ref = _use(config, "BertForQuestionAnswering")
    windows = encode_squad(tokenizer, [QAExample("q", ref["question"], ref["context"], (), "q")],
                           64, 8, max_query_length=16)
    n = len(ref["input_ids"])
    assert windows.input_ids.shape[0] == 1
    assert windows.input_ids[0, :n].tolist() == ref["input_ids"]
    out = jitted_forward(model)({k: getattr(windows, k) for k in
                                 ("input_ids", "token_type_ids", "attention_mask")})
    np.testing.assert_allclose(np.asarray(out.start_logits)[0, :n], ref["start_logits"], atol=TOL)
    np.testing.assert_allclose(np.asarray(out.end_logits)[0, :n], ref["end_logits"], atol=TOL)
    best = bertjax.answer(model, tokenizer, ref["question"], ref["context"], align_to_words=False)
    expected = _best_span_score(ref["start_logits"], ref["end_logits"], ref["input_ids"],
                                tokenizer.special.sep)
    assert abs(best[0]["score"] - expected) <= TOL
    assert best[0]["answer"] == ref["context"][best[0]["start"]:best[0]["end"]]


QA_CASES = json.loads((FIXTURES.parent / "modernbert_qa_pipeline" / "answers.json").read_text(
    encoding="utf-8"))["cases"]


@pytest.mark.parametrize("max_tokens", [None, 128])
@pytest.mark.parametrize("case", QA_CASES, ids=[f"{c['question']} {c['kwargs']}" for c in QA_CASES])
def test_answers_equal_transformers_pipeline(loaded, case, max_tokens):
    """transformers 4.57's question-answering pipeline (its last release) on config a: the same
    answers, character offsets (byte-level pieces' leading spaces included) and order, scores
    within 1e-5; windows of a long context, word alignment off and the empty answer included."""
    model, tokenizer = loaded("a", "BertForQuestionAnswering")
    ours = bertjax.answer(model, tokenizer, case["question"], case["context"], **case["kwargs"],
                          max_tokens=max_tokens)
    assert [(a["answer"], a["start"], a["end"]) for a in ours] == \
        [(a["answer"], a["start"], a["end"]) for a in case["result"]]
    np.testing.assert_allclose([a["score"] for a in ours], [a["score"] for a in case["result"]],
                               rtol=0, atol=TOL)


@pytest.mark.parametrize("config", CONFIGS)
def test_choose_gives_transformers_probabilities(loaded, config, capsys):
    """Each (context, choice) pair as transformers' tokenizer pairs them: softmax of its logits,
    through the API and `bertjax choose` (whose default --max-length fits a model of 64
    positions)."""
    model, tokenizer = loaded(config, "BertForMultipleChoice")
    ref = _use(config, "BertForMultipleChoice")
    expected = _softmax(ref["logits"])
    example = ChoiceExample(ref["context"], tuple(ref["choices"]), 0, "example")
    for max_tokens in (None, 128):  # packed: an example's choices share a row
        probs = predict_choices(model, tokenizer, [example], max_length=64, max_tokens=max_tokens)
        np.testing.assert_allclose(probs[0], expected, rtol=0, atol=TOL)
    argv = ["choose", str(directory(config, "BertForMultipleChoice")), "--context", ref["context"],
            "--json"]
    for choice in ref["choices"]:
        argv += ["--choice", choice]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["index"] for r in rows] == list(np.argsort(-expected))
    np.testing.assert_allclose([r["probability"] for r in rows], np.sort(expected)[::-1], atol=TOL)


# --- attention --------------------------------------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS)
def test_attention_maps_are_transformers_with_local_windows(loaded, config):
    """Every layer's and head's probabilities on a pair as transformers' eager attention gives
    them (1e-5): a local layer's keys past the window weigh exactly 0, and the maps say which
    layers are windowed and how far (`windows`); sentence B starts after the first [SEP] (a
    pair's tokens are all of type 0)."""
    model, tokenizer = loaded(config, "BertModel")
    ref = _use(config, "BertModel")["attention"]
    maps = bertjax.attention_maps(model, tokenizer, ref["text"], ref["text_pair"])
    assert [tokenizer.token_to_id(t) for t in maps.tokens] == ref["input_ids"]
    np.testing.assert_allclose(maps.attentions, ref["attentions"], rtol=0, atol=TOL)
    theirs = transformers.AutoConfig.from_pretrained(directory(config, "BertModel"))
    window, types = theirs.sliding_window, theirs.layer_types
    assert maps.windows == tuple(window if t == "sliding_attention" else None for t in types)
    assert maps.windowed
    S = maps.num_tokens
    outside = np.abs(np.arange(S)[:, None] - np.arange(S)[None, :]) > window  # (S, S)
    for layer, w in enumerate(maps.windows):
        if w is not None:
            assert (maps.attentions[layer][:, outside] == 0).all()
        else:
            assert (maps.attentions[layer][:, outside] > 0).all()
    assert maps.boundary == ref["input_ids"].index(tokenizer.special.sep) + 1


def test_attention_pictures_name_and_draw_the_windows(loaded, tmp_path):
    """The PNG titles say each layer's window (a BERT's say nothing new), the gray edges run
    along the window's cells, and the page's layer menu names the windows."""
    from bertjax.viz.attention import layer_kind, page_data, window_edges, write_html

    model, tokenizer = loaded("a", "BertModel")
    maps = bertjax.attention_maps(model, tokenizer, "To be, or not to be:")
    assert maps.windows == (None, 4, 4, None)  # layer_types full, sliding, sliding, full
    assert layer_kind(maps, 1) == " (global)"
    assert layer_kind(maps, 2) == " (sliding window: 4 tokens either side, gray dots)"
    left, right = window_edges(5, 1)
    assert left == ([-0.5, -0.5, -0.5, -0.5, 0.5, 0.5, 1.5, 1.5, 2.5, 2.5],
                    [-0.5, 0.5, 0.5, 1.5, 1.5, 2.5, 2.5, 3.5, 3.5, 4.5])
    assert right[0][:4] == [1.5, 1.5, 2.5, 2.5] and right[0][-2:] == [4.5, 4.5]
    assert json.loads(page_data(maps))["windows"] == [None, 4, 4, None]
    page = write_html(maps, tmp_path / "attention.html").read_text(encoding="utf-8")
    assert "(window: \" + w + \" tokens either side)" in page
    bert = type(maps)(maps.tokens, None, maps.attentions, windows=(None,) * 4)
    assert layer_kind(bert, 2) == "" and json.loads(page_data(bert))["windows"] is None


# --- what a ModernBERT refuses ----------------------------------------------------------------


def test_nsp_is_refused_in_one_line_naming_what_to_use(capsys):
    assert main(["nsp", str(directory("a", "BertForMaskedLM")), "To be.", "Or not."]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "modernbert has no next-sentence head" in err
    assert "use BertForMaskedLM, or the fill-mask, embed and finetune commands" in err


@pytest.mark.parametrize("argv", [
    ["embed", "{Model}", "--file", "{lines}", "--out", "{out}", "--max-length", "65"],
    ["classify", "{ForSequenceClassification}", "--file", "{lines}", "--max-length", "65"],
    ["choose", "{ForMultipleChoice}", "--context", "a", "--choice", "b", "--choice", "c",
     "--max-length", "65"],
])
def test_max_length_past_the_checkpoints_positions_is_one_line(argv, tmp_path, capsys):
    """Fixture a's config.json says max_position_embeddings 64: a longer --max-length is one
    line naming the limit and the fix."""
    (tmp_path / "lines.txt").write_text("To be.\n", encoding="utf-8")
    places = {"lines": tmp_path / "lines.txt", "out": tmp_path / "v.npy",
              **{name: directory("a", "Bert" + name)
                 for name in ("Model", "ForSequenceClassification", "ForMultipleChoice")}}
    assert main([a.format(**places) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "--max-length 65 is longer than the model's 64 positions; pass --max-length 64 or " \
           "less" in err


def test_answer_windows_past_the_checkpoints_positions_are_one_line(capsys):
    assert main(["answer", str(directory("a", "BertForQuestionAnswering")), "--question", "Who?",
                 "--context", "Hamlet.", "--max-seq-len", "65"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "max_seq_len 65 is longer than the model's 64 positions; pass 64 or less" in err


def test_released_checkpoints_limit_is_transformers_8192_positions():
    """A config.json without max_position_embeddings (the released ones write 8192) has
    transformers' default: the limit every --max-length is checked against."""
    config = bertjax.BertConfig.from_hf_dict({"model_type": "modernbert"})
    assert config.max_sequence_length == transformers.ModernBertConfig().max_position_embeddings
    assert config.max_sequence_length == 8192
