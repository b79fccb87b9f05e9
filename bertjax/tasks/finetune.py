"""The fine-tuning job: a sequence classifier trained with AdamW and warm-up, evaluated every epoch,
the best epoch kept as a Hugging Face directory.

`finetune(model, tokenizer, train, validation, output_dir)` is what `bertjax finetune` runs. The
output directory holds

    model/                    the best epoch by validation accuracy (then macro-F1), exported:
                              transformers' BertForSequenceClassification and AutoTokenizer load it
    metrics.jsonl, tensorboard/   train records every `LOG_EVERY` steps, one eval record per epoch
    confusion_validation.png  (and confusion_test.png): the best model's confusion matrices
    summary.json              labels, scores, the majority-class baseline, timing
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import jax
import numpy as np
from flax import nnx
from tqdm import tqdm

from bertjax.config import BertConfig
from bertjax.data.labelled import Example, check_labels, majority_baseline
from bertjax.data.tokenizer import WordPieceTokenizer
from bertjax.files import atomic_directory, check_output_directory, write_json_atomic
from bertjax.heads import BertForSequenceClassification
from bertjax.io.models import save_model
from bertjax.tasks.classification import Scores, label_ids, predict, score
from bertjax.tasks.finetune_config import FinetuneConfig
from bertjax.train.assembly import assemble
from bertjax.train.metrics import MetricsWriter
from bertjax.train.objectives import CLASSIFICATION
from bertjax.train.optim import OptimConfig
from bertjax.train.parallel import SingleDevice
from bertjax.train.step import Batch, Metrics, TrainState
from bertjax.use.encode import check_max_length, encode
from bertjax.viz.curves import plot_confusion

__all__ = ["LOG_EVERY", "FinetuneConfig", "FinetuneResult", "check_inputs", "check_output_dir",
           "finetune", "length_grouped_batches"]

LOG_EVERY = 10  # optimizer steps between train records


@dataclasses.dataclass
class FinetuneResult:
    """What a run reports; also written to summary.json."""

    output_dir: str
    labels: list[str]
    train_examples: int
    best_epoch: int
    validation: dict[str, float]
    test: dict[str, float] | None
    baseline_label: str  # the most frequent training label
    baseline_accuracy: float  # always predicting it, on the test set (validation if none)
    seconds: float


def finetune(
    model: BertForSequenceClassification,
    tokenizer: WordPieceTokenizer,
    train: Sequence[Example],
    validation: Sequence[Example],
    output_dir: str | Path,
    config: FinetuneConfig = FinetuneConfig(),  # noqa: B008 - frozen
    *,
    test: Sequence[Example] | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> FinetuneResult:
    """Fine-tune `model` (a `BertForSequenceClassification` whose `config.id2label` are the labels)
    on `train`; returns the scores of the best epoch on `validation` (and `test`).

    `output_dir` must be new or empty; everything is checked before it is made, and it is written
    aside and renamed into place at the end, so a failed or interrupted run leaves nothing there.
    """
    started = time.perf_counter()
    say = log or _stderr
    out = Path(output_dir)
    check_output_dir(out)
    check_inputs(model.config, train, validation, test, config)
    with atomic_directory(out, replace=out.exists()) as work:
        run, state = _set_up(model, tokenizer, train, validation, test, work, config, say)
        best = _train(run, state, validation, progress, say)
        return _finish(run, best, test, say, started, out)


def check_output_dir(path: Path, what: str = "output directory") -> None:
    """Refuse an output directory that is a file, holds anything, or cannot be made."""
    check_output_directory(path, is_ours=lambda p: (p / "summary.json").is_file(),
                           made_by="bertjax finetune", what=what,
                           replace_hint="remove it to fine-tune again there")


def check_inputs(model_config: BertConfig, train: Sequence[Example],
                 validation: Sequence[Example], test: Sequence[Example] | None,
                 config: FinetuneConfig) -> None:
    """Everything that can be checked before a run starts: labels, batch size, length."""
    for what, examples in (("the training data", train), ("the validation data", validation),
                           ("the test data", test or [])):
        check_labels(examples, model_config.id2label, what)
    check_max_length(config.max_length, model_config.max_position_embeddings, "--max-length")
    if len(train) < config.batch_size:
        raise ValueError(f"{len(train)} training examples make no batch of {config.batch_size}; "
                         f"lower --batch-size to {len(train)} or less")
    if any(e.text_pair for e in (*train, *validation, *(test or []))) and config.max_length < 5:
        raise ValueError(f"--max-length {config.max_length} leaves no room for text pairs "
                         "([CLS] A [SEP] B [SEP]); pass --max-length 5 or more")


def _train(run: _Run, state: TrainState, validation: Sequence[Example], progress: bool,
           say: Callable[[str], None]) -> _BestEpoch:
    """Every epoch, then the validation scores; the best epoch is exported to model/."""
    config, out, y_val = run.config, run.out, label_ids(validation, run.labels)
    writer = MetricsWriter(out / "metrics.jsonl", tensorboard_dir=out / "tensorboard")
    rng = np.random.default_rng(config.seed)
    best: _BestEpoch | None = None
    bar = tqdm(total=run.steps_per_epoch * config.epochs, unit="step", desc="finetune",
               disable=not progress, file=sys.stderr)
    try:
        for epoch in range(1, config.epochs + 1):
            state, step = _train_epoch(run, state, epoch, rng, writer, bar)
            current = nnx.merge(run.graphdef, state.params)
            scores = score(predict(current, run.tokenizer, validation,
                                   max_length=config.max_length, warn=False), y_val)
            writer.log("eval", step, {"epoch": epoch, **scores.as_dict()}, flush=True)
            say(f"epoch {epoch}: validation accuracy {scores.accuracy:.4f}, macro-F1 "
                f"{scores.macro_f1:.4f}, loss {scores.loss:.4f}")
            if best is None or best.beaten_by(scores):
                best = _BestEpoch(epoch, scores, jax.device_get(state.params))
                save_model(current, out / "model", tokenizer=run.tokenizer)
    finally:
        bar.close()
        writer.close()
    assert best is not None  # epochs >= 1 (FinetuneConfig checks)
    return best


# --- the pieces of a run -------------------------------------------------------------------------


@dataclasses.dataclass
class _Run:
    """A fine-tuning run's fixed parts, made once by `_set_up`."""

    config: FinetuneConfig
    model_config: BertConfig
    tokenizer: WordPieceTokenizer
    train: Sequence[Example]
    out: Path
    strategy: SingleDevice
    graphdef: nnx.GraphDef
    train_step: Callable[[TrainState, Batch], tuple[TrainState, Metrics]]
    train_lengths: np.ndarray  # (N_train,) tokens of each training example, before any cut
    y_train: np.ndarray  # (N_train,) label ids
    steps_per_epoch: int
    baseline_label: str
    baseline_accuracy: float

    @property
    def labels(self) -> tuple[str, ...]:
        return self.model_config.id2label


@dataclasses.dataclass
class _BestEpoch:
    """The best epoch so far by validation accuracy, then macro-F1; its parameters on the host."""

    epoch: int
    scores: Scores
    params: nnx.State

    def beaten_by(self, scores: Scores) -> bool:
        return (scores.accuracy, scores.macro_f1) > (self.scores.accuracy, self.scores.macro_f1)


def _set_up(model: BertForSequenceClassification, tokenizer: WordPieceTokenizer,
            train: Sequence[Example], validation: Sequence[Example],
            test: Sequence[Example] | None, output_dir: str | Path, config: FinetuneConfig,
            say: Callable[[str], None]) -> tuple[_Run, TrainState]:
    """Assemble the training (the inputs are checked, `output_dir` exists); the placed state."""
    labels = model.config.id2label
    steps_per_epoch = len(train) // config.batch_size
    out = Path(output_dir)
    total = steps_per_epoch * config.epochs
    optim = OptimConfig(learning_rate=config.learning_rate, total_steps=total,
                        warmup_steps=round(config.warmup_fraction * total),
                        weight_decay=config.weight_decay)
    strategy = SingleDevice()
    training = assemble(model, optim, strategy, seed=config.seed, objective=CLASSIFICATION)
    lengths = _sequence_lengths(tokenizer, [*train, *validation, *(test or [])])
    cut = int(np.sum(lengths > config.max_length))
    if cut:
        say(f"{cut} examples are longer than {config.max_length} tokens and are cut to fit")
    baseline_label, baseline_accuracy = majority_baseline(train, test or validation)
    say(f"fine-tuning on {len(train)} examples, {len(labels)} labels, {config.epochs} epochs of "
        f"{steps_per_epoch} steps; majority baseline {baseline_label!r}: {baseline_accuracy:.4f}")
    run = _Run(config=config, model_config=model.config, tokenizer=tokenizer, train=train,
               out=out, strategy=strategy, graphdef=training.graphdef,
               train_step=training.train_step, train_lengths=lengths[:len(train)],
               y_train=label_ids(train, labels), steps_per_epoch=steps_per_epoch,
               baseline_label=baseline_label, baseline_accuracy=baseline_accuracy)
    return run, strategy.place_state(training.state)


def _train_epoch(run: _Run, state: TrainState, epoch: int, rng: np.random.Generator,
                 writer: MetricsWriter, bar: tqdm) -> tuple[TrainState, int]:
    """One pass over the training batches; returns the state and the last step's number."""
    config, step = run.config, 0
    for b, rows in enumerate(length_grouped_batches(run.train_lengths, config.batch_size, rng)):
        batch = _batch(run.tokenizer, [run.train[i] for i in rows], config.max_length,
                       run.model_config)
        state, metrics = run.train_step(state, run.strategy.shard_batch(
            {**batch, "labels": run.y_train[rows]}))
        step = (epoch - 1) * run.steps_per_epoch + b + 1
        if step % LOG_EVERY == 0 or b == run.steps_per_epoch - 1:
            host = run.strategy.host_metrics(metrics)
            writer.log("train", step, host)
            bar.set_postfix(loss=f"{host['loss']:.3f}", refresh=False)
        bar.update(1)
    return state, step


def _finish(run: _Run, best: _BestEpoch, test: Sequence[Example] | None,
            say: Callable[[str], None], started: float, final: Path) -> FinetuneResult:
    """The best epoch's confusion matrices and test scores; summary.json written (in `run.out`,
    which becomes `final`)."""
    out, labels = run.out, run.labels
    plot_confusion(best.scores.confusion, labels, out / "confusion_validation.png",
                   title=f"validation, epoch {best.epoch}")
    test_scores = None
    if test:
        final = nnx.merge(run.graphdef, best.params)
        test_scores = score(predict(final, run.tokenizer, test, max_length=run.config.max_length,
                                    warn=False), label_ids(test, labels))
        plot_confusion(test_scores.confusion, labels, out / "confusion_test.png", title="test")
        say(f"test (epoch {best.epoch}): accuracy {test_scores.accuracy:.4f}, macro-F1 "
            f"{test_scores.macro_f1:.4f} (majority baseline {run.baseline_accuracy:.4f})")
    result = FinetuneResult(
        output_dir=str(final), labels=list(labels), train_examples=len(run.train),
        best_epoch=best.epoch, validation=best.scores.as_dict(),
        test=None if test_scores is None else test_scores.as_dict(),
        baseline_label=run.baseline_label, baseline_accuracy=run.baseline_accuracy,
        seconds=time.perf_counter() - started)
    write_json_atomic(out / "summary.json", dataclasses.asdict(result))
    return result


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def length_grouped_batches(lengths: np.ndarray, batch_size: int, rng: np.random.Generator,
                           group: int = 50) -> list[np.ndarray]:
    """One epoch's batches (incomplete last batch dropped): a random order, cut into groups of
    `group` batches, each group sorted by length before it is cut into batches, the batches then
    shuffled. Rows of a batch have similar lengths, so little of each batch is padding (Hugging
    Face's `group_by_length`), while every epoch still sees a new random mix."""
    n = len(lengths) // batch_size
    order = rng.permutation(len(lengths))[: n * batch_size]  # the rows left out are random
    span = group * batch_size
    grouped = np.concatenate([chunk[np.argsort(lengths[chunk], kind="stable")]
                              for chunk in np.split(order, range(span, len(order), span))])
    batches = [grouped[i * batch_size:(i + 1) * batch_size] for i in range(n)]
    return [batches[i] for i in rng.permutation(n)]


def _batch(tokenizer: WordPieceTokenizer, examples: Sequence[Example], max_length: int,
           model_config: BertConfig) -> dict[str, np.ndarray]:
    pairs = [e.text_pair or None for e in examples]  # a row without a pair: [CLS] A [SEP]
    return encode(tokenizer, [e.text for e in examples], pairs, max_length=max_length,
                  warn=False).arrays(model_config)


def _sequence_lengths(tokenizer: WordPieceTokenizer, examples: Sequence[Example]) -> np.ndarray:
    """(N,) tokens of each example as [CLS] A [SEP] (B [SEP]), before any cut."""
    texts = tokenizer.encode_batch([e.text for e in examples])
    pairs = tokenizer.encode_batch([e.text_pair or "" for e in examples])
    return np.array([len(a) + len(b) + (3 if e.text_pair else 2)
                     for a, b, e in zip(texts, pairs, examples, strict=True)], dtype=np.int64)
