"""`bertjax.use.tag` and `bertjax tag` against transformers' token-classification pipeline.

The model is a tiny random `BertForTokenClassification` whose classifier is fitted (ridge
regression on its own hidden states) so that the tokens of the first texts get the labels written
below: several-piece names, adjacent entities of both types, a B- after a B-, an I- with no B-,
words whose pieces disagree (where "first", "average" and "max" differ) and an [UNK] word. Every
strategy must give the pipeline's entities: the same labels, words, offsets and token indices
exactly, scores within 1e-5 (float32 softmax of logits from JAX against PyTorch).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from use_helpers import count_row_sharing, sentences, tiny_checkpoint

from bertjax import BertConfig
from bertjax.cli.main import main
from bertjax.data import Tokenizer
from bertjax.heads import BertForPreTraining, BertForTokenClassification
from bertjax.io.weights import save_model
from bertjax.use.encode import TruncationWarning
from bertjax.use.tag import AGGREGATIONS, tag

transformers = pytest.importorskip("transformers")

LABELS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")
SCORE_TOLERANCE = 1e-5  # absolute, on probabilities
RIDGE = 0.1  # the fit's penalty on squared weights

# text -> {word: its pieces' labels}; a single label names the first piece's B-/I- tag of an
# entity (the rest: I-), a tuple gives each piece's label; every other word is O
DESIGNED = {
    "Romeo Capulet met Juliet in Verona.": {
        "Romeo": "PER", "Capulet": "I-PER", "Juliet": "PER", "Verona": "LOC"},
    "Mantua, Padua and Verona! Verona Mantua": {
        "Mantua": "LOC", "Padua": "LOC", "Verona": "LOC"},
    "Señor Álvarez visited Zürich, cafe\u0301 naïve.": {
        "Señor": ("O", "B-PER", "I-PER"), "Álvarez": ("B-PER", "O", "I-LOC", "I-LOC", "I-PER"),
        "Zürich": ("I-LOC", "B-LOC", "I-LOC"), "naïve": ("B-LOC", "I-PER", "I-PER", "O")},
    "Friar Лоренцо of Verona wept": {"Friar": "PER", "Лоренцо": "I-PER", "Verona": "I-LOC"},
}
LONG = " ".join(sentences(80)[20:80])  # far over the tiny model's 128 positions
TEXTS = [*DESIGNED, "", LONG]


def _piece_labels(tokenizer: Tokenizer, text: str, words: dict
                  ) -> list[tuple[str, int]]:
    """The designed label of each piece of `text` (no [CLS]/[SEP]) and its place in its word."""
    encoding = tokenizer.tokenizer.encode(text, add_special_tokens=False)
    labels = []
    for i, w in enumerate(encoding.word_ids):
        pieces = [j for j, v in enumerate(encoding.word_ids) if v == w]
        first, last = encoding.offsets[pieces[0]][0], encoding.offsets[pieces[-1]][1]
        spec, k = words.get(text[first:last], "O"), pieces.index(i)
        if isinstance(spec, tuple):
            assert len(spec) == len(pieces), f"{text[first:last]} has {len(pieces)} pieces"
            label = spec[k]
        elif spec == "O" or ("-" in spec and k == 0):
            label = spec
        else:
            label = f"{'I' if k else 'B'}-{spec.split('-')[-1]}"
        labels.append((label, k))
    return labels


def _fit_classifier(model: BertForTokenClassification, tokenizer: Tokenizer) -> None:
    """Set the classifier so the designed texts' tokens get their labels: ridge regression on
    the encoder's outputs towards logits 4, 6 or 8 (a word's 1st, 2nd, 3rd piece...) above the
    others, so "max" and "average" have tokens of different confidence to choose from. The
    ridge keeps the weights small (near 1): large ones would magnify the float32 differences
    between JAX's and PyTorch's hidden states past the score tolerance."""
    from bertjax.use.encode import encode

    features, targets = [], []
    for text, words in DESIGNED.items():
        batch = encode(tokenizer, [text], max_length=128)
        h = np.asarray(model.bert(*map(jnp.asarray, batch.arrays().values())).sequence_output[0])
        labels = [("O", 0), *_piece_labels(tokenizer, text, words), ("O", 0)]  # [CLS] ... [SEP]
        for i, (label, k) in enumerate(labels):
            features.append(np.append(h[i], 1.0))  # (H + 1,) with the bias input
            targets.append(np.eye(len(LABELS))[LABELS.index(label)] * (4 + 2 * (k % 3)))
    x, y = np.stack(features), np.stack(targets)  # (N, H + 1), (N, L)
    w = np.linalg.solve(x.T @ x + RIDGE * np.eye(x.shape[1]), x.T @ y)  # (H + 1, L)
    assert ((x @ w).argmax(-1) == y.argmax(-1)).all(), "the fit misses a designed label"
    model.token_classifier.kernel[...] = jnp.asarray(w[:-1], jnp.float32)
    model.token_classifier.bias[...] = jnp.asarray(w[-1], jnp.float32)


@pytest.fixture(scope="module")
def tagger(tmp_path_factory) -> tuple[BertForTokenClassification, Tokenizer, Path]:
    tokenizer = Tokenizer.train(sentences(), vocab_size=400)
    config = BertConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size,
                                    pad_token_id=tokenizer.special.pad, id2label=LABELS)
    model = BertForTokenClassification(config, rngs=nnx.Rngs(0))
    _fit_classifier(model, tokenizer)
    path = tmp_path_factory.mktemp("tag") / "model"
    save_model(model, path, tokenizer=tokenizer)
    return model, tokenizer, path


@pytest.fixture(scope="module")
def reference(tagger) -> dict[str, list[list[dict]]]:
    """The pipeline's entities of TEXTS for each strategy."""
    path = str(tagger[2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {s: transformers.pipeline("token-classification", model=path, tokenizer=path,
                                         aggregation_strategy=s, device="cpu")(TEXTS)
                for s in AGGREGATIONS}


def assert_same(got: list[list[dict]], expected: list[list[dict]]) -> None:
    """Same entities (keys, in order, and values) exactly; scores within SCORE_TOLERANCE."""
    assert len(got) == len(expected)
    for text, g, e in zip(TEXTS, got, expected, strict=True):
        assert [list(x) for x in g] == [list(x) for x in e], text
        assert [{k: v for k, v in x.items() if k != "score"} for x in g] == \
               [{k: v for k, v in x.items() if k != "score"} for x in e], text
        np.testing.assert_allclose([x["score"] for x in g], [float(x["score"]) for x in e],
                                   rtol=0, atol=SCORE_TOLERANCE, err_msg=text)


@pytest.mark.slow
def test_designed_entities_are_what_the_pipeline_finds(reference) -> None:
    """The fitted model tags what DESIGNED says (so the comparisons below cover groups of
    several pieces and words, adjacent entities, B- after B-, I- without B-, [UNK] words)."""
    simple = [[(e["entity_group"], e["word"]) for e in entities] for entities in reference["simple"]]
    assert simple[0] == [("PER", "romeo capulet"), ("PER", "juliet"), ("LOC", "verona")]
    assert simple[1] == [("LOC", "mantua"), ("LOC", "padua"), ("LOC", "verona"), ("LOC", "verona"),
                         ("LOC", "mantua")]
    assert simple[3] == [("PER", "friar Лоренцо"), ("LOC", "verona")]
    words = {s: [[e["word"] for e in entities] for entities in reference[s]][2]
             for s in ("first", "average", "max")}
    assert len({tuple(w) for w in words.values()}) > 1, "the word strategies should differ here"
    assert reference["none"][4] == [] and all(r[4] == [] for r in reference.values())


@pytest.mark.slow
@pytest.mark.parametrize("max_tokens", [None, 256])  # 256: texts packed two rows a batch
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_tag_equals_pipeline(tagger, reference, aggregation, max_tokens, monkeypatch) -> None:
    import bertjax.use.tag as module

    model, tokenizer, _ = tagger
    sharing = count_row_sharing(monkeypatch, module)
    with pytest.warns(TruncationWarning, match="line 6 has .* more tokens than the model's 128"):
        got = tag(model, tokenizer, TEXTS, aggregation=aggregation, max_tokens=max_tokens)
    assert (max(sharing) > 1) if max_tokens else not sharing  # texts shared a row when packed
    assert_same(got, reference[aggregation])


def test_long_text_is_cut_as_the_pipeline_cuts_it(tagger, reference) -> None:
    """Only the first 126 pieces of the long text are tagged (the pipeline's truncation)."""
    _, tokenizer, _ = tagger
    encoding = tokenizer.tokenizer.encode(LONG, add_special_tokens=False)
    assert len(encoding.ids) > 200
    last_end = encoding.offsets[125][1]
    none = reference["none"][5]
    assert none and max(e["index"] for e in none) <= 126 and max(e["end"] for e in none) <= last_end


def test_batches_give_the_same_entities(tagger, reference, monkeypatch) -> None:
    """Several forward passes (padding to other lengths) change nothing."""
    import bertjax.use.tag as tag_module

    monkeypatch.setattr(tag_module, "BATCH_SIZE", 2)
    model, tokenizer, _ = tagger
    with pytest.warns(TruncationWarning):
        got = tag(model, tokenizer, TEXTS, aggregation="none")
    assert_same(got, reference["none"])


@pytest.mark.parametrize("aggregation", ["simple", "none", "average"])
def test_cli_json_equals_pipeline(tagger, reference, capsys, aggregation) -> None:
    texts = [t for t in TEXTS if t]
    assert main(["tag", str(tagger[2]), *texts, "--json", "--aggregation", aggregation]) == 0
    out = capsys.readouterr()
    assert "bertjax tag: warning: text 5 has" in out.err  # the long text, cut
    expected = [r for t, r in zip(TEXTS, reference[aggregation], strict=True) if t]
    got = json.loads(out.out)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert [x["word"] for x in g] == [x["word"] for x in e]
        assert [{k: v for k, v in x.items() if k != "score"} for x in g] == \
               [{k: v for k, v in x.items() if k != "score"} for x in e]
        np.testing.assert_allclose([x["score"] for x in g], [float(x["score"]) for x in e],
                                   rtol=0, atol=SCORE_TOLERANCE)


def test_cli_table(tagger, reference, capsys) -> None:
    text = next(iter(DESIGNED))
    assert main(["tag", str(tagger[2]), text]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"text 1: {text}"
    expected = [f"{e['entity_group']}  {float(e['score']):.4f}  [{e['start']}:{e['end']}]"
                for e in reference["simple"][0]]
    assert [" ".join(line.split()[:3]) for line in lines[1:]] == [" ".join(x.split()) for x in expected]
    assert [line.split(None, 3)[3] for line in lines[1:]] == ["romeo capulet", "juliet", "verona"]


def test_empty_text_has_no_entities(tagger, reference) -> None:
    model, tokenizer, _ = tagger
    assert tag(model, tokenizer, ["", "  "]) == [[], []]
    assert tag(model, tokenizer, []) == []
    assert reference["simple"][4] == []


def test_cli_refuses_empty_and_missing_text(tagger, capsys) -> None:
    assert main(["tag", str(tagger[2]), "Verona", "  "]) == 2
    assert "bertjax tag: error: text 2 is empty; give a text" in capsys.readouterr().err
    assert main(["tag", str(tagger[2])]) == 2
    assert "give at least one TEXT" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["tag", str(tagger[2]), "Verona", "--aggregation", "mean"])
    assert exit_.value.code == 2
    assert "invalid choice: 'mean'" in capsys.readouterr().err


def test_model_without_token_head_is_refused(tagger, capsys) -> None:
    _, tokenizer, _ = tagger
    pretraining = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size),
                                     rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="needs a token-classification model .*got "
                                         "BertForPreTraining"):
        tag(pretraining, tokenizer, ["Verona"])
    assert main(["tag", str(tiny_checkpoint()), "Verona"]) == 2
    err = capsys.readouterr().err
    assert "has no weights for token_classifier" in err
    assert "`bertjax finetune MODEL --task token-classification --output-dir DIR ...`" in err


def test_bad_options_are_refused(tagger) -> None:
    model, tokenizer, _ = tagger
    with pytest.raises(ValueError, match="aggregation must be one of none, simple"):
        tag(model, tokenizer, ["Verona"], aggregation="mean")
    with pytest.raises(ValueError, match="max_length 129 is longer than the model's 128"):
        tag(model, tokenizer, ["Verona"], max_length=129)
