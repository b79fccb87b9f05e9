"""Load any BERT a user brings, with its tokenizer: a Hugging Face directory or a `bertjax
pretrain` run directory. `from_pretrained` is what every `bertjax` command that takes a MODEL
argument calls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertjax.data.tokenizer import WordPieceTokenizer
from bertjax.train.rundir import RunDir


def from_pretrained(
    path: str | Path,
    *,
    step: int | None = None,
    model_cls: type | None = None,
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
    from bertjax.io.hf import load_hf

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


def _from_run(run: RunDir, step: int | None, model_cls: type | None, seed: int,
              missing_heads: str, config_overrides: dict[str, Any]) -> tuple[Any, WordPieceTokenizer]:
    from bertjax.io.hf import build_model
    from bertjax.io.weights import saved_params_to_numpy
    from bertjax.train import run_config as rc
    from bertjax.train.checkpoint import Checkpointer, read_state

    config = rc.RunConfig.from_dict(run.saved_config(), source=str(run.config))
    tokenizer = WordPieceTokenizer.load(run.tokenizer)
    checkpointer = Checkpointer(run.checkpoints, keep_last=config.train.keep_checkpoints,
                                keep_best=1)
    try:
        steps = checkpointer.steps()
        if not steps:
            raise FileNotFoundError(f"{run} has no checkpoint yet; train it (bertjax pretrain "
                                    f"--resume --output-dir {run}) or pass another model")
        if step is None:
            step = checkpointer.best_step() or steps[-1]
        elif step not in steps:
            raise ValueError(f"{run} has no checkpoint step {step}; it has steps {steps}")
    finally:
        checkpointer.close()
    _, state = read_state(run.checkpoints, step)
    bert_config = config.bert_config(tokenizer.vocab_size).replace(
        **{"pad_token_id": tokenizer.special.pad, **config_overrides})
    arrays = saved_params_to_numpy(state["params"])
    model = build_model(arrays, bert_config, model_cls, seed=seed, source=f"{run} step {step}",
                        missing_heads=missing_heads)
    return model, tokenizer

