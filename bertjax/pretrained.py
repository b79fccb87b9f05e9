"""The loading API: any BERT a user brings, with its tokenizer, in; a model out as a Hugging Face
directory. `from_pretrained` (a Hugging Face directory or a `bertjax pretrain` run directory) is
what every `bertjax` command that takes a MODEL argument calls; `load_hf`, `save_hf` and
`save_pretrained` read and write Hugging Face directories.

The public API, above the jobs: the formats underneath (`bertjax.io`) take the model class as an
argument; the default class, `BertForPreTraining`, lives here. Run directories are read by
`bertjax.train.checkpoint.load_run_model` (read-only; a damaged checkpoint is skipped with a
warning naming it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flax import nnx

from bertjax.data.tokenizer import WordPieceTokenizer
from bertjax.heads import MODEL_CLASSES, BertForPreTraining
from bertjax.io.hf import architecture_of
from bertjax.io.models import load_model, save_model
from bertjax.train.checkpoint import load_run_model
from bertjax.train.rundir import RunDir

# The class of a `bertjax pretrain` run, and of a Hugging Face directory whose config.json names
# no class bertjax has: what `from_pretrained` and `load_hf` build unless told otherwise.
DEFAULT_MODEL_CLASS: type[nnx.Module] = BertForPreTraining


def checkpoint_class(path: str | Path) -> type[nnx.Module]:
    """The class the checkpoint at `path` says it is: a run directory's `BertForPreTraining`;
    the class a Hugging Face directory's config.json names (`architectures`, v4 `FlaxBert*`
    names too), or `DEFAULT_MODEL_CLASS` if bertjax has no class of that name."""
    if RunDir(path).config.is_file():
        return DEFAULT_MODEL_CLASS
    return MODEL_CLASSES.get(architecture_of(path) or "", DEFAULT_MODEL_CLASS)


def from_pretrained(
    path: str | Path,
    *,
    step: int | None = None,
    model_cls: type[nnx.Module] | None = None,
    seed: int = 0,
    missing_heads: str = "init",
    **config_overrides: Any,
) -> tuple[Any, WordPieceTokenizer]:
    """(model, tokenizer) from `path`.

    `path` is a Hugging Face BERT directory (`config.json`, `model.safetensors` or
    `pytorch_model.bin`, and `tokenizer.json` or `vocab.txt`) or a `bertjax pretrain` run
    directory: its best checkpoint by held-out MLM loss (the newest if none was evaluated; a
    damaged one is skipped, with a warning, for the newest readable one), or checkpoint `step`
    (damaged: an error naming the readable steps). `model_cls` is `BertForPreTraining`
    (default), `BertModel` or `BertForSequenceClassification`; heads the weights lack are
    initialised from `seed` (with a warning; `missing_heads="error"` refuses instead), heads of
    other tasks are left out.
    `config_overrides` change `BertConfig` fields that do not change the weights' shapes (e.g.
    `dtype="bfloat16"`, dropout).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"model {path} does not exist; pass a Hugging Face BERT directory (config.json + "
            "model.safetensors + tokenizer.json/vocab.txt) or a `bertjax pretrain` run directory")
    if not path.is_dir():
        raise NotADirectoryError(f"model {path} is a file; pass the directory that holds it")
    if RunDir(path).config.is_file():
        return load_run_model(path, step=step, model_cls=model_cls or DEFAULT_MODEL_CLASS,
                              seed=seed, missing_heads=missing_heads, **config_overrides)
    if step is not None:
        raise ValueError(f"{path} is not a `bertjax pretrain` run directory: step={step} only "
                         "chooses a checkpoint of a run")
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"{path} holds neither config.json (a Hugging Face model) nor run_config.json (a "
            "`bertjax pretrain` run); pass a directory that holds one")
    model = load_hf(path, model_cls=model_cls, seed=seed, missing_heads=missing_heads,
                    **config_overrides)
    tokenizer = WordPieceTokenizer.load(path)
    if tokenizer.vocab_size > model.config.vocab_size:  # its ids past the embeddings: not ours
        raise ValueError(
            f"{tokenizer.source} has {tokenizer.vocab_size} tokens but {path / 'config.json'} has "
            f"vocab_size {model.config.vocab_size}: the tokenizer is not the one these weights "
            "were trained with; put the model's own tokenizer.json / vocab.txt beside them")
    return model, tokenizer


def load_hf(
    path: str | Path, *, model_cls: type[nnx.Module] | None = None, seed: int = 0,
    missing_heads: str = "init", **config_overrides: Any,
) -> Any:
    """A Hugging Face BERT directory -> a bertjax `model_cls` (None: the class its config.json
    names, `checkpoint_class`).

    Reads checkpoints of every BERT class of transformers, as safetensors, `pytorch_model.bin` or
    transformers-v4 Flax msgpack (`bertjax.io.hf.read_hf`). Heads the class declares that the
    checkpoint lacks are freshly initialised from `seed`, with a warning naming them (or, with
    `missing_heads="error"`, are an error); heads the class does not have are left out (named on
    the `bertjax.io` logger); missing encoder weights, unknown keys and weights that hold another
    head than the one config.json names are errors.
    """
    has_config = (Path(path) / "config.json").is_file()  # else read_hf names what is missing
    source_cls = MODEL_CLASSES.get(architecture_of(path) or "") if has_config else None
    return load_model(path, model_cls or source_cls or DEFAULT_MODEL_CLASS, source_cls=source_cls,
                      seed=seed, missing_heads=missing_heads, **config_overrides)


def save_hf(model: nnx.Module, path: str | Path, *, tokenizer: Any = None) -> Path:
    """Write `model` as a directory that transformers loads as its class (`config.json` +
    `model.safetensors`, plus a `WordPieceTokenizer`'s files if given): atomically, replacing
    `path` only if it is empty or an earlier export."""
    return save_model(model, path, tokenizer=tokenizer)


def save_pretrained(model: nnx.Module, directory: str | Path, tokenizer: Any = None) -> Path:
    """The inverse of `from_pretrained`: `model` (+ its tokenizer) as a Hugging Face directory
    that transformers, `AutoTokenizer` and `from_pretrained` load; returns its path."""
    return save_model(model, directory, tokenizer=tokenizer)
