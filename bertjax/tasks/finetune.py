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
from typing import Any

import numpy as np

from bertjax.data.labelled import Example, check_labels, majority_baseline
from bertjax.io.files import write_json_atomic
from bertjax.train.metrics import MetricsWriter
from bertjax.viz.curves import plot_confusion

LOG_EVERY = 10  # optimizer steps between train records


@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
    """The fine-tuning recipe (BERT's: AdamW, linear warm-up then decay, clip 1.0)."""

    epochs: int = 3
    batch_size: int = 32
    learning_rate: float = 5e-5
    warmup_fraction: float = 0.1  # of all steps
    weight_decay: float = 0.01
    max_length: int = 128  # tokens per example; longer ones are cut
    seed: int = 0  # shuffling and dropout

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "max_length"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.learning_rate <= 0 or not 0 <= self.warmup_fraction < 1 or self.weight_decay < 0:
            raise ValueError("learning_rate must be positive, warmup_fraction in [0, 1), "
                             "weight_decay >= 0")


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
    model: Any,
    tokenizer: Any,
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
    on `train`; returns the scores of the best epoch on `validation` (and `test`)."""
    import jax
    from flax import nnx
    from tqdm import tqdm

    from bertjax.tasks.classification import label_ids, predict, score
    from bertjax.train.objectives import CLASSIFICATION
    from bertjax.train.optim import OptimConfig, learning_rate_schedule, make_optimizer
    from bertjax.train.parallel import SingleDevice
    from bertjax.train.step import create_train_state, make_train_step

    started = time.perf_counter()
    say = log or (lambda message: print(message, file=sys.stderr, flush=True))
    labels = model.config.id2label
    for what, examples in (("the training data", train), ("the validation data", validation),
                           ("the test data", test or [])):
        check_labels(examples, labels, what)
    steps_per_epoch = len(train) // config.batch_size
    if steps_per_epoch == 0:
        raise ValueError(f"{len(train)} training examples make no batch of {config.batch_size}; "
                         "lower --batch-size")
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    total = steps_per_epoch * config.epochs
    optim = OptimConfig(learning_rate=config.learning_rate, total_steps=total,
                        warmup_steps=round(config.warmup_fraction * total),
                        weight_decay=config.weight_decay)
    tx = make_optimizer(optim)
    graphdef, state = create_train_state(model, tx, config.seed)
    strategy = SingleDevice()
    state = strategy.place_state(state)
    c = model.config
    step_fn = strategy.compile_step(make_train_step(
        graphdef, tx, learning_rate_schedule(optim), objective=CLASSIFICATION,
        dropout=max(c.hidden_dropout_prob, c.attention_probs_dropout_prob, c.classifier_dropout_prob) > 0))
    lengths = _sequence_lengths(tokenizer, [*train, *validation, *(test or [])])
    cut = int(np.sum(lengths > config.max_length))
    if cut:
        say(f"{cut} examples are longer than {config.max_length} tokens and are cut to fit")
    y_train, y_val = label_ids(train, labels), label_ids(validation, labels)
    baseline_label, baseline_accuracy = majority_baseline(train, test or validation)
    say(f"fine-tuning on {len(train)} examples, {len(labels)} labels, {config.epochs} epochs of "
        f"{steps_per_epoch} steps; majority baseline {baseline_label!r}: {baseline_accuracy:.4f}")

    writer = MetricsWriter(out / "metrics.jsonl", tensorboard_dir=out / "tensorboard")
    rng = np.random.default_rng(config.seed)
    best: tuple[float, float] | None = None
    best_params, best_epoch, best_scores = None, 0, None
    bar = tqdm(total=total, unit="step", desc="finetune", disable=not progress, file=sys.stderr)
    try:
        for epoch in range(1, config.epochs + 1):
            for b, rows in enumerate(length_grouped_batches(lengths[:len(train)],
                                                            config.batch_size, rng)):
                batch = _batch(tokenizer, [train[i] for i in rows], config.max_length, c)
                state, metrics = step_fn(state, strategy.shard_batch(
                    {**batch, "labels": y_train[rows]}))
                step = (epoch - 1) * steps_per_epoch + b + 1
                if step % LOG_EVERY == 0 or b == steps_per_epoch - 1:
                    host = strategy.host_metrics(metrics)
                    writer.log("train", step, host)
                    bar.set_postfix(loss=f"{host['loss']:.3f}", refresh=False)
                bar.update(1)
            current = nnx.merge(graphdef, state.params)
            scores = score(predict(current, tokenizer, validation, max_length=config.max_length,
                                   warn=False), y_val)
            writer.log("eval", step, {"epoch": epoch, **scores.as_dict()}, flush=True)
            say(f"epoch {epoch}: validation accuracy {scores.accuracy:.4f}, macro-F1 "
                f"{scores.macro_f1:.4f}, loss {scores.loss:.4f}")
            if best is None or (scores.accuracy, scores.macro_f1) > best:
                best, best_epoch, best_scores = (scores.accuracy, scores.macro_f1), epoch, scores
                best_params = jax.device_get(state.params)
                current.save_pretrained(out / "model", tokenizer)
    finally:
        bar.close()
        writer.close()

    final = nnx.merge(graphdef, best_params)
    plot_confusion(best_scores.confusion, labels, out / "confusion_validation.png",
                   title=f"validation, epoch {best_epoch}")
    test_scores = None
    if test:
        test_scores = score(predict(final, tokenizer, test, max_length=config.max_length,
                                    warn=False), label_ids(test, labels))
        plot_confusion(test_scores.confusion, labels, out / "confusion_test.png", title="test")
        say(f"test (epoch {best_epoch}): accuracy {test_scores.accuracy:.4f}, macro-F1 "
            f"{test_scores.macro_f1:.4f} (majority baseline {baseline_accuracy:.4f})")
    result = FinetuneResult(
        output_dir=str(out), labels=list(labels), train_examples=len(train), best_epoch=best_epoch,
        validation=best_scores.as_dict(), test=None if test_scores is None else test_scores.as_dict(),
        baseline_label=baseline_label, baseline_accuracy=baseline_accuracy,
        seconds=time.perf_counter() - started)
    write_json_atomic(out / "summary.json", dataclasses.asdict(result))
    return result


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


def _batch(tokenizer: Any, examples: Sequence[Example], max_length: int, model_config: Any
           ) -> dict[str, np.ndarray]:
    from bertjax.use.encode import encode

    pairs = [e.text_pair or None for e in examples]  # a row without a pair: [CLS] A [SEP]
    return encode(tokenizer, [e.text for e in examples], pairs, max_length=max_length,
                  warn=False).arrays(model_config)


def _sequence_lengths(tokenizer: Any, examples: Sequence[Example]) -> np.ndarray:
    """(N,) tokens of each example as [CLS] A [SEP] (B [SEP]), before any cut."""
    texts = tokenizer.encode_batch([e.text for e in examples])
    pairs = tokenizer.encode_batch([e.text_pair or "" for e in examples])
    return np.array([len(a) + len(b) + (3 if e.text_pair else 2)
                     for a, b, e in zip(texts, pairs, examples, strict=True)], dtype=np.int64)
