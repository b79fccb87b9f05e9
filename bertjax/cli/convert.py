"""`bertjax convert` (also `bertjax export`): any model bertjax reads (a Hugging Face directory in
safetensors, `pytorch_model.bin` or transformers-v4 Flax msgpack, or a `bertjax pretrain` run) as
a Hugging Face directory of any BERT class (`--as`), which transformers and AutoTokenizer load.

OUT_DIR is checked before the model is loaded: it must be new, empty or an earlier export (which
is replaced); anything else is refused, naming what is there. The directory is written aside and
checked there before it is renamed into place: bertjax reloads it and must reproduce the model's
outputs on fixed inputs (a copy: within `COPY_TOLERANCE`), and, if transformers is installed, its
class of the same name loads it with no missing or unexpected weight and agrees within
`TRANSFORMERS_TOLERANCE`. A failed check, an error or Ctrl-C leaves no OUT_DIR (an earlier export
stays as it was) and nothing beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bertjax
from bertjax.cli.argtypes import non_negative_int
from bertjax.cli.errors import CommandError
from bertjax.cli.model_options import add_model_argument, load_model, run_command

# The classes `--as` offers: bertjax.heads.MODEL_CLASSES, named without importing JAX (the test
# checks the two agree).
CLASS_NAMES = ("BertModel", *bertjax.HEAD_CLASSES)

# The reloaded directory is a copy of the model: bertjax computing the same function of the same
# weights, so its outputs may differ by rounding at most.
COPY_TOLERANCE = 1e-6
# transformers' float32 BERT against bertjax in float32: two implementations of one function
# (DESIGN.md: transformers is itself ~5e-6 from float64 on some configs).
TRANSFORMERS_TOLERANCE = 1e-4
PROBE_SEED = 0  # the fixed inputs both checks run
PROBE_BATCH, PROBE_LENGTH, PROBE_CHOICES = 3, 16, 2
FIRST_ORDINARY_ID = 5  # probe ids are drawn from [5, vocabulary): past the usual special tokens

# What loading says about heads (bertjax.io.weights): a warning per freshly initialised head set,
# an INFO record on the "bertjax.io" logger per left-out head set.
_FRESH = re.compile(r"has no weights for (.+): freshly initialised \(seed \d+\)")
_LEFT_OUT = re.compile(r"left out the weights of (.+) \(\w+ has no such head\)")
_LOADED_STEP = re.compile(r"loaded step (\d+) instead")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    parser.add_argument("out", metavar="OUT_DIR",
                        help="directory to write (config.json, model.safetensors, tokenizer.json, "
                             "vocab.txt, tokenizer_config.json): new, empty, or an earlier export "
                             "(replaced)")
    parser.add_argument("--as", dest="as_class", choices=CLASS_NAMES, default=None,
                        metavar="CLASS",
                        help="the class to write (default: the class the checkpoint is; a run: "
                             "BertForPreTraining): heads it lacks are freshly initialised, heads "
                             f"it has no place for are left out; one of {', '.join(CLASS_NAMES)}")
    parser.add_argument("--seed", type=non_negative_int, default=0, metavar="N",
                        help="seed of the heads --as adds that the checkpoint has no weights for "
                             "(default 0)")


@dataclasses.dataclass
class LoadNotes:
    """What loading said about heads, and the warnings it gave."""

    fresh: list[str] = dataclasses.field(default_factory=list)
    left_out: list[str] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)


class _LeftOutHandler(logging.Handler):
    def __init__(self, notes: LoadNotes):
        super().__init__(logging.INFO)
        self.notes = notes

    def emit(self, record: logging.LogRecord) -> None:
        found = _LEFT_OUT.search(record.getMessage())
        if found:
            self.notes.left_out.extend(found[1].split(", "))


@contextlib.contextmanager
def noting_load() -> Iterator[LoadNotes]:
    """Record the heads a load freshly initialises (its warnings, still shown as usual) and leaves
    out (INFO on the "bertjax.io" logger)."""
    notes = LoadNotes()
    logger = logging.getLogger("bertjax.io")
    handler, level, propagate = _LeftOutHandler(notes), logger.level, logger.propagate
    logger.addHandler(handler)
    if not logger.isEnabledFor(logging.INFO):  # record it here, show it nowhere it was not shown
        logger.setLevel(logging.INFO)
        logger.propagate = False
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("always", message=".*freshly initialised")
            shown = warnings.showwarning

            def record(message: Any, category: Any, *rest: Any, **kw: Any) -> None:
                notes.warnings.append(str(message))
                notes.fresh.extend(m for f in _FRESH.finditer(str(message))
                                   for m in f[1].split(", "))
                shown(message, category, *rest, **kw)

            warnings.showwarning = record
            yield notes
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def source_format(path: str | Path, step: int | None, notes: LoadNotes) -> str:
    """What `path` was read as: a Hugging Face format, or a run and the step loaded."""
    from bertjax.io.flax_msgpack import FLAX_WEIGHTS, FLAX_WEIGHTS_INDEX
    from bertjax.io.hf import PYTORCH_BIN, SAFETENSORS, SAFETENSORS_INDEX
    from bertjax.train.checkpoint import best_saved_step, saved_steps
    from bertjax.train.rundir import RunDir

    path, run = Path(path), RunDir(path)
    if run.config.is_file():
        if step is None:  # as read_run_params chose: the best, or the step a warning names
            fallback = [int(m[1]) for w in notes.warnings if (m := _LOADED_STEP.search(w))]
            steps = saved_steps(run.checkpoints)
            step = (fallback or [best_saved_step(run.checkpoints)])[-1]
            step = steps[-1] if step is None and steps else step
        return f"bertjax pretrain run, step {step}"
    if (path / SAFETENSORS).is_file() or (path / SAFETENSORS_INDEX).is_file():
        return "Hugging Face safetensors"
    if (path / PYTORCH_BIN).is_file():
        return "pytorch_model.bin"
    if (path / FLAX_WEIGHTS).is_file() or (path / FLAX_WEIGHTS_INDEX).is_file():
        return "transformers-v4 Flax msgpack"
    return "Hugging Face directory"


def probe_inputs(config: Any, tokenizer: Any, choices: bool) -> tuple[Any, Any, Any]:
    """Fixed (input_ids, token_type_ids, attention_mask), int32 (B, S) or (B, C, S) for multiple
    choice: [CLS] ... [SEP] rows of random ids, the second half token type 1, the last row
    right-padded to half its length."""
    import numpy as np

    B, S = PROBE_BATCH, min(PROBE_LENGTH, config.max_position_embeddings)
    shape = (B, PROBE_CHOICES, S) if choices else (B, S)
    vocab = min(tokenizer.vocab_size, config.vocab_size)
    rng = np.random.default_rng(PROBE_SEED)
    ids = rng.integers(min(FIRST_ORDINARY_ID, vocab - 1), vocab, size=shape).astype(np.int32)
    types = np.zeros(shape, np.int32)
    mask = np.ones(shape, np.int32)
    types[..., S // 2:] = 1
    ids[..., 0], ids[..., -1] = tokenizer.special.cls, tokenizer.special.sep
    short = max(2, S // 2)  # the last row's real length
    ids[-1, ..., short - 1] = tokenizer.special.sep
    ids[-1, ..., short:] = tokenizer.special.pad
    types[-1, ..., short:] = 0
    mask[-1, ..., short:] = 0
    return ids, types, mask


def outputs_of(model: Any, batch: tuple[Any, Any, Any]) -> dict[str, Any]:
    """Every float array output of `model` on `batch` (fields that are not None), as float32
    numpy, computed with full-precision matmuls."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    with jax.default_matmul_precision("highest"):
        out = model(*(jnp.asarray(x) for x in batch))
    values = {f.name: getattr(out, f.name) for f in dataclasses.fields(out)}
    return {k: np.asarray(v, np.float32) for k, v in values.items()
            if isinstance(v, jax.Array) and jnp.issubdtype(v.dtype, jnp.floating)}


def _worst(ours: dict[str, Any], theirs: dict[str, Any]) -> tuple[float, str]:
    """The largest |difference| over the fields of `ours`, and the field where it is."""
    import numpy as np

    diffs = {k: float(np.max(np.abs(ours[k] - theirs[k]))) if ours[k].shape == theirs[k].shape
             else float("inf") for k in ours}
    field = max(diffs, key=lambda k: (np.isnan(diffs[k]), diffs[k]))
    return diffs[field], field


def _failed(out: Path, what: str) -> CommandError:
    return CommandError(f"the directory written for {out} failed its check: {what}; {out} was "
                        "not written (an earlier export there stays as it was)")


def check_copy(model: Any, written: Path, out: Path,
               batch: tuple[Any, Any, Any]) -> tuple[dict[str, Any], str]:
    """bertjax reloads `written` as the model's class (computing as the model does) and must
    reproduce its outputs on `batch` within COPY_TOLERANCE: (the model's outputs, a line)."""
    from bertjax.config import COMPUTE_FIELDS
    from bertjax.pretrained import load_hf

    compute = {f: getattr(model.config, f) for f in COMPUTE_FIELDS}
    reloaded = load_hf(written, model_cls=type(model), **compute)
    ours, theirs = outputs_of(model, batch), outputs_of(reloaded, batch)
    if set(ours) != set(theirs):
        raise _failed(out, f"reloaded by bertjax it gives {', '.join(sorted(theirs))}, not "
                           f"{', '.join(sorted(ours))}")
    worst, field = _worst(ours, theirs)
    if not worst <= COPY_TOLERANCE:
        raise _failed(out, f"reloaded by bertjax, its {field} differs from the model's by "
                           f"{worst:.3g} (tolerance {COPY_TOLERANCE:g})")
    return ours, (f"verified: bertjax reloads it with the same outputs, max |diff| {worst:.3g} "
                  f"over {', '.join(ours)} (tolerance {COPY_TOLERANCE:g})")


def check_transformers(model: Any, ours: dict[str, Any], written: Path, out: Path,
                       batch: tuple[Any, Any, Any]) -> str:
    """transformers (if installed) loads `written` as the class of the same name, with no missing
    or unexpected weight, and agrees with the model in float32 within TRANSFORMERS_TOLERANCE:
    a line saying so (or that the check was skipped)."""
    try:
        import torch
        import transformers
    except ImportError:
        return ("not checked with transformers: it is not installed (pip install transformers "
                "torch to have every export loaded by it)")
    from bertjax.io.names import HF_OUTPUT_FIELDS
    from bertjax.pretrained import load_hf

    name = type(model).__name__
    fields = HF_OUTPUT_FIELDS[name]
    if model.config.dtype != "float32":  # compare float32 with float32: the same weights
        ours = outputs_of(load_hf(written, model_cls=type(model), dtype="float32"), batch)
    hf_logging = transformers.utils.logging
    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # its "Loading weights" bar: noise in a summary
    try:
        hf, info = getattr(transformers, name).from_pretrained(
            written, attn_implementation="eager", dtype=torch.float32, output_loading_info=True)
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    problems = [f"{k} {', '.join(map(str, sorted(v, key=str))[:5])}"
                for k, v in info.items() if v]
    if problems:
        raise _failed(out, f"transformers {transformers.__version__} loads it as {name} with "
                           f"{'; '.join(problems)}")
    ids, types, mask = (torch.from_numpy(x).long() for x in batch)
    with torch.no_grad():
        got = hf.float().eval()(ids, token_type_ids=types, attention_mask=mask)
    theirs = {k: getattr(got, v).float().numpy() for k, v in fields.items()}
    worst, field = _worst({k: ours[k] for k in fields}, theirs)
    if not worst <= TRANSFORMERS_TOLERANCE:
        raise _failed(out, f"transformers {transformers.__version__} {name} gives {fields[field]} "
                           f"{worst:.3g} away from bertjax's {field} (tolerance "
                           f"{TRANSFORMERS_TOLERANCE:g})")
    return (f"verified: transformers {transformers.__version__} loads it as {name}, max |diff| "
            f"{worst:.3g} over {', '.join(fields.values())} (float32, tolerance "
            f"{TRANSFORMERS_TOLERANCE:g})")


def tensors_written(directory: Path) -> tuple[int, int]:
    """(tensors, parameters) in `directory`'s model.safetensors, read from its header."""
    import math

    from safetensors import safe_open

    from bertjax.io.hf import SAFETENSORS

    with safe_open(directory / SAFETENSORS, framework="numpy") as f:
        shapes = [f.get_slice(k).get_shape() for k in f.keys()]
    return len(shapes), sum(math.prod(s) for s in shapes)


def _convert(args: argparse.Namespace) -> int:
    from bertjax.files import atomic_directory
    from bertjax.heads import MODEL_CLASSES
    from bertjax.io.hf import check_export_directory
    from bertjax.pretrained import checkpoint_class, save_pretrained  # JAX loads when run

    out = Path(args.out)
    check_export_directory(out, what="OUT_DIR")  # before the (slow) load
    model_cls = MODEL_CLASSES[args.as_class] if args.as_class else None
    with noting_load() as notes:
        model, tokenizer = load_model(args, model_cls=model_cls, seed=args.seed)
    source = source_format(args.model, args.step, notes)
    with contextlib.suppress(OSError, ValueError):  # loaded, so readable; the name is a nicety
        source += f", {checkpoint_class(args.model).__name__}"
    batch = probe_inputs(model.config, tokenizer, choices=type(model).__name__ ==
                         "BertForMultipleChoice")
    with atomic_directory(out, replace=True) as written:  # renamed to OUT_DIR once checked
        save_pretrained(model, written, tokenizer)
        ours, copied = check_copy(model, written, out, batch)
        loaded = check_transformers(model, ours, written, out, batch)
        tensors, parameters = tensors_written(written)
        check_export_directory(out, what="OUT_DIR")  # still ours to replace
    config, name = model.config, type(model).__name__
    print(f"wrote {out}: {name}, {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
          f"vocabulary {tokenizer.vocab_size}")
    print(f"  source: {args.model} ({source})")
    print(f"  written: {name}, {tensors} tensors, {parameters:,} parameters")
    print(f"  heads freshly initialised (seed {args.seed}): {', '.join(notes.fresh)}"
          if notes.fresh else "  heads freshly initialised: none")
    print(f"  heads left out: {', '.join(notes.left_out) or 'none'}")
    print(f"  {copied}")
    print(f"  {loaded}")
    return 0


def run(args: argparse.Namespace) -> int:
    return run_command(getattr(args, "command", "convert"), _convert, args)
