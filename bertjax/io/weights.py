"""A bertjax model's parameters as PyTorch-named numpy arrays, and back, strictly.

The PyTorch name of a parameter is its Flax path with the leaf renamed (`bertjax.io.names`), so one
table serves `bert_torch` state dicts, Hugging Face checkpoints (`bertjax.io.hf`, a further rename)
and the parity checks. Every direction checks the full key set and every shape, and raises one
`ValueError` naming each missing, unexpected and mis-shaped key with expected and found shapes.
Needs no PyTorch: tensors are accepted by duck type.

Generic over model classes: each function takes the class, which declares what it is
(`base_model_prefix`, its row of `bertjax.config.heads`); nothing here imports `bertjax.model`.
`build_model` reads the layout checkpoints share (the encoder under `bert.`, heads beside it) into
any class; `load_model` and `save_model` take whole models of any class in and out of Hugging Face
directories (`bertjax.io.hf`), for `bertjax.pretrained` (which adds the default class and run
directories) and the jobs below the public API (fine-tuning saves through `save_model`).
"""

from __future__ import annotations

import functools
import logging
import re
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
from flax import nnx

from bertjax.config import BertConfig, layer_path, stacked_at
from bertjax.config.families import FAMILIES
from bertjax.config.heads import MODELS, Model, ModelClass, class_with_head
from bertjax.errors import InputError
from bertjax.io.hf import CONFIG, read_hf, weights_format, write_hf
from bertjax.io.names import HEAD_PREFIXES, POOLER, checkpoint_name, torch_name
from bertjax.io.report import FreshHeadsWarning, LoadReport
from bertjax.io.source import HUGGING_FACE, ModelSource

log = logging.getLogger("bertjax.io")


def _layer_paths(path: tuple[Any, ...], shape: tuple[int, ...]) -> list[tuple[int | None, tuple]]:
    """[(None, path)] for a plain parameter; [(i, the loop model's path of its layer i) for i <
    L] for a scan model's stacked (L, ...) one (`config.layer_path`)."""
    if stacked_at(path) is None:
        return [(None, tuple(path))]
    return [(i, layer_path(tuple(path), i)) for i in range(shape[0])]


class _Entry(NamedTuple):
    """One PyTorch-named parameter: its Flax path and variable, whether it is transposed and,
    when the variable is a scan model's stacked (L, ...) one, the layer it is a slice of."""

    path: tuple[Any, ...]
    transposed: bool
    variable: Any
    layer: int | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        """The Flax shape of this one parameter (one layer's slice of a stacked variable)."""
        shape = tuple(self.variable.shape)
        return shape if self.layer is None else shape[1:]


def _param_table(state: nnx.State) -> dict[str, _Entry]:
    """torch name -> `_Entry` for every parameter of a state; a stacked (L, ...) variable of a
    scan model gives L entries named `layers.{i}.…`, as the loop model's variables do."""
    table = {}
    for path, variable in nnx.to_flat_state(state):
        for layer, named in _layer_paths(tuple(path), tuple(variable.shape)):
            name, transposed = torch_name(named)
            table[name] = _Entry(tuple(path), transposed, variable, layer)
    return table


@functools.lru_cache(maxsize=32)
def _abstract(config: BertConfig, model_cls: type[Model]) -> Any:
    """An abstract (shape-only) `model_cls(config)`: no memory, no random numbers. Made once per
    config and class (a load, a save and their checks each ask, and each would trace the
    constructor again) and shared: callers read or split it, never change it."""
    return nnx.eval_shape(lambda: model_cls(config, rngs=nnx.Rngs(0)))


def _template(config: BertConfig, model_cls: type[Model], abstract: Any = None
              ) -> tuple[nnx.GraphDef, nnx.State, nnx.State]:
    """An abstract model (`abstract`, or one made: tracing the constructor is a good part of a
    command's answer time, so a load makes it once), split into its graph, its parameters and
    the rest."""
    if abstract is None:
        abstract = _abstract(config, model_cls)
    graphdef, params, *rest = nnx.split(abstract, nnx.Param, ...)  # rest: one State
    return graphdef, params, rest[0]


def _torch_shapes(table: dict[str, _Entry]) -> dict[str, tuple[int, ...]]:
    return {
        name: tuple(reversed(e.shape)) if e.transposed else e.shape for name, e in table.items()
    }


def _shapes_of(abstract: Any) -> dict[str, tuple[int, ...]]:
    params = nnx.state(abstract, nnx.Param)
    return _torch_shapes(_param_table(params))


def expected_shapes(config: BertConfig, model_cls: type[Model]) -> dict[str, tuple[int, ...]]:
    """PyTorch name -> PyTorch shape of every parameter of `model_cls(config)`."""
    return _shapes_of(_abstract(config, model_cls))


def shape_of(value: Any) -> tuple[int, ...]:
    return tuple(value.shape) if hasattr(value, "shape") else tuple(np.shape(value))


def check_state_dict(
    state_dict: Mapping[str, Any], expected: Mapping[str, tuple[int, ...]], *, what: str
) -> None:
    """Raise one ValueError listing every missing, unexpected or mis-shaped key."""
    problems = []
    missing = sorted(set(expected) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(expected))
    problems += [f"  missing key {k} (expected shape {expected[k]})" for k in missing]
    problems += [f"  unexpected key {k} (shape {shape_of(state_dict[k])})" for k in unexpected]
    for k in sorted(set(expected) & set(state_dict)):
        found = shape_of(state_dict[k])
        if found != tuple(expected[k]):
            problems.append(f"  wrong shape for {k}: expected {tuple(expected[k])}, found {found}")
    if problems:
        hint = _layer_hint(state_dict, expected)
        raise InputError(
            f"{what} does not match the model config ({len(problems)} problems):\n"
            + "\n".join(problems)
            + (f"\n{hint}" if hint else "")
        )


_LAYER_INDEX = re.compile(r"(?:.+\.)?layers\.(\d+)\.")


def _layer_hint(state_dict: Mapping[str, Any], expected: Mapping[str, Any]) -> str:
    def layers(keys: Any) -> int:
        idx = {int(m[1]) for k in keys if (m := _LAYER_INDEX.match(k))}  # any encoder prefix
        return max(idx) + 1 if idx else 0

    found, want = layers(state_dict), layers(expected)
    if found != want:
        return (
            f"the weights have {found} layers but the config asks for num_hidden_layers={want}: "
            "build the model from the checkpoint's own config"
        )
    return ""


def to_numpy(value: Any) -> np.ndarray:
    """A numpy array of `value`; a torch tensor (duck-typed, so numpy input needs no torch)
    is detached, moved to the CPU and, if floating point, made float32."""
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        if value.dtype.is_floating_point:
            value = value.float()
        return value.numpy()
    return np.asarray(value)


def state_to_numpy(params: nnx.State) -> dict[str, np.ndarray]:
    """A Flax parameter state (or its gradients) -> PyTorch-named, PyTorch-shaped numpy arrays;
    a scan model's stacked (L, ...) leaves are named per layer."""
    out: dict[str, np.ndarray] = {}
    host: dict[tuple[Any, ...], np.ndarray] = {}  # one device-to-host copy per variable
    for name, e in _param_table(params).items():
        if e.path not in host:
            host[e.path] = np.asarray(e.variable[...])
        value = host[e.path] if e.layer is None else host[e.path][e.layer]  # (L, ...) -> layer
        out[name] = np.ascontiguousarray(value.T) if e.transposed else value
    return out


def saved_params_to_numpy(params: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Parameters as a checkpoint holds them (nested dicts of arrays, each leaf under a `value`
    key, layer indices as strings; a scan run's layers stacked (L, ...) under `layers`) ->
    PyTorch-named, PyTorch-shaped numpy arrays, named per layer either way."""
    out = {}

    def walk(tree: Any, path: tuple[str, ...]) -> None:
        if isinstance(tree, Mapping) and set(tree) != {"value"}:
            for key, sub in tree.items():
                walk(sub, (*path, str(key)))
            return
        value = np.asarray(tree["value"] if isinstance(tree, Mapping) else tree)
        for layer, named in _layer_paths(path, value.shape):
            name, transposed = torch_name(named)
            one = value if layer is None else value[layer]  # (L, ...) -> one layer
            out[name] = np.ascontiguousarray(one.T) if transposed else one

    walk(params, ())
    return out


def model_to_numpy(model: Model) -> dict[str, np.ndarray]:
    """A bertjax model -> PyTorch-named numpy arrays, checked against the model's config."""
    arrays = state_to_numpy(nnx.state(model, nnx.Param))
    check_state_dict(arrays, expected_shapes(model.config, type(model)), what="the bertjax model")
    return arrays


def model_from_numpy(
    state_dict: Mapping[str, Any], config: BertConfig, model_cls: type[Model],
    *, what: str = "the state dict", abstract: Any = None,
) -> Any:
    """PyTorch-named arrays (numpy or torch tensors) -> a bertjax `model_cls` (strict);
    `abstract`: the abstract `model_cls(config)` when the caller has made it already."""
    graphdef, params, rest = _template(config, model_cls, abstract)
    table = _param_table(params)
    check_state_dict(state_dict, _torch_shapes(table), what=what)
    flat: list[Any] = []
    stacks: dict[Any, Any] = {}
    for name, e in table.items():
        value = to_numpy(state_dict[name]).astype(np.float32)
        value = value.T if e.transposed else value
        if e.layer is None:
            flat.append((e.path, e.variable.replace(jnp.asarray(value))))
        else:  # one layer of a scan model's stacked variable
            stacks.setdefault(e.path, (e.variable, {}))[1][e.layer] = value
    for path, (variable, layers) in stacks.items():
        stacked = np.stack([layers[i] for i in range(len(layers))])  # (L, ...)
        flat.append((path, variable.replace(jnp.asarray(stacked))))
    return nnx.merge(graphdef, nnx.from_flat_state(flat), rest)


def head_prefixes(model: Any) -> tuple[str, ...]:
    """Name prefixes of every head weight of `model` (an abstract model will do): the heads its
    class declares (`head_modules`) and, under its `base_model_prefix`, its encoder's."""
    cls = type(model)
    own = tuple(f"{name}." for name in cls.head_modules)
    if not cls.base_model_prefix:
        return own
    encoder = getattr(model, cls.base_model_prefix)
    return own + tuple(f"{cls.base_model_prefix}.{p}" for p in head_prefixes(encoder))


def checkpoint_heads(config: BertConfig, model_cls: type[Model]) -> tuple[str, ...]:
    """The checkpoint-name prefixes of `model_cls`'s heads (its pooler under `bert.`)."""
    return tuple(checkpoint_name(p, model_cls.base_model_prefix)
                 for p in head_prefixes(_abstract(config, model_cls)))


def heads_held(names: Iterable[str]) -> list[str]:
    """The heads (`HEAD_PREFIXES`, without the dot) that checkpoint `names` hold weights of."""
    names = list(names)
    return [h.removesuffix(".") for h in HEAD_PREFIXES if any(n.startswith(h) for n in names)]


def check_architecture(arrays: Mapping[str, Any], config: BertConfig, source_cls: type[Model],
                       where: str) -> None:
    """Refuse weights that hold another class's head and none of the one `source_cls` (the class
    `where` names) has: the class named is not what the weights are. Extra heads alone pass:
    bert-base-uncased's config.json says BertForMaskedLM over BertForPreTraining weights."""
    own = [h for h in checkpoint_heads(config, source_cls) if h != POOLER]
    held = [h for h in heads_held(arrays) if h != POOLER.removesuffix(".")]
    if own and held and not any(n.startswith(tuple(own)) for n in arrays):
        raise InputError(
            f"{where} names {source_cls.__name__}, but the weights hold no "
            f"{', '.join(h.removesuffix('.') for h in own)} and hold {', '.join(held)}, the head "
            f"of another class: fix `architectures` in {where} (or put back the weights it "
            "belongs to)")


def build_model(
    arrays: Mapping[str, Any], config: BertConfig, model_cls: type[Model], *, seed: int = 0,
    source: str = "the weights", missing_heads: str = "init",
    origin: Mapping[str, Any] | None = None,
) -> tuple[Any, LoadReport]:
    """A `model_cls` from arrays under checkpoint names (`bertjax.io.names.checkpoint_name`: the
    encoder under `bert.`, heads beside it, as a pre-training run and Hugging Face hold them), and
    the report of the load: its heads, and `origin`'s fields (where it came from: `path`,
    `directory`, `format`, a run's `step` and `skipped_steps`).

    Heads the class declares (`head_prefixes`) that the arrays lack are initialised from `seed`,
    with a warning naming them (`missing_heads="init"`), or refused (`"error"`); other classes'
    heads (`HEAD_PREFIXES`) are left out, named on the `bertjax.io` logger; any other missing,
    unexpected or mis-shaped weight is an error naming each one.
    """
    check_finite(arrays, source)
    abstract = _abstract(config, model_cls)
    ours = {checkpoint_name(name, model_cls.base_model_prefix): name
            for name in _shapes_of(abstract)}  # checkpoint name -> the class's name
    state = {ours.get(k, k): v for k, v in arrays.items()
             if k in ours or not k.startswith(HEAD_PREFIXES)}
    left_out = heads_held(k for k in arrays if k not in ours and k.startswith(HEAD_PREFIXES))
    if left_out:
        log.info("%s: left out the weights of %s (%s has no such head)", source,
                 ", ".join(left_out), model_cls.__name__)
    heads = head_prefixes(abstract)
    held = _heads_named([n for k, n in ours.items() if k in arrays], heads)
    # a head the weights hold none of is initialised; one they hold in part disagrees with the
    # config (a ModernBERT bias switch, a width): the strict check below names what is missing
    absent = tuple(h for h in heads if h.removesuffix(".") not in held)
    missing = sorted(name for k, name in ours.items()
                     if k not in arrays and absent and name.startswith(absent))
    fresh = _heads_named(missing, heads)
    if missing:
        state.update(_fresh_heads(missing, fresh, config, model_cls, seed=seed, source=source,
                                  missing_heads=missing_heads))
    loaded = [h for h in held if h not in fresh]
    report = LoadReport(model_class=model_cls.__name__, loaded_heads=tuple(loaded),
                        initialised_heads=tuple(fresh), left_out_heads=tuple(left_out), seed=seed,
                        **(origin or {}))
    return model_from_numpy(state, config, model_cls, what=source, abstract=abstract), report


def check_finite(arrays: Mapping[str, Any], source: str) -> None:
    """A ValueError naming the weights of `arrays` that hold NaN or Inf: a damaged file (or a
    model that diverged) would otherwise load and compute NaN without a word."""
    bad = sorted(name for name, value in arrays.items()
                 if np.issubdtype(np.asarray(value).dtype, np.floating)
                 and not np.isfinite(value).all())
    if bad:
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise InputError(f"{source} has NaN or Inf in {len(bad)} weight(s) ({shown}): its file "
                         "is damaged or the model diverged; download, convert or train it again")


def _heads_named(names: Iterable[str], heads: tuple[str, ...]) -> list[str]:
    """The heads (prefixes without the dot, in `heads` order) that any of `names` belongs to."""
    names = list(names)
    return [h.removesuffix(".") for h in heads if any(n.startswith(h) for n in names)]


MISSING_HEADS = ("init", "error")  # what a load does with heads the weights lack


def _family_fix(model: ModelClass, model_type: str) -> str | None:
    """The fix for another family's checkpoint than BERT's that lacks a head a pre-training
    class (`model.pretrained`) needs: that family's own class, or why no checkpoint of it has
    one; None for BERT (the class's own `made_by`) and the fine-tuned classes."""
    family = FAMILIES.get(model_type)
    if family is None or model_type == "bert" or not model.pretrained:
        return None
    if model.next_sentence and not family.next_sentence:
        with_nsp = " or ".join(name for name, m in MODELS.items() if m.next_sentence)
        return (f"{model_type} models are pre-trained without a next-sentence head, so none has "
                f"one: pass a BERT checkpoint ({with_nsp})")
    if model_type == "electra" and model.masked_lm:
        discriminator = family.class_name(class_with_head("discriminator_predictions"))
        return (f"an ELECTRA discriminator ({discriminator}) has no masked-LM head; ELECTRA's "
                f"generator has it: pass an {family.class_name(model.name)} checkpoint (such as "
                "google/electra-small-generator)")
    return f"pass a Hugging Face {family.class_name(model.name)} checkpoint"


def missing_heads_error(source: str, heads: Iterable[str], model_cls: type[Model],
                        model_type: str = "bert") -> InputError:
    """The error for weights at `source` (of the `model_type` family) that lack `heads` of
    `model_cls`: it names the command that makes such a model, or the checkpoint that has it."""
    spec = model_cls.spec
    fix = _family_fix(spec, model_type) or spec.fix_for_missing_heads()
    return InputError(f"{source} has no weights for {', '.join(sorted(heads))}, which "
                      f"{model_cls.__name__} needs here: {fix}")


def _fresh_heads(
    names: list[str], fresh: list[str], config: BertConfig, model_cls: type[Model], *, seed: int,
    source: str, missing_heads: str,
) -> dict[str, np.ndarray]:
    """The weights `names` (of the missing heads `fresh`) freshly initialised from `seed`, with a
    warning; with `missing_heads="error"` a ValueError instead."""
    lacking = ", ".join(sorted(fresh))
    if missing_heads == "error":
        raise missing_heads_error(source, fresh, model_cls, config.model_type)
    initialised = model_to_numpy(model_cls(config, rngs=nnx.Rngs(seed)))
    warnings.warn(
        f"{source} has no weights for {lacking}: freshly initialised (seed {seed}). "
        "Fine-tune or pre-train before trusting those outputs.", FreshHeadsWarning,
        stacklevel=4,  # the caller of load_hf / from_pretrained's reader
    )
    return {name: initialised[name] for name in names}


# --- whole models in and out of Hugging Face directories (any class, an argument) ----------------


def load_model(
    path: str | Path | ModelSource, model_cls: type[Model], *,
    source_cls: type[Model] | None = None, seed: int = 0, missing_heads: str = "init",
    **config_overrides: Any,
) -> tuple[Any, LoadReport]:
    """A Hugging Face BERT directory (or its `ModelSource`) -> (a `model_cls`, the report of what
    loaded; see `bertjax.pretrained.load_hf`). `source_cls` is the class its config.json names, if
    bertjax has it: weights that hold another class's head instead of its own are refused
    (`check_architecture`)."""
    source = path if isinstance(path, ModelSource) else ModelSource(
        str(path), Path(path), HUGGING_FACE)
    config, arrays = read_hf(source.directory, source.config, **config_overrides)
    if source_cls is not None:
        check_architecture(arrays, config, source_cls, str(source.directory / CONFIG))
    return build_model(arrays, config, model_cls, seed=seed,
                       source=f"the checkpoint {source.directory}", missing_heads=missing_heads,
                       origin={"path": source.given, "directory": str(source.directory),
                               "format": weights_format(source.directory) or ""})


def save_model(model: Model, path: str | Path, *, tokenizer: Any = None,
               overwrite: bool = False) -> Path:
    """Write `model` as a directory that transformers loads as its class (`config.json` +
    `model.safetensors`, plus a `Tokenizer`'s files if given): atomically, into a new or empty
    `path`, or replacing a model there with `overwrite` (`bertjax.io.hf.write_hf`)."""
    return write_hf(path, model_to_numpy(model), model.config, type(model), tokenizer=tokenizer,
                    overwrite=overwrite)
