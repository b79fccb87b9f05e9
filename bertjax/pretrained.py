"""The loading API: any BERT a user brings, with its tokenizer, in; a model out as a Hugging Face
directory. `from_pretrained` (a Hugging Face directory, a Hub id or a `bertjax pretrain` run
directory) is what every `bertjax` command that takes a MODEL argument calls; `load_hf` reads the
weights alone and `save_pretrained` writes a directory transformers loads.

The public API, above the formats: `bertjax.io` takes the model class as an argument; the default
class, `BertForPreTraining`, lives here. A MODEL is resolved once (`bertjax.io.source.locate`: a
Hub id through `bertjax.io.source`, config.json read once) and every loader here also takes the
`ModelSource` it gives; run directories are read by `bertjax.io.runs` (read-only; a damaged
checkpoint is skipped with a warning naming it). Every loader can say what it loaded
(`output_loading_info=True`: a `LoadReport`, made where the weights are built).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from flax import nnx

from bertjax.config import SHAPE_FIELDS, BertConfig
from bertjax.config.families import FAMILIES
from bertjax.config.heads import Model
from bertjax.data.tokenizer import SAVED_FILES, Tokenizer, fits_vocabulary
from bertjax.errors import InputError
from bertjax.heads import MODEL_CLASSES, BertForPreTraining, model_class
from bertjax.io.hf import CONFIG
from bertjax.io.report import LoadReport
from bertjax.io.runs import load_run_model
from bertjax.io.source import RUN, ModelSource, locate
from bertjax.io.weights import MISSING_HEADS, load_model, save_model

__all__ = ["DEFAULT_MODEL_CLASS", "check_load_arguments", "check_path_argument",
           "checkpoint_class", "from_pretrained", "load_hf", "save_pretrained"]

# The class of a `bertjax pretrain` run (with NSP: its default objective), and of a Hugging Face
# directory whose config.json names no class bertjax has: what `from_pretrained` and `load_hf`
# build unless told otherwise.
DEFAULT_MODEL_CLASS: type[nnx.Module] = BertForPreTraining


def checkpoint_class(path: str | Path | ModelSource, *,
                     revision: str | None = None) -> type[Model]:
    """The class the checkpoint at `path` (a directory, a Hub id or its `ModelSource`) says it
    is: the class a run directory's run trains (`BertForPreTraining`, or `BertForMaskedLM` for
    masked LM alone); the class a Hugging Face directory's config.json
    names (`architectures`, v4 `FlaxBert*` names too), or `DEFAULT_MODEL_CLASS` if bertjax has no
    class of that name."""
    check_path_argument("checkpoint_class", "path", path)
    source = locate(path, revision=revision)
    return named_class(source) or default_class(source)


def named_class(source: ModelSource) -> type[Model] | None:
    """The class a Hugging Face directory's config.json names, if bertjax has it (its family's
    bare encoder for a `BertModel`: a ModernBERT's is ModernBertModel), or a run trains."""
    name = source.architecture or ""
    if name not in MODEL_CLASSES:
        return None
    return model_class(name, str((source.config or {}).get("model_type", "bert")))


def default_class(source: ModelSource) -> type[Model]:
    """The class a checkpoint that names none loads as: the class a run trains
    (`BertForMaskedLM` for `--train.objective mlm`); for a Hugging Face directory
    `DEFAULT_MODEL_CLASS`, or the masked LM for a family pre-trained without a next-sentence head
    (RoBERTa)."""
    if source.run is not None:
        return MODEL_CLASSES[source.run.model_class]
    model_type = str((source.config or {}).get("model_type", "bert"))
    return MODEL_CLASSES[FAMILIES.get(model_type, FAMILIES["bert"]).pretraining_class]


def from_pretrained(
    path: str | Path | ModelSource,
    *,
    revision: str | None = None,
    step: int | None = None,
    model_cls: type[Model] | None = None,
    seed: int = 0,
    missing_heads: str = "init",
    output_loading_info: bool = False,
    **config_overrides: Any,
) -> Any:
    """(model, tokenizer) from `path`; with `output_loading_info=True`, (model, tokenizer,
    `LoadReport`).

    `path` is a Hugging Face BERT directory (`config.json`, `model.safetensors`,
    `pytorch_model.bin` or `flax_model.msgpack`, and `tokenizer.json` or `vocab.txt`), a Hub id
    (`google-bert/bert-base-uncased`, at `revision`; see `bertjax.io.source`), a `bertjax pretrain`
    run directory, or the `ModelSource` of any of them (`bertjax.io.source.locate`). A run gives
    its best checkpoint by held-out MLM loss (the newest if none was evaluated; a damaged one is
    skipped, with a warning, for the newest readable one), or checkpoint `step` (damaged: an
    error naming the readable steps). `model_cls` is any bertjax model class (default: the class
    config.json names, or the run trains: `default_class`); heads the weights lack are
    initialised from `seed` (with a warning; `missing_heads="error"` refuses instead), heads of
    other tasks are left out.
    `config_overrides` change `BertConfig` fields that do not change the weights' shapes (e.g.
    `dtype="bfloat16"`, dropout).
    """
    check_path_argument("from_pretrained", "path", path)
    check_load_arguments("from_pretrained", model_cls, missing_heads, config_overrides)
    source = locate(path, revision=revision)
    if source.kind == RUN:
        assert source.run is not None  # `locate` read its run_config.json
        model, tokenizer, report = load_run_model(
            source, step=step, seed=seed, missing_heads=missing_heads,
            model_cls=_family_class(model_cls or default_class(source), source.run.model_type),
            **config_overrides)
        return (model, tokenizer, report) if output_loading_info else (model, tokenizer)
    if step is not None:
        raise InputError(f"{source.given} is not a `bertjax pretrain` run directory: step={step} "
                         "only chooses a checkpoint of a run")
    model, report = _load_hf(source, model_cls, seed, missing_heads, config_overrides)
    check_has_tokenizer(source.directory)
    tokenizer = Tokenizer.load(source.directory, family=model.config.family)
    if not fits_vocabulary(tokenizer.vocab_size, model.config.vocab_size):  # another's tokenizer
        raise InputError(
            f"{tokenizer.source} has {tokenizer.vocab_size} tokens but "
            f"{source.directory / CONFIG} has vocab_size {model.config.vocab_size}: the "
            "tokenizer is not the one these weights were trained with; put the model's own "
            "tokenizer.json / vocab.txt beside them")
    return (model, tokenizer, report) if output_loading_info else (model, tokenizer)


# tokenizer files of other libraries' formats, which bertjax does not read but transformers does
OTHER_TOKENIZER_FILES = ("vocab.json", "merges.txt", "sentencepiece.bpe.model", "spiece.model",
                         "tokenizer.model")


def check_has_tokenizer(directory: Path) -> None:
    """An InputError naming `directory` and how to give it a tokenizer bertjax reads
    (tokenizer.json or vocab.txt), if it has none."""
    if any((directory / name).is_file() for name in SAVED_FILES):
        return
    others = [name for name in OTHER_TOKENIZER_FILES if (directory / name).is_file()]
    if others:
        fix = (f"it has {', '.join(others)}, which bertjax does not read: have transformers "
               "write a tokenizer.json beside them: python -c \"from transformers import "
               f"AutoTokenizer; AutoTokenizer.from_pretrained('{directory}').save_pretrained("
               f"'{directory}')\"")
    else:
        fix = ("copy in the tokenizer of the model these weights came from (its tokenizer.json "
               "or vocab.txt)")
    raise InputError(f"the model {directory} has no tokenizer beside its weights (neither "
                     f"tokenizer.json nor vocab.txt); {fix}")


def check_path_argument(function: str, argument: str, value: Any) -> None:
    """A TypeError naming `function`'s `argument` unless `value` is a path (a str or an
    os.PathLike) or, to a loader, a `ModelSource`."""
    if isinstance(value, str | os.PathLike) or (isinstance(value, ModelSource)
                                               and argument == "path"):
        return
    what = ("where to write the model" if function == "save_pretrained" else
            "a Hugging Face directory, a Hub id (owner/name) or a `bertjax pretrain` run directory")
    raise TypeError(f"{function}({argument}={value!r}): {argument} is {what}, as a str or a "
                    f"pathlib.Path; got {type(value).__name__}")


def check_load_arguments(function: str, model_cls: Any, missing_heads: Any,
                         config_overrides: dict[str, Any]) -> None:
    """The arguments of a loader, checked before anything is read: `model_cls` a bertjax model
    class (TypeError), `missing_heads` one of MISSING_HEADS, each of `config_overrides` a
    BertConfig field that keeps the weights' shapes, with a value in its range (InputError)."""
    if model_cls is not None and not (isinstance(model_cls, type) and issubclass(
            model_cls, nnx.Module) and hasattr(model_cls, "head_modules")):
        named = (f"bertjax.{model_cls}" if isinstance(model_cls, str) and model_cls in MODEL_CLASSES
                 else "bertjax.BertForMaskedLM")
        raise TypeError(f"{function}(model_cls=...) takes a bertjax model class (one of "
                        f"{', '.join(MODEL_CLASSES)}), got {model_cls!r}; pass e.g. "
                        f"model_cls={named}")
    if missing_heads not in MISSING_HEADS:
        raise InputError(f"{function}(missing_heads={missing_heads!r}): choose \"init\" (heads "
                         "the weights lack start from random weights, with a warning) or "
                         "\"error\" (refuse them)")
    fields = {f.name for f in dataclasses.fields(BertConfig)}
    for name, value in config_overrides.items():
        if name not in fields:
            raise TypeError(f"{function}() got an unexpected keyword argument {name!r}: the "
                            "keywords after the loader's own are BertConfig fields that keep the "
                            f"weights' shapes ({', '.join(sorted(fields - set(SHAPE_FIELDS)))})")
        if name in SHAPE_FIELDS:
            raise InputError(f"{function}({name}={value!r}): {name} sets the shapes of the "
                             "weights, which the checkpoint's config.json decides; leave it out "
                             "(or initialise a new model with BertConfig)")
        if name != "pad_token_id":  # ranged against the checkpoint's vocabulary
            # a family's own field (ModernBERT's classifier_pooling, ...) in a config of it
            owner = next((f.model_type for f in FAMILIES.values() if name in f.own_fields), "bert")
            try:
                BertConfig(model_type=owner).replace(**{name: value})
            except (TypeError, ValueError) as err:
                raise InputError(f"{function}({name}={value!r}): {err}") from None


def load_hf(
    path: str | Path | ModelSource, *, revision: str | None = None,
    model_cls: type[Model] | None = None, seed: int = 0, missing_heads: str = "init",
    output_loading_info: bool = False, **config_overrides: Any,
) -> Any:
    """A Hugging Face BERT directory, Hub id or its `ModelSource` -> a bertjax `model_cls` (None:
    the class its config.json names, `checkpoint_class`); with `output_loading_info=True`,
    (model, `LoadReport`).

    Reads checkpoints of every BERT class of transformers, as safetensors, `pytorch_model.bin` or
    transformers-v4 Flax msgpack (`bertjax.io.hf.read_hf`). Heads the class declares that the
    checkpoint lacks are freshly initialised from `seed`, with a warning naming them (or, with
    `missing_heads="error"`, are an error); heads the class does not have are left out (named in
    the report); missing encoder weights, unknown keys and weights that hold another head than the
    one config.json names are errors.
    """
    check_path_argument("load_hf", "path", path)
    check_load_arguments("load_hf", model_cls, missing_heads, config_overrides)
    source = locate(path, revision=revision)
    if source.kind == RUN:
        raise InputError(f"{source.given} is a `bertjax pretrain` run directory, not a Hugging "
                         "Face one; load it with bertjax.from_pretrained")
    model, report = _load_hf(source, model_cls, seed, missing_heads, config_overrides)
    return (model, report) if output_loading_info else model


def _load_hf(source: ModelSource, model_cls: type[Model] | None, seed: int,
             missing_heads: str, config_overrides: dict[str, Any]) -> tuple[Any, LoadReport]:
    """A Hugging Face source as `model_cls` (None: the class config.json names; `BertModel`:
    the family's bare encoder, a ModernBERT's ModernBertModel)."""
    source_cls = named_class(source)
    if model_cls is not None:
        model_cls = _family_class(model_cls, str((source.config or {}).get("model_type")))
    return load_model(source, model_cls or source_cls or default_class(source),
                      source_cls=source_cls, seed=seed, missing_heads=missing_heads,
                      **config_overrides)


def _family_class(model_cls: type[Model], model_type: str) -> type[Model]:
    """`model_cls` as a model of the family `model_type` holds it: bertjax's class of that name
    is the family's (`BertModel`: a ModernBERT's bare encoder is ModernBertModel); a class of
    the user's own stays as it is."""
    if MODEL_CLASSES.get(model_cls.spec.name) is model_cls:
        return model_class(model_cls.spec.name, model_type)
    return model_cls


def save_pretrained(model: Model, directory: str | Path, tokenizer: Any = None, *,
                    overwrite: bool = False) -> Path:
    """The inverse of `from_pretrained`: `model` (+ its `Tokenizer`) as a Hugging Face
    directory (`config.json` + `model.safetensors` + tokenizer files) that transformers,
    `AutoTokenizer` and `from_pretrained` load; written atomically into a new or empty
    `directory`. A directory that holds a model (anyone's) is replaced only with
    `overwrite=True`; one that holds other files never is. Returns its path."""
    check_path_argument("save_pretrained", "directory", directory)
    return save_model(model, directory, tokenizer=tokenizer, overwrite=overwrite)
