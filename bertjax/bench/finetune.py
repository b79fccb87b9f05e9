"""`bertjax bench finetune`: an epoch (or more) of each bundled fine-tuning task, in today's
length-grouped padded batches and in packed batches (`FinetuneConfig.max_tokens`), for two seeds:
the training loop's wall time (compilation included: padded batches compile one program per
width, packed ones one) and the validation score, so that the speed-up is read beside the
accuracy it keeps (within the spread of the seeds).

The packed runs get a token budget that gives them about as many steps as the padded runs
(`matching_max_tokens`: `batch_size` examples of the task's mean length a step, in whole rows),
so both follow the same learning-rate schedule with about the same examples a step, and a
step's loss is the mean over its examples either way. Each run writes its output to a temporary
directory, removed after.
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax

from bertjax.bench.embed import default_model_dir
from bertjax.common.console import say_unless
from bertjax.config import BertConfig
from bertjax.data.tokenizer import Tokenizer
from bertjax.errors import InputError
from bertjax.io.report import FreshHeadsWarning
from bertjax.io.source import ModelSource, locate
from bertjax.jobs.finetune.config import FINETUNE_OPTIM, FinetuneConfig
from bertjax.jobs.finetune.job import finetune
from bertjax.pretrained import from_pretrained
from bertjax.tasks.registry import BUNDLED, bundled_examples, make_task
from bertjax.use.packed import row_length, row_limit, token_budget

SCORES = {"classification": "accuracy", "token-classification": "f1",
          "question-answering": "f1", "multiple-choice": "accuracy"}  # the rank's first metric


def matching_max_tokens(task: Any, tokenizer: Any, train: Sequence[Any], config: FinetuneConfig,
                        model_config: Any) -> int:
    """A token budget whose steps hold about `config.unpacked_batch_size` training units: that
    many of their mean packed length, rounded to whole rows (at least one)."""
    units = task.units(tokenizer, train, config.max_length)
    arrays = task.batch(tokenizer, units, config.max_length, model_config)
    lengths = task.pack_lengths(arrays)
    row = row_length(int(lengths.max()),
                     row_limit(arrays["input_ids"], model_config.max_sequence_length))
    return row * max(1, round(config.unpacked_batch_size * float(lengths.mean()) / row))


def _run(name: str, source: ModelSource, config: FinetuneConfig, data: tuple[list, list],
         quiet: bool, packed: bool, max_tokens: int | None) -> dict[str, Any]:
    """One fine-tuning run of the bundled task `name`, `packed` by `max_tokens` (None: the
    matching budget) or not: its steps, times and validation scores."""
    train, validation = data
    task, labels = make_task(name, train)
    named: dict[str, Any] = {} if labels is None else {"id2label": labels}
    with warnings.catch_warnings():  # the task's head is fresh: that is the point
        warnings.simplefilter("ignore", FreshHeadsWarning)
        model, tokenizer = from_pretrained(source, model_cls=task.model_class, **named)
    if packed:  # by default as many steps as the padded runs
        config = dataclasses.replace(config, batch_size=None, max_tokens=max_tokens or
                                     matching_max_tokens(task, tokenizer, train, config,
                                                         model.config))
    with tempfile.TemporaryDirectory(prefix="bertjax-bench-finetune-") as out:
        result = finetune(model, tokenizer, train, validation, Path(out) / "run", config,
                          task=task, progress=False, log=lambda _: None)
    score = SCORES[task.kind]
    return {"task": name, "kind": task.kind, "packed": config.max_tokens is not None,
            "max_tokens": config.max_tokens, "seed": config.seed, "steps": result.steps,
            "examples": result.train_examples, "train_s": result.train_seconds,
            "total_s": result.seconds, "score_name": score,
            "score": result.validation[score], "validation": result.validation}


def run_finetune_benchmark(
    tasks: Sequence[str] = tuple(BUNDLED),
    *,
    model: str | Path | None = None,
    seeds: Sequence[int] = (0, 1),
    epochs: int = 1,
    batch_size: int = 32,
    max_length: int = 128,
    learning_rate: float = 5e-5,
    max_tokens: int | None = None,
    limit: int | None = None,
    quiet: bool = False,
) -> dict[str, Any]:
    """Every task x {padded, packed} x seed, alternating padded and packed runs; `max_tokens`
    None gives the packed runs `matching_max_tokens`; `limit` keeps that many training and
    validation examples, drawn with a fixed seed (a quick check). Returns the runs, a summary per task and the
    settings; prints a table unless `quiet`."""
    source = locate(model if model is not None else default_model_dir())
    if max_tokens is not None:  # a budget too small for a later task fails before any run
        for name in tasks:
            _check_budget(name, source, max_tokens, max_length)
    runs = []
    for name in tasks:
        train, validation, _ = bundled_examples(name)
        data = (_sample(train, limit), _sample(validation, limit)) if limit else (train, validation)
        for seed in seeds:
            for packed in (False, True):
                config = FinetuneConfig(
                    epochs=epochs, batch_size=batch_size, max_length=max_length, seed=seed,
                    optim=dataclasses.replace(FINETUNE_OPTIM, learning_rate=learning_rate))
                say_unless(quiet, f"{name}, seed {seed}, {'packed' if packed else 'padded'} ...")
                runs.append(_run(name, source, config, data, quiet, packed, max_tokens))
    result = {"model": str(source.directory),
              "model_name": "all-MiniLM-L6-v2" if model is None else source.directory.name,
              "epochs": epochs,
              "batch_size": batch_size, "max_length": max_length, "learning_rate": learning_rate,
              "seeds": list(seeds), "limit": limit, "runs": runs, "tasks": _summary(runs),
              "device": f"jax {jax.default_backend()} ({jax.devices()[0].device_kind})",
              "versions": {"jax": jax.__version__}}
    if not quiet:
        print(format_table(result))
    return result


def _check_budget(name: str, source: ModelSource, max_tokens: int, max_length: int) -> None:
    """A ValueError naming the task if `max_tokens` holds no packed row of its training units."""
    train, _, _ = bundled_examples(name)
    task, labels = make_task(name, train)
    tokenizer = Tokenizer.load(source.directory)
    model_config = (BertConfig.from_hf_dict(dict(source.config)) if source.config is not None
                    else from_pretrained(source, model_cls=task.model_class)[0].config)
    model_config = model_config if labels is None else model_config.replace(id2label=labels)
    arrays = task.batch(tokenizer, task.units(tokenizer, train, max_length), max_length,
                        model_config)
    try:
        token_budget(max_tokens, int(task.pack_lengths(arrays).max()),
                     row_limit(arrays["input_ids"], model_config.max_sequence_length))
    except ValueError as err:
        raise InputError(f"{name}: {err}") from None


def _sample(examples: list, n: int) -> list:
    """`n` of `examples` (all if fewer), drawn with a fixed seed, in their order."""
    keep = sorted(random.Random(0).sample(range(len(examples)), min(n, len(examples))))
    return [examples[i] for i in keep]


def _summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per task: mean training seconds of each mode, the speed-up, each mode's scores by seed."""
    out = []
    for name in dict.fromkeys(r["task"] for r in runs):
        mine = [r for r in runs if r["task"] == name]
        padded = [r for r in mine if not r["packed"]]
        packed = [r for r in mine if r["packed"]]
        row = {"task": name, "score_name": mine[0]["score_name"],
               "max_tokens": packed[0]["max_tokens"]}
        for mode, group in (("padded", padded), ("packed", packed)):
            row[f"{mode}_steps"] = group[0]["steps"]
            row[f"{mode}_train_s"] = statistics.mean(r["train_s"] for r in group)
            row[f"{mode}_scores"] = [r["score"] for r in group]
        row["speedup"] = row["padded_train_s"] / row["packed_train_s"]
        out.append(row)
    return out


def format_table(result: dict[str, Any]) -> str:
    """One line per task: steps, training seconds and scores (one per seed) of both modes."""
    lines = [f"{result['model_name']}, {result['epochs']} epoch(s), batch {result['batch_size']} "
             f"(packed: matching token budgets), max length {result['max_length']}, seeds "
             f"{result['seeds']}; training wall time, compilation included; {result['device']}",
             f"{'task':<24} {'metric':<9} {'padded steps':>12} {'s':>8} {'scores':<16} "
             f"{'packed steps':>12} {'tokens':>7} {'s':>8} {'scores':<16} {'speed-up':>8}"]
    for t in result["tasks"]:
        scores = [" ".join(f"{s:.3f}" for s in t[f"{m}_scores"]) for m in ("padded", "packed")]
        lines.append(f"{t['task']:<24} {t['score_name']:<9} {t['padded_steps']:>12} "
                     f"{t['padded_train_s']:>8.1f} {scores[0]:<16} {t['packed_steps']:>12} "
                     f"{t['max_tokens']:>7} {t['packed_train_s']:>8.1f} {scores[1]:<16} "
                     f"{t['speedup']:>7.2f}x")
    return "\n".join(lines)

