"""Optimizer-step parity: the Optax train step against its PyTorch mirror, step by step.

`train_parity` builds one bertjax model, converts it to `bert_torch` (`parity.convert`), and runs
the same AdamW updates in both (`bertjax.train.step.make_train_step` with
`bertjax.train.optim.make_optimizer`; `bert_torch.train`) on the same batches: float32,
no dropout, highest matmul precision. It reports every parameter's max abs diff after the first
and after the last update, and both per-step losses, gradient norms and learning rates. The
PyTorch side also trains in float64: its float32 run's distance from that is the noise each
number is judged against (`parity.noise`: within max(tolerance, NOISE_FACTOR x noise)).

The PyTorch side takes each batch whole; the JAX side splits it into
`optim.grad_accum_steps` micro-batches, so a run with accumulation also checks that it computes
the whole batch's gradient.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from bertjax.config import BertConfig
from bertjax.data.tokenizer import SPECIAL_TOKENS
from bertjax.heads import BertForPreTraining
from bertjax.io.weights import state_to_numpy
from bertjax.train.optim import OptimConfig, learning_rate_schedule, make_optimizer
from bertjax.train.step import create_train_state, make_train_step
from parity.convert import flax_to_torch, to_torch_model
from parity.noise import NOISE_FACTOR, bar

Batch = dict[str, np.ndarray]
LOSS_TOLERANCE = 1e-4  # max abs diff of the loss at every step (tests/parity/test_train_parity.py)
PARAM_TOLERANCE = 1e-5  # max abs diff of every parameter after the first and the last update


def word_vocabulary(documents: Sequence[Sequence[str]], vocab_size: int) -> list[str]:
    """A deterministic WordPiece vocabulary: the special tokens, every character (alone and as a
    `##` continuation), then the most frequent lowercase words (ties alphabetical).

    `Tokenizer.train` is not used here: `tokenizers` breaks frequency ties differently
    from one process to the next, which would change the batches (and the measured numbers)
    from run to run.
    """
    counts = collections.Counter(
        w for d in documents for s in d for w in re.findall(r"\w+|[^\w\s]", s.lower())
    )
    chars = sorted({c for w in counts for c in w})
    vocab = [*SPECIAL_TOKENS.values(), *chars, *(f"##{c}" for c in chars)]
    words = sorted((w for w in counts if len(w) > 1), key=lambda w: (-counts[w], w))
    vocab += words[: max(0, vocab_size - len(vocab))]
    if len(vocab) > vocab_size:
        raise ValueError(f"vocab_size {vocab_size} cannot hold the {len(vocab)} special tokens "
                         "and characters")
    return vocab


def shakespeare_batches(
    steps: int,
    *,
    vocab_size: int,
    batch_size: int = 8,
    seq_len: int = 64,
    max_predictions: int = 10,
    seed: int = 0,
    documents: int = 40,
) -> list[Batch]:
    """`steps` real pre-training batches, the same in every process (about a second): the first
    `documents` scenes of the held-out plays, a `word_vocabulary` of `vocab_size`, shards in a
    temporary directory, `PretrainingBatches` (NSP pairs, dynamic masking, padded short pairs)."""
    from bertjax.data import PretrainingBatches, Tokenizer, corpus_documents, write_shards

    docs = list(itertools.islice(corpus_documents("shakespeare", split="eval"), documents))
    with tempfile.TemporaryDirectory(prefix="bertjax-train-parity-") as tmp:
        vocab = Path(tmp) / "vocab.txt"
        vocab.write_text("".join(f"{t}\n" for t in word_vocabulary(docs, vocab_size)),
                         encoding="utf-8")
        write_shards(docs, Tokenizer.load(vocab), Path(tmp) / "shards", min_documents=2)
        batches = PretrainingBatches(
            Path(tmp) / "shards", seq_len=seq_len, global_batch_size=batch_size,
            max_predictions=max_predictions, seed=seed, cache_pairs=False,
        )
        return [next(batches) for _ in range(steps)]


@dataclasses.dataclass
class TrainParityReport:
    """Per-step metrics of both sides and per-parameter max abs diffs (PyTorch names)."""

    losses: np.ndarray  # (steps, 2): bertjax, bert_torch; MLM+NSP before each update
    grad_norms: np.ndarray  # (steps, 2): before clipping
    learning_rates: np.ndarray  # (steps, 2): the rate each update used
    first_step_diff: dict[str, float]  # parameter -> max abs diff after update 1
    last_step_diff: dict[str, float]  # ... after the last update
    # the float32 PyTorch run's distance from its float64 run (the noise each is judged against)
    loss_noise: np.ndarray | None = None  # (steps,) |loss float32 - loss float64|
    grad_norms64: np.ndarray | None = None  # (steps,) the float64 run's gradient norms
    first_step_noise: dict[str, float] = dataclasses.field(default_factory=dict)
    last_step_noise: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def losses_passed(self) -> bool:
        """Every step's loss within max(LOSS_TOLERANCE, NOISE_FACTOR x its noise)."""
        noise = np.zeros(len(self.losses)) if self.loss_noise is None else self.loss_noise
        return all(abs(lj - lt) <= bar(LOSS_TOLERANCE, n)
                   for (lj, lt), n in zip(self.losses, noise, strict=True))

    def params_passed(self, diff: dict[str, float], noise: dict[str, float]) -> bool:
        """Every parameter within max(PARAM_TOLERANCE, NOISE_FACTOR x its noise)."""
        return all(d <= bar(PARAM_TOLERANCE, noise.get(n, 0.0)) for n, d in diff.items())

    @property
    def passed(self) -> bool:
        return (self.losses_passed
                and self.params_passed(self.first_step_diff, self.first_step_noise)
                and self.params_passed(self.last_step_diff, self.last_step_noise))

    @property
    def max_first_step_diff(self) -> float:
        return max(self.first_step_diff.values())

    @property
    def max_last_step_diff(self) -> float:
        return max(self.last_step_diff.values())

    @property
    def max_loss_diff(self) -> float:
        return float(np.max(np.abs(self.losses[:, 0] - self.losses[:, 1])))

    def format(self) -> str:
        lines = [f"{'step':>4}  {'lr':>10}  {'loss bertjax':>13}  {'loss torch':>13}  {'|diff|':>9}  "
                 f"{'grad norm jax':>13}  {'grad norm torch':>15}"]
        for i, ((lj, lt), (gj, gt), (rj, _)) in enumerate(
            zip(self.losses, self.grad_norms, self.learning_rates, strict=True)
        ):
            lines.append(f"{i + 1:>4}  {rj:10.3e}  {lj:13.7f}  {lt:13.7f}  {abs(lj - lt):9.2e}  "
                         f"{gj:13.6f}  {gt:15.6f}")
        width = max(map(len, self.first_step_diff))
        n = len(self.losses)
        lines.append("")
        lines.append(f"{'parameter':<{width}}  {'after 1':>10}  {'f32 noise':>10}  "
                     f"{f'after {n}':>10}  {'f32 noise':>10}")
        for name in sorted(self.first_step_diff):
            lines.append(f"{name:<{width}}  {self.first_step_diff[name]:10.3e}  "
                         f"{self.first_step_noise.get(name, 0.0):10.3e}  "
                         f"{self.last_step_diff[name]:10.3e}  "
                         f"{self.last_step_noise.get(name, 0.0):10.3e}")
        loss_noise = 0.0 if self.loss_noise is None else float(np.max(self.loss_noise))
        lines.append(f"max param diff: {self.max_first_step_diff:.3e} after 1 step, "
                     f"{self.max_last_step_diff:.3e} after {n} (tolerance "
                     f"{PARAM_TOLERANCE:.0e}); max loss diff {self.max_loss_diff:.3e} (tolerance "
                     f"{LOSS_TOLERANCE:.0e}, f32 noise up to {loss_noise:.3e}); each within "
                     f"max(tolerance, {NOISE_FACTOR} x f32 noise): "
                     f"{'ok' if self.passed else 'FAIL'}")
        return "\n".join(lines)


def _diff(ours: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> dict[str, float]:
    if set(ours) != set(ref):
        raise ValueError(f"parameter names differ: {sorted(set(ours) ^ set(ref))}")
    return {n: float(np.max(np.abs(ours[n].astype(np.float64) - ref[n]))) for n in ours}


def train_parity(
    config: BertConfig,
    optim: OptimConfig,
    *,
    steps: int = 20,
    seed: int = 0,
    batches: Sequence[Batch] | None = None,
    model: BertForPreTraining | None = None,
    total_steps: int | None = None,
) -> TrainParityReport:
    """Run AdamW updates from the same initial weights in Optax and PyTorch, one per batch:
    `batches`, or by default `steps` Shakespeare batches (`shakespeare_batches`); `optim`'s
    schedule spans `total_steps` updates (default: as many as the batches). The weights are
    `model`'s (e.g. from `bertjax.load_hf`), or a fresh `BertForPreTraining(config)` from `seed`;
    `seed` also picks the default batches."""
    import torch

    from bert_torch.train import make_optimizer as torch_optimizer
    from bert_torch.train import train_step as torch_train_step

    if config.dtype != "float32":
        raise ValueError(f"training parity runs in float32, not {config.dtype}")
    if batches is None:
        batches = shakespeare_batches(steps, vocab_size=config.vocab_size, seed=seed)
    model = BertForPreTraining(config, rngs=nnx.Rngs(seed)) if model is None else model
    # eval mode: no dropout; the float64 run measures the float32 run's noise
    weights = flax_to_torch(model)  # one conversion for both mirrors
    total = len(batches) if total_steps is None else total_steps
    mirrors = [(m, *torch_optimizer(m, optim, total)) for m in (
        to_torch_model(model, state_dict=weights),
        to_torch_model(model, float64=True, state_dict=weights))]

    tx = make_optimizer(optim, total)
    graphdef, state = create_train_state(model, tx, seed)
    del model
    step = jax.jit(make_train_step(graphdef, tx, learning_rate_schedule(optim, total),
                                   grad_accum_steps=optim.grad_accum_steps, dropout=False))

    rows: list[tuple[float, ...]] = []
    diffs, noises = [], []
    for i, batch in enumerate(batches):
        with jax.default_matmul_precision("highest"):
            state, m = step(state, {k: jnp.asarray(v) for k, v in batch.items()})
        t, t64 = (torch_train_step(*mirror, {k: torch.from_numpy(v) for k, v in batch.items()},
                                   optim.clip_norm) for mirror in mirrors)
        rows.append((float(m["loss"]), t["loss"], float(m["grad_norm"]), t["grad_norm"],
                     float(m["learning_rate"]), t["learning_rate"], t64["loss"],
                     t64["grad_norm"]))
        if i == 0 or i == len(batches) - 1:
            ref, ref64 = ({n: p.detach().numpy() for n, p in mirror[0].named_parameters()}
                          for mirror in mirrors)
            diffs.append(_diff(state_to_numpy(state.params), ref))
            noises.append(_diff(ref, ref64))
    table = np.asarray(rows, np.float64)
    return TrainParityReport(
        losses=table[:, 0:2], grad_norms=table[:, 2:4], learning_rates=table[:, 4:6],
        first_step_diff=diffs[0], last_step_diff=diffs[-1],
        loss_noise=np.abs(table[:, 1] - table[:, 6]), grad_norms64=table[:, 7],
        first_step_noise=noises[0], last_step_noise=noises[-1],
    )
