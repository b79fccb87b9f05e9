"""The pre-training job: `pretrain(config, run_dir)` is what `bertjax pretrain` runs.

Data, model, optimizer, the loop, evaluation, checkpoints, metrics; the files it writes are listed
in `bertjax.runs.layout`. Resume is exact: the state (params, optimizer, step, RNG key), the batch
iterator's position and RNG are restored from the newest good checkpoint, dropout keys are derived
from (seed, step), and the metrics log is cut back to that step, so a killed and resumed run ends
bitwise equal to an uninterrupted one on the CPU.

Nothing is written before the run directory has been checked (`check_run_dir`), and
run_config.json only once the data is ready: a run that fails before its first checkpoint leaves
a directory a retry accepts (a configuration without a checkpoint is a run not yet started).
A caller's request to stop (`StopRequest`: Ctrl-C at the command line) is honoured at the end of
a step with a checkpoint; before the first step has run the job says it has nothing to save, so
the caller may end it at once; `--resume` of a finished run keeps its summary.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import jax
import numpy as np
from flax import nnx

from bertjax.common.console import quiet, to_stderr
from bertjax.common.files import write_json_atomic
from bertjax.heads import MODEL_CLASSES, BertForMaskedLM, BertForPreTraining
from bertjax.jobs.pretrain.data import PretrainData, accuracy_ratio, check_corpus, open_data
from bertjax.jobs.pretrain.data_cache import unusable
from bertjax.jobs.pretrain.start import (
    PretrainError,
    RunStart,
    check_run_dir,
    discard_unstarted,
    interrupted_error,
    resume_command,
)
from bertjax.jobs.pretrain.summary import (
    PretrainResult,
    last_eval_record,
    read_summary,
    write_summary,
)
from bertjax.jobs.stop import NOTHING_TO_SAVE, SAVING, SETTING_UP, Interrupted, StopRequest
from bertjax.runs import config as rc
from bertjax.runs.layout import RunDir
from bertjax.train.assembly import Strategy, assemble
from bertjax.train.checkpoint import Checkpointer
from bertjax.train.distributed import allgather_json, barrier
from bertjax.train.electra import ElectraPair, electra, electra_means
from bertjax.train.local_init import local_attention_init
from bertjax.train.loop import NonFiniteLossError, PendingMetrics, StepSchedule, TrainClock, flush_and_tick
from bertjax.train.metrics import MetricsWriter
from bertjax.train.objectives import MASKED_LM, Objective, pretraining, pretraining_means
from bertjax.train.parallel import make_strategy
from bertjax.train.prefetch import Prefetch
from bertjax.train.step import Batch, Metrics, TrainState

__all__ = ["RTD_METRIC_KEYS", "TRAIN_METRIC_KEYS", "NonFiniteLossError", "PretrainError", "PretrainResult",
           "check_run_dir", "initialise_model", "pretrain", "resume_command"]

# Keys of a train record that are a pure function of (config, step): the resume test compares them
# (a run of masked LM alone has no nsp_* keys).
TRAIN_METRIC_KEYS = (
    "loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy", "grad_norm", "learning_rate",
)
# and an ELECTRA run's discriminator's
RTD_METRIC_KEYS = ("rtd_loss", "rtd_accuracy", "rtd_precision", "rtd_recall", "replaced_share")


def pretrain(
    config: rc.RunConfig | None,
    run_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    time_limit_s: float | None = None,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
    log: Callable[[str], None] | None = None,
    stop: StopRequest | None = None,
    data_cache: Path | None = None,
) -> PretrainResult:
    """Pre-train (or continue) the run in `run_dir`; returns its summary. `config` None with
    `resume` continues the run with its own configuration (what `bertjax pretrain --resume` alone
    does).

    The directory is checked before anything is written (PretrainError, or InputError for a
    damaged run_config.json). `time_limit_s` stops cleanly (with a checkpoint) once that much
    wall time has passed. `stop` is the caller's request to stop (`bertjax.jobs.stop`): honoured
    at the end of a step with a checkpoint, then Interrupted says how to resume (a
    KeyboardInterrupt during the job is reported the same way). `on_step(step, metrics)` sees
    each step's host metrics (tests use it to inject faults). `data_cache`: a directory where
    runs keep their vocabulary and shards for later runs with the same data options
    (`bertjax.jobs.pretrain.data_cache`; the command line's $BERTJAX_DATA_CACHE); None makes
    them every time.
    """
    t_start = time.perf_counter()
    run, is_main = RunDir(run_dir), jax.process_index() == 0
    say = (log or to_stderr) if is_main else quiet
    start = check_run_dir(run, config, resume)
    config = start.config
    if start.rebuild_data:
        check_corpus(config)
    barrier("bertjax_pretrain_run_dir_checked")  # every process checked before process 0 writes
    stop = stop or StopRequest()
    stop.step, stop.phase = None, SETTING_UP
    stop.message = lambda: str(interrupted_error(run, config, stop))
    try:
        for note in start.notes:
            say(note)
        job, state = _set_up(config, run, start, stop, say, data_cache)
        try:
            if job.start_step >= config.train.steps:
                return _already_finished(job, run)
            end, clock = _run_loop(job, state, run, start, stop, progress=progress,
                                   started=t_start, time_limit_s=time_limit_s, on_step=on_step)
        finally:
            job.checkpointer.close()
        result = _finish(job, run, end, clock, t_start)
    except Interrupted:
        raise
    except KeyboardInterrupt:
        raise interrupted_error(run, config, stop) from None
    if end.stopped and end.interrupted:
        raise Interrupted(
            f"interrupted (Ctrl-C) at step {end.step} of {config.train.steps}; saved a checkpoint "
            f"at step {end.step}; resume with: {resume_command(run)}")
    return result


def _finish(job: _Job, run: RunDir, end: _LoopEnd, clock: TrainClock,
            t_start: float) -> PretrainResult:
    """The run's result, written to summary.json and curves.png (by process 0)."""
    last_eval = end.last_eval or last_eval_record(run)
    result = PretrainResult(
        run_dir=str(run), steps=end.step, resumed_from=job.start_step or None,
        wall_time_s=time.perf_counter() - t_start, train_time_s=clock.seconds,
        tokens_per_s=clock.tokens_per_s, first_step_s=clock.first_step_s, eval=last_eval,
        baseline_accuracy=job.data.baseline_accuracy, baseline_token=job.data.baseline_token,
        accuracy_ratio=last_eval.get("accuracy_ratio", math.nan), stopped_early=end.stopped,
    )
    if jax.process_index() == 0:
        write_summary(run, result, job.config.model.preset, mask_prob=job.config.data.mask_prob)
    return result


def _already_finished(job: _Job, run: RunDir) -> PretrainResult:
    """--resume of a finished run: its saved summary, untouched (written only if it is missing)."""
    saved = read_summary(run)
    if saved is not None:  # where the run is now, not where it was made (copied, moved)
        return dataclasses.replace(saved, run_dir=str(run), already_finished=True)
    last_eval = last_eval_record(run)
    result = PretrainResult(
        run_dir=str(run), steps=job.start_step, resumed_from=job.start_step, wall_time_s=0.0,
        train_time_s=0.0, tokens_per_s=0.0, first_step_s=0.0, eval=last_eval,
        baseline_accuracy=job.data.baseline_accuracy, baseline_token=job.data.baseline_token,
        accuracy_ratio=last_eval.get("accuracy_ratio", math.nan), already_finished=True,
    )
    if jax.process_index() == 0 and not run.summary.exists():  # never overwrite one
        write_summary(run, result, job.config.model.preset, curves=not run.curves.exists(),
                      mask_prob=job.config.data.mask_prob)
    return result


# --- setting up ----------------------------------------------------------------------------------


@dataclasses.dataclass
class _Job:
    """The parts of a run the loop works with, made once by `_set_up`."""

    config: rc.RunConfig
    strategy: Strategy
    data: PretrainData
    checkpointer: Checkpointer
    train_step: Callable[[TrainState, Batch], tuple[TrainState, Metrics]]
    eval_step: Callable[[nnx.State, Batch], Metrics]
    start_step: int
    say: Callable[[str], None]


def _set_up(config: rc.RunConfig, run: RunDir, start: RunStart, stop: StopRequest,
            say: Callable[[str], None], data_cache: Path | None) -> tuple[_Job, TrainState]:
    """Strategy, data (then run_config.json), model and optimizer; the state restored (on
    resume) and placed. The Checkpointer (the first thing under checkpoints/) comes last."""
    train, optim = config.train, config.optim
    strategy = make_strategy(train.parallel, fsdp=train.fsdp)
    try:
        strategy.check_batch_size(config.data.batch_size, optim.grad_accum_steps)
    except ValueError as err:
        raise PretrainError(str(err)) from err
    data = _prepare_data(config, run, start, stop, say, data_cache)
    checkpointer = Checkpointer(run.checkpoints, keep_last=train.keep_checkpoints,
                                keep_best=1, quarantine=run.corrupt_checkpoints)
    try:
        model = initialise_model(config, data.vocab_size, data.pad_id)
        training = assemble(model, optim, strategy, steps=train.steps, seed=train.seed,
                            prng_impl=train.prng_impl, objective=objective(config))
        del model
        stop.poll()
        n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(training.state.params))
        state, start_step = _restore(checkpointer, training.state, data, start.resume, say)
        stop.poll()
        stop.step = start_step
    except BaseException:
        checkpointer.close()
        raise
    if start_step >= train.steps:
        say(f"run already finished ({start_step} of {train.steps} steps): nothing to train")
    else:
        say(f"pretrain: {_what(config)} ({n_params / 1e6:.2f}M params, vocab "
            f"{data.vocab_size}), batch {config.data.batch_size} x seq {config.data.seq_len}, "
            f"{train.steps} steps, {jax.device_count()} device(s) x {jax.process_count()} "
            f"process(es), {f'resuming at step {start_step}' if start_step else 'from scratch'}")
        say(data.packing_note)
        say(f"baseline: always predicting the most frequent held-out target "
            f"{data.baseline_token!r} scores MLM accuracy {data.baseline_accuracy:.4f}")
    job = _Job(config=config, strategy=strategy, data=data, checkpointer=checkpointer,
               train_step=training.train_step, eval_step=training.eval_step,
               start_step=start_step, say=say)
    return job, strategy.place_state(state)


def _what(config: rc.RunConfig) -> str:
    """The model a run trains, in words: its preset, and its family and objective unless BERT's."""
    if config.next_sentence and config.model_type == "bert":
        return config.model.preset
    return f"{config.model.preset} {config.model_type} {config.model_class}"


def objective(config: rc.RunConfig) -> Objective:
    """What the run's train step optimises: masked LM + NSP with the run's weights, masked LM
    alone, or ELECTRA's generator and discriminator (`train.objective`)."""
    if config.next_sentence:
        return pretraining(config.train.mlm_loss_weight, config.train.nsp_loss_weight)
    if config.electra:
        return electra(config.train.rtd_loss_weight)
    return MASKED_LM


def initialise_model(config: rc.RunConfig, vocab_size: int, pad_token_id: int = 0
                     ) -> BertForPreTraining | BertForMaskedLM | ElectraPair:
    """The run's model at step 0 (`config.model_class`: with the NSP head, the masked LM alone,
    or ELECTRA's discriminator with its generator): BERT's initialisation from `train.seed`,
    then the local-attention heads (the discriminator's) where the configuration (resolved for
    its preset) asks for them. `vocab_size` and `pad_token_id` are the run's tokenizer's."""
    bert_config = config.bert_config(vocab_size, pad_token_id)
    rngs = nnx.Rngs(config.train.seed)
    model: BertForPreTraining | BertForMaskedLM | ElectraPair
    if config.electra:
        model = ElectraPair(bert_config, rc.generator_config(config, bert_config), rngs=rngs)
    else:
        model = MODEL_CLASSES[config.model_class](bert_config, rngs=rngs)  # type: ignore[assignment]
    if config.model.local_layers:
        local_attention_init(model, layers=min(config.model.local_layers,
                                               bert_config.num_hidden_layers))
    return model


def _prepare_data(config: rc.RunConfig, run: RunDir, start: RunStart, stop: StopRequest,
                  say: Callable[[str], None], cache: Path | None) -> PretrainData:
    """The run's data, then its run_config.json: a run's configuration is saved only once its
    data is ready, and data made for a run that fails here is removed again, so a corpus that
    cannot be used leaves nothing that blocks a retry."""
    main = jax.process_index() == 0
    if start.rebuild_data:
        say(f"preparing the data: a {config.data.vocab_size}-piece vocabulary and shards of "
            f"{config.data.corpus!r} in {run}")
        problem = unusable(cache) if cache is not None and main else None
        if problem is not None:
            say(f"warning: {problem}")
            cache = None
        if main and start.restart:
            with stop.entering(SAVING):  # the stale configuration first: it describes the old data
                discard_unstarted(run)
    try:
        data = open_data(config, run, rebuild=start.rebuild_data, poll=stop.poll, cache=cache)
    except BaseException:  # a stop too: files only, written aside and renamed
        if main and start.rebuild_data:
            with stop.entering(SAVING):
                discard_unstarted(run)
                if start.new_dir:
                    with contextlib.suppress(OSError):
                        run.root.rmdir()  # made by this job, and empty again
        raise
    if data.cached_from is not None:
        say(f"  copied from the data cache {data.cached_from} (made by an earlier run with the "
            "same data options)")
    if start.write_config and main:
        write_json_atomic(run.config, config.to_dict())
    stop.poll()
    return data


def _restore(checkpointer: Checkpointer, state: TrainState, data: PretrainData, resume: bool,
             say: Callable[[str], None]) -> tuple[TrainState, int]:
    """The newest good checkpoint's state and step (and the data iterator moved to it), or the
    fresh `state` at step 0."""
    with warnings.catch_warnings(record=True) as damaged:  # said below, once each
        warnings.simplefilter("always")
        try:
            restored = checkpointer.restore(state) if resume else None
        except RuntimeError as err:  # every step damaged
            raise PretrainError(f"cannot resume: {err}; start the run afresh in another "
                                "--output-dir (the damaged steps stay here for inspection)"
                                ) from None
    for warning in damaged:
        say(f"warning: {warning.message}")
    if restored is None:
        if resume:
            say(f"no usable checkpoint in {checkpointer.directory}; starting from step 0")
        return state, 0
    data.train.set_state(restored.data_states[jax.process_index()])
    return restored.state, restored.step


def _run_loop(job: _Job, state: TrainState, run: RunDir, start: RunStart, stop: StopRequest, *,
              progress: bool, started: float, time_limit_s: float | None,
              on_step: Callable[[int, dict[str, float]], None] | None
              ) -> tuple[_LoopEnd, TrainClock]:
    """The loop with its metrics log, clock, schedule and prefetching, closed after."""
    config, is_main = job.config, jax.process_index() == 0
    with _before_first_step(stop):  # its imports (TensorBoard's) take seconds
        writer = MetricsWriter(run.metrics, tensorboard_dir=run.tensorboard, enabled=is_main,
                               resume_step=job.start_step if start.resume or start.restart
                               else None)
    pending = PendingMetrics(job.strategy.host_metrics, writer, on_step=on_step,
                             advice=lambda: nan_advice(job.checkpointer.steps()))
    clock = TrainClock(total=config.train.steps, start=job.start_step,
                       tokens_per_step=config.data.batch_size * config.data.seq_len,
                       progress=progress and is_main, desc="pretrain")
    train = config.train
    schedule = StepSchedule(total=train.steps, log_every=train.log_every,
                            eval_every=train.eval_every, checkpoint_every=train.checkpoint_every,
                            start=job.start_step, started=started, time_limit_s=time_limit_s,
                            processes=jax.process_count())
    # batches are made and put on the devices one step ahead, in a background thread
    batches = Prefetch(job.data.batches_with_state(),
                       lambda b: (job.strategy.shard_batch(b[0]), b[1]))
    try:
        return _train(job, state, batches, schedule, pending, clock, writer, stop), clock
    finally:
        batches.close()
        clock.close()
        writer.close()


@contextlib.contextmanager
def _before_first_step(stop: StopRequest) -> Iterator[None]:
    """Inside the block there is nothing to save yet (no step has run): the caller may end the
    process at once on Ctrl-C. A multi-host run is never ended so (a process leaving on its own
    would stall the others in their collectives): it stops at the end of its first step."""
    if jax.process_count() > 1:
        yield
        return
    with stop.entering(NOTHING_TO_SAVE):
        yield


@dataclasses.dataclass
class _LoopEnd:
    step: int
    stopped: str | None  # why the loop stopped before the last step
    last_eval: dict[str, float]  # the newest evaluation ({} if none ran)
    interrupted: bool = False  # by Ctrl-C (with a checkpoint at `step`)


def _train(job: _Job, state: TrainState, batches: Prefetch, schedule: StepSchedule,
           pending: PendingMetrics, clock: TrainClock, writer: MetricsWriter,
           stop: StopRequest) -> _LoopEnd:
    """Train from `job.start_step` to the last step or a stop, following `schedule`."""
    step, last_eval = job.start_step, {}
    while step < schedule.total:
        batch, data_state = next(batches)
        if step == job.start_step:  # it compiles first: Ctrl-C may end the process at once
            with _before_first_step(stop):
                state, metrics = job.train_step(state, batch)
        else:
            state, metrics = job.train_step(state, batch)
        step += 1
        stop.trained(step)
        pending.add(step, metrics)
        due = schedule.due(step, stop.requested)
        if due.log:
            flush_and_tick(pending, clock, writer, step)  # metrics come to the host only here
        if due.eval:
            last_eval = _evaluate(job, state.params, step, writer)
        if due.checkpoint:
            with stop.entering(SAVING):  # a second Ctrl-C waits for the checkpoint
                writer.flush()  # first: a checkpoint on disk has its steps' records on disk
                job.checkpointer.save(
                    step, job.strategy.host_state(state),
                    extra={"data_states": allgather_json(data_state)},
                    config=job.config.to_dict(),
                    eval_loss=_eval_loss(job.config, last_eval) if due.eval else None)
        if due.eval or due.checkpoint:
            clock.resume()  # evaluation and checkpoints are not training time
        if due.stop:
            if due.interrupted:
                stopped = f"interrupted (Ctrl-C) at step {step}"
            else:
                stopped = f"time limit of {schedule.time_limit_s:.0f}s reached at step {step}"
                job.say(stopped)
            pending.flush()
            return _LoopEnd(step, stopped, last_eval, interrupted=due.interrupted)
    pending.flush()
    return _LoopEnd(step, None, last_eval)


def _evaluate(job: _Job, params: nnx.State, step: int, writer: MetricsWriter) -> dict[str, float]:
    """Held-out means (and the baseline comparison), logged and printed."""
    data = job.data
    out = _held_out_means(job, params, data.eval_batches)
    out.update(baseline_accuracy=data.baseline_accuracy,
               accuracy_ratio=accuracy_ratio(out["mlm_accuracy"], data.baseline_accuracy))
    # the run masks at another rate than the held-out 15%: that rate too, at the last step only
    # (a diagnostic; the curves follow the 15% evaluation, and each pass costs one more)
    if data.own_rate_batches and step == job.config.train.steps:
        own = _held_out_means(job, params, data.own_rate_batches)
        out.update(own_rate_mlm_accuracy=own["mlm_accuracy"], own_rate_mlm_loss=own["mlm_loss"])
    writer.log("eval", step, out, flush=True)
    job.say(_eval_line(step, out))
    return out


def _held_out_means(job: _Job, params: nnx.State, batches: list) -> dict[str, float]:
    strategy = job.strategy
    sums = [strategy.host_metrics(job.eval_step(params, strategy.shard_batch(b))) for b in batches]
    total = {k: sum(s[k] for s in sums) for k in sums[0]}
    means = electra_means(total) if job.config.electra else pretraining_means(total)
    return {k: float(v) for k, v in means.items()}


def _eval_loss(config: rc.RunConfig, held_out: dict[str, float]) -> float:
    """The held-out loss the best checkpoint is chosen by: the MLM loss, or for ELECTRA the
    loss it trains (the generator's MLM loss plus lambda times the discriminator's)."""
    if config.electra:
        return held_out["mlm_loss"] + config.train.rtd_loss_weight * held_out["rtd_loss"]
    return held_out["mlm_loss"]


def nan_advice(good: list[int]) -> str:
    """What to do after a NaN/Inf stop, given the checkpoints kept (`good`): a resume repeats the
    same steps exactly, so the fix is other options, in a new run."""
    fix = "lower optim.learning_rate or raise optim.warmup_steps"
    if not good:
        return (f"No checkpoint was saved before it, so there is nothing to resume: {fix} and "
                "run the command again (a run without a checkpoint starts afresh in the same "
                "--output-dir)")
    return (f"The last good checkpoint is step {good[-1]} (kept); resuming would repeat the same "
            f"steps exactly, so {fix} and start a new run (another --output-dir)")


def _eval_line(step: int, e: dict[str, float]) -> str:
    return (f"step {step}: eval MLM loss {e['mlm_loss']:.4f}, MLM accuracy {e['mlm_accuracy']:.4f} "
            f"(baseline {e['baseline_accuracy']:.4f}, x{e['accuracy_ratio']:.2f}), perplexity "
            f"{e['perplexity']:.1f}"
            + (f", NSP accuracy {e['nsp_accuracy']:.4f}" if "nsp_accuracy" in e else "")
            + (f"; replaced-token accuracy {e['rtd_accuracy']:.4f}, precision "
               f"{e['rtd_precision']:.4f}, recall {e['rtd_recall']:.4f}" if "rtd_accuracy" in e
               else "")
            + (f"; at the run's own masking rate MLM accuracy {e['own_rate_mlm_accuracy']:.4f}"
               if "own_rate_mlm_accuracy" in e else ""))
