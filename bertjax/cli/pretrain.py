"""`bertjax pretrain`: pre-train BERT (MLM + NSP) with evaluation, checkpoints and exact resume;
`--train.objective mlm` pre-trains a masked LM alone (RoBERTa's recipe, any
`--model.model-type`); `--model.model-type modernbert` takes ModernBERT's recipe for the options
left out (`bertjax.runs.recipes`).

With no arguments it pre-trains the `mini` preset on the bundled Shakespeare corpus (its time on
2 CPU cores is in the README), writing everything under runs/pretrain.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import textwrap

from bertjax.cli.argtypes import non_negative_int, positive_float, positive_int
from bertjax.cli.errors import CommandError
from bertjax.cli.interrupts import EXIT_INTERRUPTED, ctrl_c_stops
from bertjax.cli.options import add_settings_arguments, print_config, settings_from_args
from bertjax.common.caches import user_cache_directory
from bertjax.common.options import load_file, options
from bertjax.jobs.stop import NOTHING_TO_SAVE, Interrupted, StopRequest
from bertjax.runs import config as rc
from bertjax.runs.layout import RunDir, describe
from bertjax.runs.recipes import (
    RECIPE_OPTIONS,
    asked_recipe,
    recipe_comment,
    recipe_lines,
    recipe_notes,
)

DEFAULT_OUTPUT_DIR = "runs/pretrain"
DATA_CACHE = "BERTJAX_DATA_CACHE"  # where runs keep their prepared data (jobs.pretrain.data_cache)


def _recipes(indent: str) -> str:
    """The epilog's lines on each recipe (`bertjax.runs.recipes`)."""
    return "\n".join(textwrap.fill(line, width=96, initial_indent=indent,
                                   subsequent_indent=indent + "  ") for line in recipe_lines())


EPILOG = f"""\
configuration:
  Options are read from defaults, then --config FILE (TOML, JSON or YAML with [model], [data],
  [optim], [train] tables), then --SECTION.FIELD VALUE options, e.g.
      bertjax pretrain --model.preset tiny --optim.learning-rate 1e-3 --train.steps 500
  --resume continues the newest good checkpoint in --output-dir. With no config file and no
  overrides it reuses the saved configuration; otherwise the requested configuration must equal
  the saved one, and every differing field is named.

recipes: a family or an objective with a pre-training recipe of its own takes it for every
  option not given (on the command line or in --config); --print-config shows the result:
{_recipes("  ")}

outputs (in --output-dir):
{describe("  ")}

--output-dir must be new, empty or a run directory (nothing but the outputs below). A run that
  stopped before its first checkpoint has not started: it may be started again with other options.
  --resume of a finished run changes nothing and prints its summary.

data cache: the vocabulary and shards a run makes are kept in $BERTJAX_DATA_CACHE (else
  $XDG_CACHE_HOME/bertjax/data, ~/.cache/bertjax/data; at most 256 MiB a corpus), and a later run
  with the same data options copies them instead; BERTJAX_DATA_CACHE=0 turns it off.

Ctrl-C stops at the end of the current step with a checkpoint and prints the command that resumes
  it; a second Ctrl-C stops at once (after a checkpoint being written).

exit status: 0 done, 1 NaN/Inf loss (last good checkpoint kept), 2 bad options or run directory,
  130 interrupted (Ctrl-C).

multi-host: start one process per host with the same --coordinator-address and --num-processes
  and its own --process-id (or BERTJAX_COORDINATOR_ADDRESS, BERTJAX_NUM_PROCESSES,
  BERTJAX_PROCESS_ID); each process reads its own shard of the data.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument("--output-dir", metavar="DIR", default=DEFAULT_OUTPUT_DIR,
                        help=f"run directory (default: {DEFAULT_OUTPUT_DIR})")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --output-dir from its newest good checkpoint")
    parser.add_argument("--time-limit", metavar="MINUTES", type=positive_float, default=None,
                        help="stop cleanly (evaluate + checkpoint) after this much wall time; "
                             "the run can be continued with --resume")
    parser.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    group = parser.add_argument_group("multi-host (jax.distributed)")
    group.add_argument("--coordinator-address", metavar="HOST:PORT",
                       default=os.environ.get("BERTJAX_COORDINATOR_ADDRESS"),
                       help="address of process 0's coordinator (env BERTJAX_COORDINATOR_ADDRESS)")
    group.add_argument("--num-processes", type=positive_int, default=None,
                       help="total processes (env BERTJAX_NUM_PROCESSES)")
    group.add_argument("--process-id", type=non_negative_int, default=None,
                       help="this process's index, 0-based (env BERTJAX_PROCESS_ID)")
    add_settings_arguments(parser, rc.RunConfig, notes=recipe_notes())


def _env_int(name: str, option: str) -> int | None:
    """The integer in environment variable `name` (the default of `option`), if set."""
    value = os.environ.get(name, "")
    if value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < (1 if option == "--num-processes" else 0):
        raise CommandError(f"{name}={value!r} (the default of {option}) is not a valid "
                           f"{option[2:].replace('-', ' ')}; fix or unset it, or pass {option}")
    return number


def requested_config(args: argparse.Namespace) -> rc.RunConfig | None:
    """Defaults (the recipe of the family asked for: `rc.recipe`) <- --config <- options; None
    for a bare --resume (no --config, no option), which continues with the run's own
    configuration (the job reads it: `jobs.pretrain.start`)."""
    given = args.config is not None or any(hasattr(args, o.name) for o in options(rc.RunConfig))
    if args.resume and not given:
        return None
    in_file = load_file(args.config, rc.RunConfig) if args.config is not None else {}
    named = {name: getattr(args, name, None) for name in RECIPE_OPTIONS}
    return settings_from_args(args, rc.RunConfig, base=rc.recipe(*asked_recipe(in_file, named)))


def _printed_config(args: argparse.Namespace, config: rc.RunConfig | None) -> rc.RunConfig:
    """What --print-config shows: the configuration asked for, a bare --resume's (the run's own,
    where it has one) or the defaults."""
    if config is not None:
        return config
    from bertjax.jobs.pretrain.start import resume_config

    return resume_config(RunDir(args.output_dir)) or rc.RunConfig()


def run(args: argparse.Namespace) -> int:
    config = requested_config(args)  # a bad option or --config file: one line
    if args.print_config:
        printed = _printed_config(args, config)
        print(recipe_comment(printed.model_type, printed.train.objective)
              + print_config(printed), end="")
        return 0
    # Ctrl-C goes to the job's StopRequest from here on, before JAX is imported: until the job
    # starts nothing is written, so it ends the process at once
    stop = StopRequest(NOTHING_TO_SAVE, message=lambda: _before_the_run(args.output_dir))
    with ctrl_c_stops(stop, "pretrain"):
        try:
            return _pretrain(args, config, stop)
        except Interrupted as err:  # stopped at a safe point: how to resume
            print(f"bertjax pretrain: {err}", file=sys.stderr)
        except KeyboardInterrupt:  # without the watcher (not POSIX), before the job began
            print(f"bertjax pretrain: {_before_the_run(args.output_dir)}", file=sys.stderr)
    return EXIT_INTERRUPTED


def _before_the_run(output_dir: str) -> str:
    run = RunDir(output_dir)
    again = (f"resume with: bertjax pretrain --resume --output-dir {shlex.quote(str(run))}"
             if run.config.is_file() or run.checkpoints.is_dir() else
             "start it again with the same command")
    return f"interrupted (Ctrl-C) before the run began; nothing was written; {again}"


def _pretrain(args: argparse.Namespace, config: rc.RunConfig | None, stop: StopRequest) -> int:
    _start_processes(args)
    from bertjax.jobs.pretrain.job import NonFiniteLossError, pretrain

    run = RunDir(args.output_dir)
    absent = [p for p in (run.config, run.summary, run.curves) if not p.exists()]
    try:
        result = pretrain(
            config, args.output_dir, resume=args.resume, progress=not args.no_progress,
            time_limit_s=None if args.time_limit is None else 60.0 * args.time_limit,
            stop=stop, data_cache=user_cache_directory(DATA_CACHE, "data"),
        )
    except NonFiniteLossError as err:
        print(f"bertjax pretrain: {err}", file=sys.stderr)
        return 1
    if result.already_finished:
        restored = [p.name for p in absent if p.exists()]  # put back from the run's own records
        print(f"the run in {result.run_dir} had already finished ({result.steps} steps); nothing "
              + (f"was trained; wrote back {', '.join(restored)}, which "
                 f"{'was' if len(restored) == 1 else 'were'} missing" if restored
                 else "was trained or written") + ". Its summary:")
    ev = result.eval
    print(
        f"done: {result.steps} steps in {result.wall_time_s:.0f}s "
        f"({result.tokens_per_s:,.0f} tokens/s); held-out MLM accuracy "
        f"{ev.get('mlm_accuracy', float('nan')):.4f} = x{result.accuracy_ratio:.2f} the "
        f"most-frequent-token baseline {result.baseline_accuracy:.4f} "
        f"({result.baseline_token!r}); perplexity {ev.get('perplexity', float('nan')):.1f}; "
        + (f"NSP accuracy {ev['nsp_accuracy']:.4f}; " if "nsp_accuracy" in ev else "")
        + (f"replaced-token accuracy {ev['rtd_accuracy']:.4f} (precision "
           f"{ev['rtd_precision']:.4f}, recall {ev['rtd_recall']:.4f}); " if "rtd_accuracy" in ev
           else "")
        + f"outputs in {result.run_dir}"
    )
    return 0


def _start_processes(args: argparse.Namespace) -> None:
    """Join a multi-host run if its options (or environment variables) are given."""
    address = args.coordinator_address
    processes = (args.num_processes if args.num_processes is not None
                 else _env_int("BERTJAX_NUM_PROCESSES", "--num-processes"))
    process_id = (args.process_id if args.process_id is not None
                  else _env_int("BERTJAX_PROCESS_ID", "--process-id"))
    if address or processes or process_id is not None:
        missing = [name for name, v in (("--coordinator-address", address),
                                        ("--num-processes", processes),
                                        ("--process-id", process_id)) if v is None]
        if missing:
            raise CommandError(f"multi-host needs {', '.join(missing)} too (or the BERTJAX_ "
                               "environment variables); pass all three, or none")
        from bertjax.train.distributed import initialize

        assert processes is not None and process_id is not None  # none missing
        initialize(address, processes, process_id)
