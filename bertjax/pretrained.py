"""The loading API: any BERT a user brings, with its tokenizer, in; a model out as a Hugging Face
directory. `from_pretrained` (a Hugging Face directory or a `bertjax pretrain` run directory) is
what every `bertjax` command that takes a MODEL argument calls; `load_hf`, `save_hf` and
`save_pretrained` read and write Hugging Face directories.

The public API, above the jobs: the formats underneath (`bertjax.io`) take the model class as an
argument; the default class, `BertForPreTraining`, and the reading of run directories live here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flax import nnx

from bertjax.data.tokenizer import WordPieceTokenizer
from bertjax.io.models import load_model, save_model
from bertjax.io.weights import build_model, saved_params_to_numpy
from bertjax.model import BertForPreTraining
from bertjax.train import run_config as rc
from bertjax.train.checkpoint import Checkpointer, read_state
from bertjax.train.rundir import RunDir

# The class `from_pretrained` and `load_hf` build unless told otherwise.
DEFAULT_MODEL_CLASS: type[nnx.Module] = BertForPreTraining


def from_pretrained(
    path: str | Path,
    *,
    step: int | None = None,
    model_cls: type[nnx.Module] = DEFAULT_MODEL_CLASS,
    seed: int = 0,
    missing_heads: str = "init",
    **config_overrides: Any,
) -> tuple[Any, WordPieceTokenizer]:
    """(model, tokenizer) from `path`.

    `path` is a Hugging Face BERT directory (`config.json`, `model.safetensors` or
    `pytorch_model.bin`, and `tokenizer.json` or `vocab.txt`) or a `bertjax pretrain` run
    directory: its best checkpoint by held-out MLM loss (the newest if none was evaluated), or
    checkpoint `step`. `model_cls` is `BertForPreTraining` (default), `BertModel` or
    `BertForSequenceClassification`; heads the weights lack are initialised from `seed` (with a
    warning; `missing_heads="error"` refuses instead), heads of other tasks are left out.
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
    run = RunDir(path)
    if run.config.is_file():
        return _from_run(run, step, model_cls, seed, missing_heads, config_overrides)
    if step is not None:
        raise ValueError(f"{path} is not a `bertjax pretrain` run directory: step={step} only "
                         "chooses a checkpoint of a run")
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"{path} holds neither config.json (a Hugging Face model) nor run_config.json (a "
            "`bertjax pretrain` run); pass a directory that holds one")
    model = load_hf(path, model_cls=model_cls, seed=seed, missing_heads=missing_heads,
                    **config_overrides)
    return model, WordPieceTokenizer.load(path)


def load_hf(
    path: str | Path, *, model_cls: type[nnx.Module] = DEFAULT_MODEL_CLASS, seed: int = 0,
    missing_heads: str = "init", **config_overrides: Any,
) -> Any:
    """A Hugging Face BERT directory -> a bertjax `model_cls` (default `BertForPreTraining`;
    also `BertModel`, `BertForSequenceClassification`).

    Reads checkpoints of BertForPreTraining, BertForMaskedLM, BertForNextSentencePrediction,
    BertForSequenceClassification and bare BertModel ones (`bertjax.io.hf.read_hf`). Heads the
    class declares that the checkpoint lacks (MLM, NSP, pooler, classifier) are freshly
    initialised from `seed`, with a warning naming them (or, with `missing_heads="error"`, are an
    error); heads the class does not have are left out; missing encoder weights and unknown keys
    are errors.
    """
    return load_model(path, model_cls, seed=seed, missing_heads=missing_heads, **config_overrides)


def save_hf(model: nnx.Module, path: str | Path, *, tokenizer: Any = None) -> Path:
    """Write `model` as a directory that transformers loads as its class (`config.json` +
    `model.safetensors`, plus a `WordPieceTokenizer`'s files if given): atomically, replacing
    `path` only if it holds nothing but checkpoint files."""
    return save_model(model, path, tokenizer=tokenizer)


def save_pretrained(model: nnx.Module, directory: str | Path, tokenizer: Any = None) -> Path:
    """The inverse of `from_pretrained`: `model` (+ its tokenizer) as a Hugging Face directory
    that transformers, `AutoTokenizer` and `from_pretrained` load; returns its path."""
    return save_model(model, directory, tokenizer=tokenizer)


def _from_run(run: RunDir, step: int | None, model_cls: type[nnx.Module], seed: int,
              missing_heads: str, config_overrides: dict[str, Any]) -> tuple[Any, WordPieceTokenizer]:
    config = rc.RunConfig.from_dict(run.saved_config(), source=str(run.config))
    tokenizer = WordPieceTokenizer.load(run.tokenizer)
    step = _run_step(run, step, config.train.keep_checkpoints)
    _, state = read_state(run.checkpoints, step)
    bert_config = config.bert_config(tokenizer.vocab_size).replace(
        **{"pad_token_id": tokenizer.special.pad, **config_overrides})
    arrays = saved_params_to_numpy(state["params"])
    model = build_model(arrays, bert_config, model_cls, seed=seed, source=f"{run} step {step}",
                        missing_heads=missing_heads)
    return model, tokenizer


def _run_step(run: RunDir, step: int | None, keep_last: int) -> int:
    """`step` if the run has that checkpoint; by default its best (the newest if none scored)."""
    checkpointer = Checkpointer(run.checkpoints, keep_last=keep_last, keep_best=1)
    try:
        steps = checkpointer.steps()
        if not steps:
            raise FileNotFoundError(f"{run} has no checkpoint yet; train it (bertjax pretrain "
                                    f"--resume --output-dir {run}) or pass another model")
        if step is None:
            return checkpointer.best_step() or steps[-1]
        if step not in steps:
            raise ValueError(f"{run} has no checkpoint step {step}; it has steps {steps}")
        return step
    finally:
        checkpointer.close()
