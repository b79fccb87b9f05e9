"""`bertjax pretrain`: pre-train BERT (MLM + NSP) with evaluation, checkpoints and exact resume.

With no arguments it pre-trains the `mini` preset on the bundled Shakespeare corpus in about
6 minutes on 2 CPU cores (under 10 on a slower machine), writing everything under runs/pretrain.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Any

from bertjax.cli.argtypes import non_negative_int, positive_float, positive_int
from bertjax.cli.errors import EXIT_INTERRUPTED, CommandError
from bertjax.jobs.interrupt import CtrlC, PretrainInterrupted, exit_now
from bertjax.runs import config as rc
from bertjax.runs.layout import RunDir, describe

DEFAULT_OUTPUT_DIR = "runs/pretrain"

EPILOG = f"""\
configuration:
  Options are read from defaults, then --config FILE (TOML, JSON or YAML with [model], [data],
  [optim], [train] tables), then --SECTION.FIELD=VALUE overrides, e.g.
      bertjax pretrain --model.preset=tiny --optim.learning_rate=1e-3 --train.steps=500
  --resume continues the newest good checkpoint in --output-dir. With no config file and no
  overrides it reuses the saved configuration; otherwise the requested configuration must equal
  the saved one, and every differing field is named.

outputs (in --output-dir):
{describe("  ")}

--output-dir must be new, empty or a run directory (nothing but the outputs below). A run that
  stopped before its first checkpoint has not started: it may be started again with other options.
  --resume of a finished run changes nothing and prints its summary.

Ctrl-C stops at the end of the current step with a checkpoint and prints the command that resumes
  it; a second Ctrl-C stops at once (after a checkpoint being written).

exit status: 0 done, 1 NaN/Inf loss (last good checkpoint kept), 2 bad options or run directory,
  130 interrupted (Ctrl-C).

multi-host: start one process per host with the same --coordinator-address and --num-processes
  and its own --process-id (or BERTJAX_COORDINATOR_ADDRESS, BERTJAX_NUM_PROCESSES,
  BERTJAX_PROCESS_ID); each process reads its own shard of the data.
"""


def _help(option: rc.Option) -> str:
    choices = f"; one of {', '.join(option.choices)}" if option.choices else ""
    text = f"{option.help}{choices} (default: {option.default!r})"
    return text.replace("%", "%%")  # argparse %-formats help: "15%" must reach it as "15%%"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.allow_abbrev = False  # --optim.learning must not silently mean --optim.learning_rate
    parser.add_argument("--config", metavar="FILE", default=None,
                        help="TOML/JSON/YAML file of options (sections model, data, optim, train)")
    parser.add_argument("--output-dir", metavar="DIR", default=DEFAULT_OUTPUT_DIR,
                        help=f"run directory (default: {DEFAULT_OUTPUT_DIR})")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --output-dir from its newest good checkpoint")
    parser.add_argument("--time-limit", metavar="MINUTES", type=positive_float, default=None,
                        help="stop cleanly (evaluate + checkpoint) after this much wall time; "
                             "the run can be continued with --resume")
    parser.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    parser.add_argument("--print-config", action="store_true",
                        help="print the resolved configuration as TOML and exit")
    group = parser.add_argument_group("multi-host (jax.distributed)")
    group.add_argument("--coordinator-address", metavar="HOST:PORT",
                       default=os.environ.get("BERTJAX_COORDINATOR_ADDRESS"),
                       help="address of process 0's coordinator (env BERTJAX_COORDINATOR_ADDRESS)")
    group.add_argument("--num-processes", type=positive_int, default=None,
                       help="total processes (env BERTJAX_NUM_PROCESSES)")
    group.add_argument("--process-id", type=non_negative_int, default=None,
                       help="this process's index, 0-based (env BERTJAX_PROCESS_ID)")

    for section, klass in rc.SECTIONS.items():
        group = parser.add_argument_group(
            f"[{section}] options", (klass.__doc__ or "").strip().splitlines()[0]
        )
        for option in rc.options():
            if option.name.startswith(section + "."):
                group.add_argument(
                    f"--{option.name}", dest=option.name, metavar=option.type.__name__.upper(),
                    default=None, help=_help(option),
                )


def explain_unknown(arguments: list[str]) -> str:
    """The error for options `bertjax pretrain` does not know: the closest valid names."""
    for argument in arguments:
        if argument.startswith("--"):
            error = rc.unknown_option(argument[2:].split("=", 1)[0], "command line")
            return f"{error} (and --config, --output-dir, --resume, ...; see --help)"
    return f"unrecognized arguments: {' '.join(arguments)}"


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


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    return {
        name: getattr(args, name)
        for name in rc.option_names()
        if getattr(args, name, None) is not None
    }


def resolve_config(args: argparse.Namespace) -> rc.RunConfig:
    """Defaults <- --config <- overrides; on a bare --resume, the run's saved configuration."""
    overrides = overrides_from_args(args)
    if args.resume and args.config is None and not overrides:
        run = RunDir(args.output_dir)
        saved, source = run.saved_config(), str(run.config)
        if saved is None and run.checkpoints.is_dir():  # deleted: the newest checkpoint's copy
            from bertjax.jobs.pretrain.start import checkpoint_config
            from bertjax.train.saved import finished_steps

            steps = finished_steps(run.checkpoints)
            saved = checkpoint_config(run, steps) if steps else None
            source = f"{run.checkpoints} step {steps[-1]}" if steps else source
        if saved is not None:
            return rc.RunConfig.from_dict(saved, source=source)
    return rc.load(args.config, overrides)


def run(args: argparse.Namespace) -> int:
    config = resolve_config(args)  # a bad option or --config file: ValueError, one line
    if args.print_config:
        print(rc.to_toml(config), end="")
        return 0
    # Ctrl-C is handled from here on, before JAX is imported (see CtrlC)
    with CtrlC() as ctrl_c:
        try:
            return _pretrain(args, config, ctrl_c)
        except PretrainInterrupted as err:  # Ctrl-C in the job: one line saying how to resume
            print(f"bertjax pretrain: {err}", file=sys.stderr)
            if err.abandoned:  # the first step still compiles in a thread: end here, at once
                exit_now(EXIT_INTERRUPTED)
        except KeyboardInterrupt:  # before the job began: nothing was written
            run = RunDir(args.output_dir)
            again = (f"resume with: bertjax pretrain --resume --output-dir {shlex.quote(str(run))}"
                     if run.config.is_file() or run.checkpoints.is_dir() else
                     "start it again with the same command")
            print(f"bertjax pretrain: interrupted (Ctrl-C) before the run began; nothing was "
                  f"written; {again}", file=sys.stderr)
    return EXIT_INTERRUPTED


def _pretrain(args: argparse.Namespace, config: rc.RunConfig, ctrl_c: CtrlC) -> int:
    _start_processes(args)
    from bertjax.jobs.pretrain.job import NonFiniteLossError, PretrainError, pretrain

    ctrl_c.poll()  # a Ctrl-C during the imports that was not raised
    try:
        result = pretrain(
            config, args.output_dir, resume=args.resume, progress=not args.no_progress,
            time_limit_s=None if args.time_limit is None else 60.0 * args.time_limit,
            ctrl_c=ctrl_c,
        )
    except NonFiniteLossError as err:
        print(f"bertjax pretrain: {err}", file=sys.stderr)
        return 1
    except PretrainError as err:
        raise CommandError(str(err)) from err
    if result.already_finished:
        print(f"the run in {result.run_dir} had already finished ({result.steps} steps); nothing "
              "was trained or written. Its summary:")
    ev = result.eval
    print(
        f"done: {result.steps} steps in {result.wall_time_s:.0f}s "
        f"({result.tokens_per_s:,.0f} tokens/s); held-out MLM accuracy "
        f"{ev.get('mlm_accuracy', float('nan')):.4f} = x{result.accuracy_ratio:.2f} the "
        f"most-frequent-token baseline {result.baseline_accuracy:.4f} "
        f"({result.baseline_token!r}); perplexity {ev.get('perplexity', float('nan')):.1f}; "
        f"NSP accuracy {ev.get('nsp_accuracy', float('nan')):.4f}; outputs in {result.run_dir}"
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

        initialize(address, processes, process_id)
