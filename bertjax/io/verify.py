"""Checking an exported Hugging Face directory before it is handed over: bertjax reloads it and
must reproduce the model's outputs on fixed inputs, and, where transformers is installed, its
class of the same name loads it with no missing or unexpected weight and computes the same
outputs. `bertjax convert` runs both on the directory it wrote aside, before renaming it into
place; a user can run them on any export:

    checks = verify_export(model, tokenizer, "exported/")   # ExportCheckError if one fails
    print(*checks, sep="\n")

Tolerances: a reload is the same function of the same weights (`COPY_TOLERANCE`, absolute);
transformers is another implementation of it. Both bertjax's and transformers' float32 outputs
are compared with transformers' float64 run of the same weights, relative to the outputs' scale
(the largest |output|, floored at 1): bertjax must be within `TRANSFORMERS_TOLERANCE`, or within
`ROUND_OFF_FACTOR` times transformers' own float32 error, so a model whose large activations
make float32 round-off large (random weights of initializer_range 0.35) is not refused, while a
real difference still is. Per-token outputs are compared with transformers' at the real tokens
(transformers' own attention implementations disagree on padded rows of ModernBERT).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bertjax.config import COMPUTE_FIELDS
from bertjax.errors import InputError
from bertjax.io.hf import SAFETENSORS
from bertjax.io.weights import load_model

COPY_TOLERANCE = 1e-6  # absolute: the same weights computed the same way
# bertjax's float32 outputs against transformers' float64 run of the same weights, max |diff| /
# max(1, max |output|): within this, or within ROUND_OFF_FACTOR times transformers' own float32
# error, whichever is larger (a model with large activations has large float32 round-off)
TRANSFORMERS_TOLERANCE = 1e-5
ROUND_OFF_FACTOR = 4.0
PROBE_SEED = 0  # the fixed inputs both checks run
PROBE_BATCH, PROBE_LENGTH, PROBE_CHOICES = 3, 16, 2
FIRST_ORDINARY_ID = 5  # probe ids are drawn from [5, vocabulary): past the usual special tokens

Batch = tuple[np.ndarray, np.ndarray, np.ndarray]


class ExportCheckError(InputError):
    """A written directory that does not reproduce its model (the message says where)."""


def probe_inputs(config: Any, tokenizer: Any, choices: bool) -> Batch:
    """Fixed (input_ids, token_type_ids, attention_mask), int32 (B, S) or (B, C, S) for multiple
    choice: [CLS] ... [SEP] rows of random ids, the second half token type 1, the last row
    right-padded to half its length."""
    B, S = PROBE_BATCH, min(PROBE_LENGTH, config.max_sequence_length)
    shape = (B, PROBE_CHOICES, S) if choices else (B, S)
    vocab = min(tokenizer.vocab_size, config.vocab_size)
    rng = np.random.default_rng(PROBE_SEED)
    ids = rng.integers(min(FIRST_ORDINARY_ID, vocab - 1), vocab, size=shape).astype(np.int32)
    types = np.zeros(shape, np.int32)
    mask = np.ones(shape, np.int32)
    types[..., S // 2:] = min(1, config.type_vocab_size - 1)  # one type: RoBERTa
    ids[..., 0], ids[..., -1] = tokenizer.special.cls, tokenizer.special.sep
    short = max(2, S // 2)  # the last row's real length
    ids[-1, ..., short - 1] = tokenizer.special.sep
    ids[-1, ..., short:] = tokenizer.special.pad
    types[-1, ..., short:] = 0
    mask[-1, ..., short:] = 0
    return ids, types, mask


def outputs_of(model: Any, batch: Batch) -> dict[str, np.ndarray]:
    """Every float array output of `model` on `batch` (fields that are not None), as float32
    numpy, computed with full-precision matmuls."""
    with jax.default_matmul_precision("highest"):
        out = model(*(jnp.asarray(x) for x in batch))
    values = {f.name: getattr(out, f.name) for f in dataclasses.fields(out)}
    return {k: np.asarray(v, np.float32) for k, v in values.items()
            if isinstance(v, jax.Array) and jnp.issubdtype(v.dtype, jnp.floating)}


def _worst(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray], *, relative: bool,
           tokens: np.ndarray | None = None) -> tuple[float, str]:
    """The largest error over the fields of `ours` and the field where it is: max |difference|,
    divided by max(1, max |theirs|) if `relative`; a per-token field at `tokens` only (the
    attention mask of the batch) where given. A shape mismatch or NaN counts as infinite."""
    def error(k: str) -> float:
        if ours[k].shape != theirs[k].shape:
            return math.inf
        gap = np.abs(ours[k] - theirs[k])
        if tokens is not None and gap.shape[:tokens.ndim] == tokens.shape:
            gap = gap[tokens != 0]
        diff = float(np.max(gap))
        scale = max(1.0, float(np.max(np.abs(theirs[k])))) if relative else 1.0
        return math.inf if math.isnan(diff) else diff / scale

    errors = {k: error(k) for k in ours}
    field = max(errors, key=errors.__getitem__)
    return errors[field], field


def check_copy(model: Any, directory: Path, batch: Batch) -> tuple[dict[str, np.ndarray], str]:
    """bertjax reloads `directory` as the model's class (computing as the model does) and must
    reproduce its outputs on `batch` within COPY_TOLERANCE: (the model's outputs, a line)."""
    compute = {f: getattr(model.config, f) for f in COMPUTE_FIELDS}
    reloaded, _ = load_model(directory, type(model), **compute)
    ours, theirs = outputs_of(model, batch), outputs_of(reloaded, batch)
    broken = sorted(k for k, v in ours.items() if not np.isfinite(v).all())
    if broken:  # not the copy's fault: the model itself (e.g. overflow in its dtype)
        raise ExportCheckError(f"the model itself computes NaN or Inf in {', '.join(broken)} on "
                               "the probe inputs: check its weights and dtype before converting")
    if set(ours) != set(theirs):
        raise ExportCheckError(f"reloaded by bertjax it gives {', '.join(sorted(theirs))}, not "
                               f"{', '.join(sorted(ours))}")
    worst, field = _worst(ours, theirs, relative=False)
    if not worst <= COPY_TOLERANCE:
        raise ExportCheckError(f"reloaded by bertjax, its {field} differs from the model's by "
                               f"{worst:.3g} (tolerance {COPY_TOLERANCE:g})")
    return ours, (f"verified: bertjax reloads it with the same outputs, max |diff| {worst:.3g} "
                  f"over {', '.join(ours)} (tolerance {COPY_TOLERANCE:g})")


def check_transformers(model: Any, ours: dict[str, np.ndarray], directory: Path,
                       batch: Batch) -> str:
    """transformers (if installed) loads `directory` as the class of the same name, with no
    missing or unexpected weight, and the model's float32 outputs agree with transformers'
    float64 run of it (TRANSFORMERS_TOLERANCE, ROUND_OFF_FACTOR): a line saying so, or that the
    check was skipped."""
    try:
        import torch
        import transformers
    except ImportError:
        return ("not checked with transformers: it is not installed (pip install transformers "
                "torch to have every export loaded by it)")
    fields = {k: v for k, v in type(model).spec.hf_outputs.items()
              if k in ours}  # a bare DistilBERT or ELECTRA encoder has no pooled output
    name = model.config.family.class_name(type(model).spec.name)  # transformers' (RoBERTa's, ...)
    if model.config.dtype != "float32":  # compare float32 with float32: the same weights
        ours = outputs_of(load_model(directory, type(model), dtype="float32")[0], batch)
    hf_logging = transformers.utils.logging
    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # its "Loading weights" bar: noise in a summary
    try:
        hf, info = getattr(transformers, name).from_pretrained(
            # sdpa: transformers' eager ModernBERT turns padded rows to NaN in float64 (its
            # sliding-window mask), its sdpa does not; the same arithmetic for BERT's families
            directory, attn_implementation="sdpa", dtype=torch.float32, output_loading_info=True)
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    problems = [f"{k} {', '.join(list(map(str, sorted(v, key=str)))[:5])}"
                for k, v in info.items() if v]
    if problems:
        raise ExportCheckError(f"transformers {transformers.__version__} loads it as {name} with "
                               f"{'; '.join(problems)}")
    ids, types, mask = (torch.from_numpy(x).long() for x in batch)
    runs = {}
    with torch.no_grad():
        for dtype in (torch.float32, torch.float64):  # float64: the reference both are judged on
            got = hf.to(dtype).eval()(ids, token_type_ids=types, attention_mask=mask)
            runs[dtype] = {k: getattr(got, v).double().numpy() for k, v in fields.items()}
    # at the real tokens: a padded query outside every real token's window (ModernBERT's local
    # layers) attends to nothing, which transformers' eager attention and bertjax compute as a
    # uniform average and its sdpa as zeros; padded rows' outputs are no one's answer
    ours_err, field = _worst({k: ours[k] for k in fields}, runs[torch.float64], relative=True,
                             tokens=batch[2])
    theirs_err, _ = _worst(runs[torch.float32], runs[torch.float64], relative=True,
                           tokens=batch[2])
    allowed = max(TRANSFORMERS_TOLERANCE, ROUND_OFF_FACTOR * theirs_err)
    judged = (f"relative to the outputs' scale, against its float64 run of the same weights "
              f"(its own float32 run: {theirs_err:.2g}; allowed: max({TRANSFORMERS_TOLERANCE:g}, "
              f"{ROUND_OFF_FACTOR:g} x that))")
    if not ours_err <= allowed:
        raise ExportCheckError(
            f"bertjax's {field} is {ours_err:.3g} away from transformers "
            f"{transformers.__version__} {name}'s {fields[field]}, {judged}")
    return (f"verified: transformers {transformers.__version__} loads it as {name}, max |diff| "
            f"{ours_err:.3g} over {', '.join(fields.values())}, {judged}")


def tensors_written(directory: Path) -> tuple[int, int]:
    """(tensors, parameters) in `directory`'s model.safetensors, read from its header."""
    from safetensors import safe_open

    with safe_open(directory / SAFETENSORS, framework="numpy") as f:
        shapes = [f.get_slice(k).get_shape() for k in f.keys()]
    return len(shapes), sum(math.prod(s) for s in shapes)


def verify_export(model: Any, tokenizer: Any, directory: str | Path) -> list[str]:
    """Both checks of the directory `model` (with `tokenizer`) was written to: one line each;
    an ExportCheckError if either fails."""
    directory = Path(directory)
    batch = probe_inputs(model.config, tokenizer, choices=type(model).spec.choices)
    ours, copied = check_copy(model, directory, batch)
    return [copied, check_transformers(model, ours, directory, batch)]
