"""Fine-tuning by a token budget (`FinetuneConfig.max_tokens`): every task's packed batch gives the
loss and gradient of the same examples unpacked, its predictions are the unpacked ones, and a run
packed by `--max-tokens` learns.

Tolerances: 1e-5 max abs difference of losses, gradients (every parameter) and probabilities
(float32 sums in another order; attention over each sequence's own keys either way). Question
answering's packed loss is each window's softmax over its own pieces, so its reference is each
window alone without padding (the unpacked batch's softmax also spans its padding).
"""

from __future__ import annotations

import json
import random

import jax
import numpy as np
import pytest
from flax import nnx
from use_helpers import sentences, tiny_checkpoint

from bertjax.cli.main import main
from bertjax.config import BertConfig
from bertjax.data.choices import ChoiceExample
from bertjax.data.labelled import Example
from bertjax.data.packing import pack_layout
from bertjax.data.squad import QAExample
from bertjax.data.tagging import TaggedSentence
from bertjax.data.tokenizer import Tokenizer
from bertjax.jobs.finetune.config import FinetuneConfig
from bertjax.jobs.finetune.job import _Packed
from bertjax.tasks.classification import ClassificationTask, predict
from bertjax.tasks.multiple_choice import MultipleChoiceTask, predict_choices
from bertjax.tasks.question_answering import QuestionAnsweringTask
from bertjax.tasks.token_classification import TokenClassificationTask, predict_tags

pytestmark = pytest.mark.slow  # trains or compiles at length: CI runs the file, the fast tier leaves it out

TOL = 1e-5
ROW = 128  # packed rows of several short examples each


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.train(sentences(), vocab_size=400)


def _model(task, tokenizer: Tokenizer, labels: tuple[str, ...] = ("a", "b", "c")):
    config = BertConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size,
                                    pad_token_id=tokenizer.special.pad, id2label=labels)
    return task.model_class(config, rngs=nnx.Rngs(3))


def _examples(kind: str, n: int = 12) -> list:
    rng, lines = random.Random(kind), sentences(200)
    if kind == "classification":
        return [Example(rng.choice(lines), rng.choice(lines) if i % 3 else None,
                        "abc"[i % 3], f"x:{i}") for i in range(n)]
    if kind == "token":
        out = []
        for i in range(n):
            words = tuple(rng.choice(lines).split()[:12])
            out.append(TaggedSentence(words, tuple(rng.choice(("O", "B-PER", "I-PER"))
                                                   for _ in words), f"x:{i}"))
        return out
    if kind == "choice":
        return [ChoiceExample(rng.choice(lines), tuple(rng.choice(lines)[:40]
                                                       for _ in range(rng.randint(2, 4))),
                              0, f"x:{i}") for i in range(n)]
    contexts = [" ".join(rng.choice(lines) for _ in range(rng.randint(2, 5))) for _ in range(n)]
    return [QAExample(f"q{i}", "Who said so?", c, ((c.split()[1], c.index(c.split()[1])),),
                      f"x:{i}") for i, c in enumerate(contexts)]


def _loss_and_grads(model, objective):
    """batch -> (loss, gradient leaves) of the model's parameters, compiled once per shape (op
    by op, every new length would compile each operation again)."""
    graphdef, params = nnx.split(model, nnx.Param)

    def loss(p, batch):
        sums = objective.forward_sums(nnx.merge(graphdef, p), batch, None)
        return objective.loss(sums, objective.counts(batch))

    value_and_grad = jax.jit(jax.value_and_grad(loss))

    def run(batch):
        value, grads = value_and_grad(params, batch)
        return float(value), jax.tree.leaves(grads)
    return run


TASKS = {"classification": (ClassificationTask, ("a", "b", "c")),
         "token": (TokenClassificationTask, ("O", "B-PER", "I-PER")),
         "choice": (MultipleChoiceTask, ("a",)), "qa": (QuestionAnsweringTask, ("a", "b"))}


@pytest.mark.parametrize("kind", list(TASKS))
def test_a_packed_batch_has_the_loss_and_gradient_of_its_examples(tokenizer, kind):
    task_class, labels = TASKS[kind]
    task = task_class(doc_stride=8, max_query_length=6) if kind == "qa" else task_class()
    model = _model(task, tokenizer, labels)
    max_length = {"qa": 40, "choice": 32}.get(kind, 48)  # 4 choices of 32: a row of 128
    units = task.units(tokenizer, _examples(kind, 5 if kind == "qa" else 12), max_length)
    arrays = task.batch(tokenizer, units, max_length, model.config)
    lengths = task.pack_lengths(arrays)
    layout = pack_layout(lengths, ROW)
    packed = task.pack(arrays, layout, tokenizer.special.pad)
    assert layout.num_rows < len(units)  # several units a row
    loss_and_grads = _loss_and_grads(model, task.objective)
    ours, our_grads = loss_and_grads(packed)
    if kind == "qa":  # each window alone, unpadded: the mean of their losses and gradients
        alone = [loss_and_grads({
            k: (v[i:i + 1, :lengths[i]] if v.ndim == 2 else v[i:i + 1]) for k, v in arrays.items()})
            for i in range(len(units))]
        theirs = float(np.mean([a for a, _ in alone]))
        their_grads = [np.mean(g, axis=0) for g in zip(*(g for _, g in alone), strict=True)]
    else:
        theirs, their_grads = loss_and_grads(arrays)
    assert abs(ours - theirs) <= TOL, (ours, theirs)
    worst = max(float(np.abs(a - b).max()) for a, b in zip(our_grads, their_grads, strict=True))
    assert worst <= TOL, worst


def test_packed_predictions_are_the_unpacked_ones(tokenizer):
    classify = _model(ClassificationTask(), tokenizer)
    examples = _examples("classification", 30)
    unpacked = predict(classify, tokenizer, examples, max_length=48, warn=False)
    packed = predict(classify, tokenizer, examples, max_length=48, warn=False, max_tokens=256)
    assert np.abs(unpacked - packed).max() <= TOL
    tagger = _model(TokenClassificationTask(), tokenizer, ("O", "B-PER", "I-PER"))
    sentences_ = _examples("token", 30)
    tags, loss = predict_tags(tagger, tokenizer, sentences_, max_length=32)
    packed_tags, packed_loss = predict_tags(tagger, tokenizer, sentences_, max_length=32,
                                            max_tokens=256)
    assert packed_tags == tags and abs(loss - packed_loss) <= TOL
    chooser = _model(MultipleChoiceTask(), tokenizer, ("a",))
    choices = _examples("choice", 20)
    unpacked = predict_choices(chooser, tokenizer, choices, max_length=32)
    packed = predict_choices(chooser, tokenizer, choices, max_length=32, max_tokens=512)
    assert np.abs(unpacked - packed).max() <= TOL
    assert (packed[[len(e.choices) < 4 for e in choices], 3] == 0).all()  # missing: no share
    qa = QuestionAnsweringTask(doc_stride=8, max_query_length=6)
    reader = _model(qa, tokenizer, ("a", "b"))
    questions = _examples("qa", 12)
    answers, _ = qa.predict(reader, tokenizer, questions, 40)
    packed_answers, _ = qa.predict(reader, tokenizer, questions, 40, max_tokens=256)
    assert packed_answers == answers


def test_a_packed_run_learns_and_says_how_it_packed(tmp_path, capsys):
    rng, lines = random.Random(0), sentences(300)
    rows = [{"text": f"{'the king and his crown' if i % 2 else 'a fool and his jest'}. {line}",
             "label": "royal" if i % 2 else "folly"} for i, line in enumerate(lines)]
    rng.shuffle(rows)
    paths = []
    for name, part in (("train", rows[:160]), ("validation", rows[160:200])):
        paths.append(tmp_path / f"{name}.jsonl")
        paths[-1].write_text("".join(json.dumps(r) + "\n" for r in part))
    code = main(["finetune", str(tiny_checkpoint()), "--train", str(paths[0]), "--validation",
                 str(paths[1]), "--output-dir", str(tmp_path / "out"), "--epochs", "3",
                 "--max-tokens", "512", "--optim.learning-rate", "2e-3", "--max-length", "64",
                 "--no-progress"])
    assert code == 0
    err = capsys.readouterr().err
    assert "160 training units packed into" in err and "8 rows a step" in err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["validation"]["accuracy"] >= 0.9, summary
    with pytest.raises(SystemExit):
        main(["finetune", str(tiny_checkpoint()), "--max-tokens", "0"])


def test_choices_longer_together_than_the_positions_pack_into_one_row(tokenizer):
    """A multiple-choice example's choices share a row, each with its own positions: 4 choices of
    up to 32 tokens under 32 positions pack (rows of up to 128), predictions the unpacked ones,
    and the fine-tuning job's packing takes them; one packed sequence longer than the positions
    is refused."""
    config = BertConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size,
                                    max_position_embeddings=32, pad_token_id=tokenizer.special.pad,
                                    id2label=("a",))
    chooser = MultipleChoiceTask.model_class(config, rngs=nnx.Rngs(3))
    choices = [e for e in _examples("choice", 20) if len(e.choices) == 4]
    unpacked = predict_choices(chooser, tokenizer, choices, max_length=32)
    packed = predict_choices(chooser, tokenizer, choices, max_length=32, max_tokens=512)
    assert np.abs(unpacked - packed).max() <= TOL
    task = MultipleChoiceTask()
    units = task.units(tokenizer, choices, 32)
    assert task.pack_lengths(task.batch(tokenizer, units, 32, config)).max() > 32
    rows = _Packed.of(task, tokenizer, units, FinetuneConfig(max_length=32, max_tokens=128),
                      config)
    assert rows.layout.num_rows < len(units) * 4
    ids = np.full((1, 40), 5)
    with pytest.raises(ValueError, match="packed sequence of 40 tokens is longer than max_pos"):
        chooser.bert(ids, np.zeros_like(ids), np.ones_like(ids), sequence_ids=np.ones_like(ids),
                     cls_positions=np.zeros((1, 1), np.int32))
