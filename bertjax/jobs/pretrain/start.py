"""The run directory's states for `bertjax pretrain`: whether a job may start, start afresh or
resume in a directory (`check_run_dir`, which only reads), what a run that never reached a
checkpoint leaves to remove, and what an interrupted run says. The job itself is
`bertjax.jobs.pretrain.job`.
"""

from __future__ import annotations

import dataclasses
import shlex
import shutil

import jax

from bertjax.common.files import check_creatable, listing, write_json_atomic
from bertjax.common.input_overlap import check_not_an_input
from bertjax.data.corpus import corpus_paths
from bertjax.errors import InputError
from bertjax.jobs.pretrain.data_cache import CACHE_OPTIONS
from bertjax.jobs.stop import Interrupted, StopRequest
from bertjax.runs import config as rc
from bertjax.runs.layout import RunDir, Survey
from bertjax.train.saved import finished_steps, read_config


class PretrainError(InputError):
    """A run that cannot start or continue in its directory, with a message meant for the user."""


def resume_command(run: RunDir) -> str:
    """The command that continues the run in `run`."""
    return f"bertjax pretrain --resume --output-dir {shlex.quote(str(run))}"


@dataclasses.dataclass(frozen=True)
class RunStart:
    """How a job starts in its run directory (`check_run_dir`), and with which configuration."""

    config: rc.RunConfig  # the one asked for, or a bare resume's: the run's own
    resume: bool  # continue from the newest checkpoint
    rebuild_data: bool  # make the vocabulary and shards anew (after discarding stale ones)
    restart: bool  # a run that never reached a checkpoint starts again: its logs are cut back
    write_config: bool  # save run_config.json once the data is ready
    new_dir: bool = False  # --output-dir does not exist yet
    notes: tuple[str, ...] = ()


def check_run_dir(run: RunDir, config: rc.RunConfig | None, resume: bool) -> RunStart:
    """How the job starts in `run`, or a PretrainError (ValueError for a damaged
    run_config.json) saying why it cannot; reads only, writes nothing. `config` None resumes
    with the run's own configuration (run_config.json, or where it was deleted the newest
    checkpoint's copy). Never a directory that is, lies in or holds the corpus (an InputError:
    `bertjax.common.input_overlap`)."""
    if config is not None:  # an output onto an input is said first, whatever else is wrong
        _check_not_the_corpus(run, config)
    if run.root.exists() and not run.root.is_dir():
        raise PretrainError(f"--output-dir {run} is a file, not a directory; choose another "
                            "--output-dir")
    survey = run.survey(finished_steps(run.checkpoints))
    if survey.saved is None and survey.steps:  # run_config.json deleted: the checkpoint's copy
        survey = dataclasses.replace(survey, saved=checkpoint_config(run, survey.steps))
    if config is None:
        if not resume:
            raise InputError("pretrain(None, ...) resumes a run with its own configuration: pass "
                             "resume=True, or the RunConfig of a new run")
        config = _saved_run_config(run, survey)
        _check_not_the_corpus(run, config)
    if resume:
        return _check_resume(run, config, survey)
    if survey.started:
        raise PretrainError(
            f"{run} already holds a run (checkpoint steps {survey.steps}); pass --resume to "
            "continue it, or choose another --output-dir")
    if survey.foreign:
        raise PretrainError(
            f"--output-dir {run} holds files that a bertjax run does not write "
            f"({listing(survey.foreign)}); choose another --output-dir (a new or empty "
            "directory), or move those files out")
    if survey.saved is None:
        if survey.run_files:
            raise PretrainError(
                f"--output-dir {run} holds {listing(survey.run_files)} but no run_config.json, so "
                "it is no run this command made or can continue; remove them or choose another "
                "--output-dir")
        check_creatable(run.root, "--output-dir")
        return RunStart(config, resume=False, rebuild_data=True, restart=False,
                        write_config=True, new_dir=not survey.exists)
    # a configuration but no checkpoint: set up, never trained (stopped or failed before its
    # first checkpoint); it starts again, with the options given now
    diffs = rc.differences(survey.saved, config)
    stale = any(d.split(":")[0] in CACHE_OPTIONS for d in diffs)
    note = (f"{run} holds a run that never reached its first checkpoint: starting it afresh"
            + (f" with the options given now ({len(diffs)} differ from its saved ones)"
               if diffs else "")
            + ("; its vocabulary and shards are made anew" if stale else ""))
    return RunStart(config, resume=False, rebuild_data=stale, restart=True, write_config=True,
                    notes=(note,))


def _check_not_the_corpus(run: RunDir, config: rc.RunConfig) -> None:
    check_not_an_input(run.root, "--output-dir", {"data.corpus": corpus_paths(config.data.corpus)})


def _no_run_to_resume(run: RunDir, survey: Survey) -> PretrainError:
    what = ("does not exist" if not survey.exists
            else "holds no run (no run_config.json, no checkpoint)")
    return PretrainError(
        f"cannot resume: --output-dir {run} {what}, so there is no run to resume; to start "
        f"one, leave out --resume: bertjax pretrain --output-dir {shlex.quote(str(run))} "
        "[options]")


def _saved_run_config(run: RunDir, survey: Survey) -> rc.RunConfig:
    """The configuration a bare resume continues with: the one the run saved."""
    if survey.saved is None:
        raise _no_run_to_resume(run, survey)
    source = str(run.config) if run.config.is_file() else f"{run.checkpoints} step {survey.steps[-1]}"
    return rc.RunConfig.from_dict(survey.saved, source=source)


def resume_config(run: RunDir) -> rc.RunConfig | None:
    """The configuration a bare `--resume` of `run` continues with (None if it has none)."""
    saved = run.saved_config()
    if saved is None and run.checkpoints.is_dir() and (steps := finished_steps(run.checkpoints)):
        saved = checkpoint_config(run, steps)
    return None if saved is None else rc.RunConfig.from_dict(saved, source=str(run))


def _check_resume(run: RunDir, config: rc.RunConfig, survey: Survey) -> RunStart:
    if survey.saved is None and not survey.steps:
        raise _no_run_to_resume(run, survey)
    diffs = rc.differences(survey.saved, config) if survey.saved is not None else []
    if diffs:
        fresh = (" (it has no checkpoint yet, so without --resume it starts afresh with these "
                 "options)" if not survey.steps else "")
        raise PretrainError(
            f"cannot resume {run}: the requested configuration differs from the saved one in "
            f"{len(diffs)} field(s): {'; '.join(diffs)}; resume with the same options (or only "
            f"--resume), or use another --output-dir{fresh}")
    return RunStart(config, resume=True, rebuild_data=False, restart=False,
                    write_config=not run.config.exists())  # deleted: the checkpoint's copy


def checkpoint_config(run: RunDir, steps: list[int]) -> dict | None:
    """The run configuration the newest of `steps` keeps a copy of (completed for options added
    since), or None if it keeps none: what a run whose run_config.json was deleted resumes with."""
    saved = read_config(run.checkpoints, steps[-1])
    return None if saved is None else rc.complete_saved(saved)


def discard_unstarted(run: RunDir) -> None:
    """Remove what a run that never reached a checkpoint wrote (its configuration, data and
    logs): the run starts afresh, or the set-up that made them failed."""
    for path in (run.config, run.tokenizer, run.vocab, run.metrics, run.curves, run.summary):
        path.unlink(missing_ok=True)
    for path in (run.data_root, run.tensorboard):
        if path.is_dir():
            shutil.rmtree(path)


def interrupted_error(run: RunDir, config: rc.RunConfig, stop: StopRequest) -> Interrupted:
    """A stop that ended the job at once (in its set-up, before its first step had run, or a
    second Ctrl-C): the run keeps its configuration (so --resume works) and its checkpoints;
    the error says so."""
    if jax.process_index() == 0 and not run.config.exists():
        write_json_atomic(run.config, config.to_dict())  # options checked: --resume can use them
    steps = finished_steps(run.checkpoints)
    where = ("during set-up" if stop.step is None else
             "before the first step" if stop.step == 0 else f"at step {stop.step}")
    if not steps:
        saved = "no checkpoint was written"
    elif stop.step is not None and steps[-1] < stop.step:
        saved = f"the newest checkpoint is step {steps[-1]} (later steps are trained again)"
    else:
        saved = f"the newest checkpoint is step {steps[-1]}"
    twice = " twice" if stop.count > 1 and stop.step is not None else ""
    return Interrupted(
        f"interrupted (Ctrl-C{twice}) {where}; {saved}; resume with: {resume_command(run)}")
