"""The pre-training job: data, model, optimizer, the loop, evaluation, checkpoints, metrics.

`pretrain(config, run_dir)` is what `bertjax pretrain` runs. A run directory holds

    run_config.json    the configuration (checked again on --resume)
    vocab.txt          the WordPiece vocabulary trained on the training plays (cached)
    checkpoints/<step> Orbax steps: {state, data, config}; newest N plus the best by eval loss
    metrics.jsonl      one record per train step and per evaluation
    tensorboard/       the same numbers as TensorBoard events
    curves.png         training and evaluation curves, written at the end
    summary.json       wall time, tokens/s, final held-out metrics and the baseline ratio

Resume is exact: the state (params, optimizer, step, RNG key), the batch iterator's position and
RNG are restored from the newest good checkpoint, dropout keys are derived from (seed, step), and
the metrics log is cut back to that step, so a killed and resumed run ends bitwise equal to an
uninterrupted one on the CPU.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bertjax import run_config as rc
from bertjax.metrics import CURVES_NAME, JSONL_NAME, MetricsWriter, plot_curves

CONFIG_NAME = "run_config.json"
VOCAB_NAME = "vocab.txt"
SUMMARY_NAME = "summary.json"
CHECKPOINT_DIR = "checkpoints"

# Keys of a train record that are a pure function of (config, step): the resume test compares them.
TRAIN_METRIC_KEYS = (
    "loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy", "grad_norm", "learning_rate",
)


class PretrainError(RuntimeError):
    """A run that cannot start or continue, with a message meant for the user."""


class NonFiniteLossError(PretrainError):
    """The loss or gradient norm became NaN or Inf."""


@dataclasses.dataclass
class PretrainResult:
    """What a finished (or stopped) run reports; also written to summary.json."""

    run_dir: str
    steps: int
    resumed_from: int | None
    wall_time_s: float
    train_time_s: float
    tokens_per_s: float
    eval: dict[str, float]
    baseline_accuracy: float
    baseline_token: str
    accuracy_ratio: float
    stopped_early: str | None = None


# --- the run directory ---------------------------------------------------------------------------


def saved_config(run_dir: str | Path) -> dict[str, Any] | None:
    path = Path(run_dir) / CONFIG_NAME
    return json.loads(path.read_text()) if path.is_file() else None


def check_resume_config(run_dir: Path, config: rc.RunConfig, saved: dict[str, Any]) -> None:
    diffs = rc.differences(saved, config)
    if diffs:
        raise PretrainError(
            f"cannot resume {run_dir}: the requested configuration differs from the saved one in "
            f"{len(diffs)} field(s):\n  " + "\n  ".join(diffs)
            + "\nresume with the same options (or only --resume), or use another --output-dir"
        )


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


# --- data ----------------------------------------------------------------------------------------


@dataclasses.dataclass
class DataBundle:
    """What the loop needs from the data pipeline."""

    train: Any  # iterator of batch dicts with get_state() / set_state(state)
    eval_batches: list[dict[str, np.ndarray]]  # fixed held-out batches (same masks every eval)
    vocab_size: int
    id_to_token: Callable[[int], str]


def open_data(
    config: rc.RunConfig, run_dir: Path, process_index: int, process_count: int
) -> DataBundle:
    """Vocabulary (trained on the training plays, cached in the run dir), shards, batches.

    The vocabulary and the tokenised shards are made once and reused on resume: WordPiece training
    is not bitwise reproducible across processes, and resume must see the same token ids. With
    several processes only process 0 makes them; the others wait for it, then read its files.
    """
    from bertjax.data.batches import PretrainingBatches
    from bertjax.data.corpus import corpus_documents
    from bertjax.data.shards import write_shards
    from bertjax.data.tokenizer import WordPieceTokenizer
    from bertjax.training.distributed import barrier

    d = config.data
    tokenizer_file = run_dir / "tokenizer.json"
    shards = {split: run_dir / "data" / split for split in ("train", "eval")}
    tok = None
    if process_index == 0:
        if tokenizer_file.is_file():
            tok = WordPieceTokenizer.load(tokenizer_file)
        else:
            sentences = (s for doc in corpus_documents(d.corpus, split="train") for s in doc)
            tok = WordPieceTokenizer.train(sentences, vocab_size=d.vocab_size)
            tok.save(run_dir)  # tokenizer.json + vocab.txt
        for split, directory in shards.items():
            if not (directory / "meta.json").is_file():
                write_shards(corpus_documents(d.corpus, split=split), tok, directory,
                             corpus=d.corpus, overwrite=True)
    if process_count > 1:
        barrier("bertjax_pretrain_data_ready")  # process 0's vocabulary and shards are on disk
    if tok is None:
        tok = WordPieceTokenizer.load(tokenizer_file)
    common = dict(seq_len=d.seq_len, global_batch_size=d.batch_size,
                  max_predictions=d.max_predictions, mask_prob=d.mask_prob,
                  process_index=process_index, process_count=process_count, tokenizer=tok)
    train = PretrainingBatches(shards["train"], seed=config.train.seed, **common)
    held_out = PretrainingBatches(shards["eval"], seed=12345, **common)  # same masks every eval
    return DataBundle(
        train=train,
        eval_batches=[next(held_out) for _ in range(d.eval_batches)],
        vocab_size=tok.vocab_size,
        id_to_token=tok.id_to_token,
    )


class _Batches:
    """Wraps the pre-training batch iterator: yields (batch, iterator state after that batch)."""

    def __init__(self, iterator: Any):
        self.iterator = iterator

    def __iter__(self) -> Iterator[tuple[dict[str, np.ndarray], Any]]:
        it = iter(self.iterator)
        while True:
            batch = next(it)
            yield batch, self.iterator.get_state()


def baseline(eval_batches: list[dict[str, np.ndarray]]) -> tuple[int, float]:
    """The most frequent masked target of the eval batches and the accuracy of always guessing it."""
    counts: dict[int, float] = {}
    total = 0.0
    for b in eval_batches:
        ids = np.asarray(b["masked_ids"]).ravel()
        w = np.asarray(b["masked_weights"], np.float64).ravel()
        total += float(w.sum())
        for token, weight in zip(*np.unique(ids[w > 0], return_counts=True), strict=True):
            counts[int(token)] = counts.get(int(token), 0.0) + float(weight)
    if not counts:
        return 0, 0.0
    token = max(counts, key=lambda t: (counts[t], -t))
    return token, counts[token] / total


# --- the job -------------------------------------------------------------------------------------


def pretrain(
    config: rc.RunConfig,
    run_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    time_limit_s: float | None = None,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> PretrainResult:
    """Pre-train (or continue) the run in `run_dir`; returns its summary.

    `time_limit_s` stops cleanly (with a checkpoint) once that much wall time has passed.
    `on_step(step, metrics)` sees each step's host metrics (tests use it to inject faults).
    """
    import jax

    from bertjax.checkpoint import Checkpointer, abstract_like
    from bertjax.training.distributed import barrier
    from bertjax.training.optim import learning_rate_schedule, make_optimizer
    from bertjax.training.parallel import make_strategy
    from bertjax.training.step import (
        create_train_state,
        eval_metrics,
        make_eval_step,
        make_train_step,
    )

    t_start = time.perf_counter()
    run_dir = Path(run_dir)
    is_main = jax.process_index() == 0
    say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    if not is_main:
        say = lambda msg: None  # noqa: E731

    # ---- run directory, config, resume checks
    run_dir.mkdir(parents=True, exist_ok=True)
    checkpointer = Checkpointer(
        run_dir / CHECKPOINT_DIR, keep_last=config.train.keep_checkpoints, keep_best=1
    )
    existing = checkpointer.steps()
    saved = saved_config(run_dir)
    if not resume and (existing or saved is not None):
        raise PretrainError(
            f"{run_dir} already holds a run "
            f"({'checkpoint steps ' + str(existing) if existing else CONFIG_NAME}); "
            "pass --resume to continue it, or choose another --output-dir"
        )
    if resume and saved is not None:
        check_resume_config(run_dir, config, saved)
    # Every process has checked the run directory before process 0 writes into it.
    barrier("bertjax_pretrain_run_dir_checked")
    if is_main and saved is None:
        _write_json_atomic(run_dir / CONFIG_NAME, config.to_dict())

    # ---- strategy (fails fast on a batch size the devices cannot split)
    strategy = make_strategy(config.train.parallel, fsdp=config.train.fsdp)
    try:
        strategy.check_batch_size(config.data.batch_size, config.optim.grad_accum_steps)
    except ValueError as err:
        raise PretrainError(str(err)) from err

    # ---- data: vocabulary (cached in the run dir), train iterator, fixed eval batches
    data = open_data(config, run_dir, jax.process_index(), jax.process_count())
    vocab_size = data.vocab_size
    eval_batches = data.eval_batches
    base_token, base_acc = baseline(_global_targets(eval_batches))
    base_name = data.id_to_token(base_token)

    # ---- model, optimizer, state
    from flax import nnx

    from bertjax.model import BertForPreTraining

    bert_config = config.bert_config(vocab_size)
    model = BertForPreTraining(bert_config, rngs=nnx.Rngs(config.train.seed))
    optim_config = config.optim_config()
    tx = make_optimizer(optim_config)
    graphdef, host_state = create_train_state(model, tx, config.train.seed)
    del model
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(host_state.params))

    start_step, resumed_from = 0, None
    if resume and existing:
        restored = checkpointer.restore_latest(abstract_like(host_state))
        if restored is not None:
            for bad in restored.skipped:
                say(f"warning: checkpoint step {bad} in {checkpointer.directory} is corrupt; skipped")
            host_state = restored.state
            start_step = resumed_from = restored.step
            data.train.set_state(restored.data_states[jax.process_index()])
    if resume and resumed_from is None:
        say(f"no usable checkpoint in {run_dir}; starting from step 0")
    if start_step >= config.train.steps:
        say(f"run already finished ({start_step} of {config.train.steps} steps)")

    state = strategy.place_state(host_state)
    axis_name = strategy.axis_name
    dropout = bert_config.hidden_dropout_prob > 0 or bert_config.attention_probs_dropout_prob > 0
    train_step = strategy.compile_step(make_train_step(
        graphdef, tx, learning_rate_schedule(optim_config),
        grad_accum_steps=optim_config.grad_accum_steps, dropout=dropout, axis_name=axis_name,
    ))
    eval_step = strategy.compile_eval(make_eval_step(graphdef, axis_name=axis_name))

    writer = MetricsWriter(run_dir, enabled=is_main, resume_step=start_step if resume else None)
    say(
        f"pretrain: {config.model.preset} ({n_params / 1e6:.2f}M params, vocab {vocab_size}), "
        f"batch {config.data.batch_size} x seq {config.data.seq_len}, {config.train.steps} steps, "
        f"{jax.device_count()} device(s) x {jax.process_count()} process(es), "
        f"{'resuming at step ' + str(start_step) if resumed_from is not None else 'from scratch'}"
    )
    say(
        f"baseline: always predicting the most frequent held-out target {base_name!r} "
        f"scores MLM accuracy {base_acc:.4f}"
    )

    # ---- helpers
    def evaluate(step: int) -> dict[str, float]:
        sums = None
        for b in eval_batches:
            s = strategy.host_metrics(eval_step(state.params, strategy.shard_batch(b)))
            sums = s if sums is None else {k: sums[k] + s[k] for k in sums}
        out = {k: float(v) for k, v in eval_metrics(sums).items()}
        out["baseline_accuracy"] = base_acc
        out["accuracy_ratio"] = out["mlm_accuracy"] / base_acc if base_acc else math.inf
        writer.log("eval", step, out, flush=True)
        return out

    def save(step: int, data_state: Any, eval_loss: float | None) -> None:
        states = _gather_data_states(data_state)
        checkpointer.save(
            step, _savable(strategy, state), states, config.to_dict(), eval_loss=eval_loss
        )
        writer.flush()

    def check(step: int, metrics: dict[str, float]) -> None:
        for key in ("loss", "grad_norm"):
            value = metrics.get(key)
            if value is not None and not math.isfinite(value):
                good = checkpointer.steps()
                raise NonFiniteLossError(
                    f"{key} is {value} at step {step}: stopping. The last good checkpoint is "
                    + (f"step {good[-1]} in {checkpointer.directory}" if good else "none (none was saved)")
                    + "; lower optim.learning_rate or raise optim.warmup_steps and resume from it"
                )

    tokens_per_step = config.data.batch_size * config.data.seq_len
    bar = None
    if progress and is_main:
        from tqdm import tqdm

        bar = tqdm(total=config.train.steps, initial=start_step, unit="step", dynamic_ncols=True,
                   desc="pretrain", file=sys.stderr)

    batches = iter(_Batches(data.train))
    t_loop = time.perf_counter()
    t_window, steps_window = t_loop, 0
    train_time = 0.0
    last_eval: dict[str, float] = {}
    stopped: str | None = None
    pending: tuple[int, Any] | None = None
    last_logged: dict[str, float] = {}

    def handle(entry: tuple[int, Any]) -> dict[str, float]:
        step, metrics = entry
        m = {k: float(v) for k, v in strategy.host_metrics(metrics).items()}
        if on_step is not None:
            on_step(step, m)
        check(step, m)
        writer.log("train", step, m)
        return m

    try:
        step = start_step
        data_state = None
        while step < config.train.steps:
            batch, data_state = next(batches)
            state, metrics = train_step(state, strategy.shard_batch(batch))
            step += 1
            steps_window += 1
            # Metrics of step s-1 are read while step s runs, keeping the device busy.
            if pending is not None:
                last_logged = handle(pending)
            pending = (step, metrics)

            is_last = step == config.train.steps
            # Checked every log_every steps and agreed by all processes, so they stop together.
            over_time = (
                time_limit_s is not None and step % config.train.log_every == 0
                and _any_process(time.perf_counter() - t_start > time_limit_s)
            )
            do_eval = step % config.train.eval_every == 0 or is_last or over_time
            do_ckpt = do_eval or step % config.train.checkpoint_every == 0
            if do_ckpt or (bar is not None and step % config.train.log_every == 0):
                last_logged = handle(pending)
                pending = None
            if bar is not None and (step % config.train.log_every == 0 or do_ckpt):
                now = time.perf_counter()
                tok_s = steps_window * tokens_per_step / max(now - t_window, 1e-9)
                t_window, steps_window = now, 0
                bar.set_postfix(
                    loss=f"{last_logged['loss']:.3f}", lr=f"{last_logged['learning_rate']:.2e}",
                    tok_s=f"{tok_s:,.0f}", refresh=False,
                )
                bar.update(step - bar.n)
            if do_eval:
                t_eval = time.perf_counter()
                last_eval = evaluate(step)
                t_loop += time.perf_counter() - t_eval  # tokens/s counts training time only
                say(
                    f"step {step}: eval MLM loss {last_eval['mlm_loss']:.4f}, MLM accuracy "
                    f"{last_eval['mlm_accuracy']:.4f} (baseline {base_acc:.4f}, "
                    f"x{last_eval['accuracy_ratio']:.2f}), perplexity {last_eval['perplexity']:.1f}, "
                    f"NSP accuracy {last_eval['nsp_accuracy']:.4f}"
                )
            if do_ckpt:
                save(step, data_state, last_eval.get("mlm_loss") if do_eval else None)
            if do_eval or do_ckpt:
                t_window, steps_window = time.perf_counter(), 0  # tokens/s: training time only
            if over_time and not is_last:
                stopped = f"time limit of {time_limit_s:.0f}s reached at step {step}"
                say(stopped)
                break
        if pending is not None:
            handle(pending)
        train_time = time.perf_counter() - t_loop
    finally:
        if bar is not None:
            bar.close()
        writer.close()
        checkpointer.close()

    if not last_eval:  # resumed an already finished run
        last_eval = {r_k: r_v for r_k, r_v in _last_record(run_dir, "eval").items()
                     if isinstance(r_v, float)}
    steps_run = step - start_step
    result = PretrainResult(
        run_dir=str(run_dir),
        steps=step,
        resumed_from=resumed_from,
        wall_time_s=time.perf_counter() - t_start,
        train_time_s=train_time,
        tokens_per_s=steps_run * tokens_per_step / train_time if train_time > 0 else 0.0,
        eval={k: v for k, v in last_eval.items()},
        baseline_accuracy=base_acc,
        baseline_token=base_name,
        accuracy_ratio=last_eval.get("accuracy_ratio", float("nan")),
        stopped_early=stopped,
    )
    if is_main:
        _write_json_atomic(run_dir / SUMMARY_NAME, dataclasses.asdict(result))
        plot_curves(run_dir / JSONL_NAME, run_dir / CURVES_NAME,
                    title=f"bertjax pretrain: {config.model.preset}, {run_dir.name}")
    return result


def _last_record(run_dir: Path, kind: str) -> dict[str, Any]:
    from bertjax.metrics import read_jsonl

    records = read_jsonl(run_dir / JSONL_NAME, kind)
    return records[-1] if records else {}


def _savable(strategy: Any, state: Any) -> Any:
    """The state as Orbax should write it: one host copy (pmap replicas are collapsed)."""
    return strategy.host_state(state)


def _any_process(flag: bool) -> bool:
    """True on every process if `flag` is true on any (a collective when there are several)."""
    import jax

    if jax.process_count() == 1:
        return flag
    from jax.experimental import multihost_utils

    return bool(np.any(multihost_utils.process_allgather(np.array([flag]))))


def _global_targets(batches: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """The masked targets of the eval batches' rows of every process (only those keys).

    The baseline must count the whole global batch, as a single-process run does, not only
    this process's rows.
    """
    import jax

    if jax.process_count() == 1:
        return batches
    from jax.experimental import multihost_utils

    keys = ("masked_ids", "masked_weights")
    local = {k: np.stack([b[k] for b in batches]) for k in keys}  # (batches, B_local, P)
    gathered = multihost_utils.process_allgather(local)  # (processes, batches, B_local, P)
    return [
        {k: np.asarray(gathered[k][:, i]).reshape(-1, gathered[k].shape[-1]) for k in keys}
        for i in range(len(batches))
    ]


def _gather_data_states(local_state: Any) -> list[Any]:
    """Every process's iterator state, in process order (each process resumes its own shard)."""
    import jax

    if jax.process_count() == 1:
        return [local_state]
    from jax.experimental import multihost_utils

    raw = np.frombuffer(json.dumps(local_state).encode(), np.uint8)
    lengths = multihost_utils.process_allgather(np.array([raw.size], np.int64))
    padded = np.zeros(int(np.max(lengths)), np.uint8)
    padded[: raw.size] = raw
    everything = multihost_utils.process_allgather(padded)  # (processes, max_len)
    return [
        json.loads(bytes(everything[i, : int(lengths[i][0])]).decode())
        for i in range(everything.shape[0])
    ]
