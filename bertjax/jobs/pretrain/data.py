"""The pre-training job's data: vocabulary, shards, the training batches, the held-out batches
and the baseline every evaluation is compared with."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np

from bertjax.common.files import atomic_directory
from bertjax.data.batches import PretrainingBatches
from bertjax.data.corpus import Document, corpus_documents
from bertjax.data.pair_packing import real_token_share
from bertjax.data.shards import write_shards
from bertjax.data.tokenizer import Tokenizer
from bertjax.errors import InputError
from bertjax.jobs.pretrain.data_cache import SPLITS, entry_for, keep, restore
from bertjax.runs import config as rc
from bertjax.runs.layout import RunDir
from bertjax.train.distributed import barrier, gather_rows

EVAL_SEED = 12345  # the held-out batches' masks and pairs: the same in every evaluation and run
# The held-out batches are masked at BERT's rate whatever the run trains with, so accuracies and
# baseline ratios compare across recipes; a run at another rate is also evaluated at its own.
EVAL_MASK_PROB = 0.15

Batch = dict[str, np.ndarray]


@dataclasses.dataclass
class PretrainData:
    """What the loop needs from the data pipeline."""

    train: PretrainingBatches  # iterator of batches with get_state() / set_state(state)
    eval_batches: list[Batch]  # fixed held-out batches (this process's rows), masked at 15%
    vocab_size: int
    pad_id: int  # the vocabulary's padding token (the model's pad_token_id)
    baseline_token: str  # the most frequent held-out target (all processes' rows)
    baseline_accuracy: float  # the accuracy of always predicting it
    # the same held-out pairs masked at the run's own rate; empty when that is EVAL_MASK_PROB
    own_rate_batches: list[Batch] = dataclasses.field(default_factory=list)
    packing_note: str = ""  # the packing the run trains with, in words
    cached_from: Path | None = None  # the data cache's entry the run's data was copied from

    def batches_with_state(self) -> Iterator[tuple[Batch, dict[str, Any]]]:
        """Training batches, each with the iterator state right after it (what a checkpoint
        taken after that batch's step must hold)."""
        for batch in self.train:
            yield batch, self.train.get_state()


def open_data(config: rc.RunConfig, run: RunDir, *, rebuild: bool = False,
              poll: Callable[[], None] | None = None, cache: Path | None = None
              ) -> PretrainData:
    """Vocabulary (trained on the training split), shards, batches; made once per run directory.

    The vocabulary and the tokenised shards are made once and reused on resume (the same
    corpus makes the same ones, but the corpus may have changed since). `rebuild` makes them
    anew, aside, and puts them in place only when both are complete, so a corpus that fails
    leaves nothing behind. `poll()` is called between documents (it may raise to stop). With
    several processes only process 0 makes them; the others wait for it, then read its files.
    `cache`: a directory of data made by earlier runs (`data_cache`), copied instead of made
    where it holds the run's, and given the run's where it does not.
    """
    d = config.data
    cached_from = None
    if jax.process_index() == 0:
        if rebuild or not _started(run):
            cached_from = _make(config, run, poll, cache)
        else:
            _complete(config, run, poll)
    barrier("bertjax_pretrain_data_ready")  # process 0's vocabulary and shards are on disk
    tok = Tokenizer.load(run.tokenizer, family=config.family)
    train = training_batches(run, config, tok)
    eval_batches = held_out_batches(run, config, tok, packing=train.packing)
    own_rate = ([] if d.mask_prob == EVAL_MASK_PROB
                else held_out_batches(run, config, tok, mask_prob=d.mask_prob,
                                      packing=train.packing))
    token, accuracy = baseline(gather_rows(eval_batches, ("masked_ids", "masked_weights")))
    return PretrainData(train=train, eval_batches=eval_batches, vocab_size=tok.vocab_size,
                        pad_id=tok.special.pad, baseline_token=tok.id_to_token(token),
                        baseline_accuracy=accuracy, own_rate_batches=own_rate,
                        packing_note=packing_note(config, train), cached_from=cached_from)


def _batch_options(config: rc.RunConfig, tok: Tokenizer) -> dict[str, Any]:
    """How the run's batches are shaped, and this process's rows of them."""
    d = config.data
    return dict(seq_len=d.seq_len, global_batch_size=d.batch_size,
                max_predictions=d.predictions, not_next=d.not_next,
                next_sentence=config.next_sentence,
                process_index=jax.process_index(), process_count=jax.process_count(),
                tokenizer=tok, cache_pairs=True)  # the job owns its run's shards: pairs kept there


def training_batches(run: RunDir, config: rc.RunConfig, tok: Tokenizer
                     ) -> PretrainingBatches:
    """The run's training batches, from the start: its seed, its masking rate, its packing
    (`data.packing`; "auto" resolved on the training pairs: `PretrainingBatches.packing`)."""
    return PretrainingBatches(run.data("train"), seed=config.train.seed,
                              mask_prob=config.data.mask_prob, packing=config.data.packing,
                              **_batch_options(config, tok))


def held_out_batches(run: RunDir, config: rc.RunConfig, tok: Tokenizer, *,
                     mask_prob: float = EVAL_MASK_PROB, packing: str = "none") -> list[Batch]:
    """The pairs (or segments) of the first `data.eval_batches` unpacked batches of the
    held-out split, masked at `mask_prob` (the same pairs and masks in every evaluation and
    run); with `packing` ("best-fit") packed into fewer batches of rows. The metrics are the
    same either way: every pair is masked as alone, and the sums run over the same predictions
    and pairs."""
    held_out = PretrainingBatches(run.data("eval"), seed=EVAL_SEED, mask_prob=mask_prob,
                                  **_batch_options(config, tok))
    if packing == "none":
        return [next(held_out) for _ in range(config.data.eval_batches)]
    G = held_out.global_batch_size
    pairs: dict[int, Any] = {}  # epoch -> the pairs its unpacked batches hold
    for step in range(config.data.eval_batches):
        epoch, s = divmod(step, held_out.steps_per_epoch)
        pairs.setdefault(epoch, []).append(held_out.order(epoch)[s * G:(s + 1) * G])
    return [batch for epoch, index in pairs.items()
            for batch in held_out.packed_batches(np.concatenate(index), epoch)]


def packing_note(config: rc.RunConfig, train: PretrainingBatches) -> str:
    """What packing the run trains with, in words (and why, for "auto")."""
    share, unit = real_token_share(train.lengths, train.seq_len), train.unit
    why = (f" (data.packing=auto: the {unit}s fill {share:.0%} of unpacked rows)"
           if config.data.packing == "auto" else "")
    if train.packing == "none":
        return f"packing: none, one {unit} per row{why}"
    return (f"packing: {train.packing}, {train.num_pairs} {unit}s in about "
            f"{train.plan(0).num_rows} rows of {train.seq_len} tokens per epoch{why}")


def check_corpus(config: rc.RunConfig) -> None:
    """Raise CorpusError if the run's corpus is missing or its files are not text (the reader
    checks every file's start now; the rest is checked as it is read)."""
    corpus = config.data.corpus
    for split in SPLITS:
        try:  # checks, reads nothing yet
            documents = corpus_documents(corpus, split=split, text_field=config.data.text_field)
        except (OSError, ValueError) as err:
            raise CorpusError.of(corpus, err) from err
        getattr(documents, "close", lambda: None)()


def _documents(config: rc.RunConfig, split: str, poll: Callable[[], None] | None
               ) -> Iterator[Document]:
    """The corpus split's documents, `poll()` before each; a corpus that cannot be read is a
    ValueError naming --data.corpus (and the file, where the reader names it)."""
    corpus = config.data.corpus
    try:
        for document in corpus_documents(corpus, split=split, text_field=config.data.text_field):
            if poll is not None:
                poll()
            yield document
    except (OSError, ValueError) as err:  # FileNotFoundError, UnicodeDecodeError, ...
        raise CorpusError.of(corpus, err) from err


class CorpusError(InputError):
    """The run's corpus cannot be read or is unusable: the message names --data.corpus."""

    @classmethod
    def of(cls, corpus: str, err: BaseException) -> CorpusError:
        if isinstance(err, CorpusError):
            return err
        message = str(err) if not isinstance(err, OSError) or not err.strerror else (
            f"{err.filename}: {err.strerror.lower()}; check the path")
        message = message.replace("check --corpus", "check --data.corpus")
        message = message.replace("--text-field", "--data.text-field")
        return cls(f"--data.corpus: {message}" if corpus in message
                   else f"--data.corpus {corpus!r}: {message}")


def _vocabulary(config: rc.RunConfig, poll: Callable[[], None] | None) -> Tokenizer:
    d = config.data
    sentences = (s for doc in _documents(config, "train", poll) for s in doc)
    try:  # WordPiece with the family's special tokens (RoBERTa's <s> ... </s> too)
        return Tokenizer.train(sentences, vocab_size=d.vocab_size, family=config.family)
    except ValueError as err:  # an empty corpus
        raise CorpusError.of(d.corpus, err) from err


def _shards(config: rc.RunConfig, split: str, tok: Tokenizer, out: Path,
            poll: Callable[[], None] | None) -> None:
    corpus = config.data.corpus
    try:
        write_shards(_documents(config, split, poll), tok, out, corpus=corpus, overwrite=True,
                     min_documents=2 if config.next_sentence else 1)  # NotNext: another one
    except ValueError as err:  # too few documents
        raise CorpusError.of(corpus, err) from err


def _build(config: rc.RunConfig, run: RunDir, poll: Callable[[], None] | None) -> None:
    """Vocabulary and both splits made anew: the shards aside, renamed into place with the
    vocabulary once everything has been read."""
    tok = _vocabulary(config, poll)
    with atomic_directory(run.data_root, replace=True) as staged:
        for split in SPLITS:
            _shards(config, split, tok, staged / split, poll)
    tok.save(run.root)


def _started(run: RunDir) -> bool:
    """Whether a set-up has made any of the run's vocabulary and shards."""
    return run.tokenizer.is_file() or any((run.data(split) / "meta.json").is_file()
                                          for split in SPLITS)


def _make(config: rc.RunConfig, run: RunDir, poll: Callable[[], None] | None,
          cache: Path | None) -> Path | None:
    """The vocabulary and both splits copied from the cache's entry for them (returned), or
    made anew (None) and then kept there."""
    entry = None if cache is None else entry_for(cache, config)
    if entry is not None and restore(entry, run):
        return entry
    _build(config, run, poll)
    if entry is not None:
        keep(entry, run)
    return None


def _complete(config: rc.RunConfig, run: RunDir, poll: Callable[[], None] | None) -> None:
    """Make what a run's data lacks (a set-up stopped part way), reusing what is there."""
    if not run.tokenizer.is_file():
        _vocabulary(config, poll).save(run.root)
    tok = Tokenizer.load(run.tokenizer, family=config.family)
    for split in SPLITS:
        if not (run.data(split) / "meta.json").is_file():
            _shards(config, split, tok, run.data(split), poll)


def baseline(batches: list[Batch]) -> tuple[int, float]:
    """The most frequent masked target of `batches` and the accuracy of always guessing it."""
    counts: dict[int, float] = {}
    total = 0.0
    for b in batches:
        ids = np.asarray(b["masked_ids"]).ravel()
        w = np.asarray(b["masked_weights"], np.float64).ravel()
        total += float(w.sum())
        for token, weight in zip(*np.unique(ids[w > 0], return_counts=True), strict=True):
            counts[int(token)] = counts.get(int(token), 0.0) + float(weight)
    if not counts:
        return 0, 0.0
    token = max(counts, key=lambda t: (counts[t], -t))
    return token, counts[token] / total


def accuracy_ratio(accuracy: float, baseline_accuracy: float) -> float:
    """How many times the baseline's accuracy `accuracy` is (inf for a zero baseline)."""
    return accuracy / baseline_accuracy if baseline_accuracy else float("inf")

