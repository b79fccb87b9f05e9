"""Child process: the PyTorch rows. transformers' `BertForPreTraining` eager (SDPA attention) or
under `torch.compile`, and the `bert_torch` mirror; training step or inference forward. A family
pre-trained without NSP (RoBERTa, ModernBERT, ...) runs its masked LM instead
(`RobertaForMaskedLM`, `ModernBertForMaskedLM`): the MLM loss alone, in every row.

transformers' row is built from `BertConfig.to_hf_dict()` and trains as a transformers user
would: `labels` (-100 except at the masked positions) and `next_sentence_label` (BERT) give the
loss, then `loss.backward()`, the same global-norm clip as bertjax (transformers' Trainer clips
at 1.0 by default too) and `torch.optim.AdamW` (fused on CUDA) with BERT's decay groups. By its
design BERT's computes MLM logits at every position, not only the masked ones; where the model
can predict at the labelled positions alone (ModernBERT's `sparse_prediction`, its pre-training
setting) it does, as bertjax does: the same loss, the baseline's faster way. bert_torch's row
runs `bert_torch.train.make_optimizer` / `train_step`, which syncs every step (it returns floats).

On an NVIDIA GPU the bfloat16 rows run under `torch.autocast(bfloat16)`.

torch, transformers and bert_torch are optional dependencies (`bertjax[bench]`): imported inside
the functions, after `torch_row` has checked they are installed (else the row is skipped).

    python -m bertjax.bench.torch_rows SPEC.json RESULT.json
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

from bertjax.bench.batch import pretraining_batch
from bertjax.bench.options import INSTALL_HINT
from bertjax.bench.timing import (
    SCHEDULE_STEPS,
    RowSkippedError,
    RowSpec,
    child_main,
    peak_rss_bytes,
    time_steps,
)
from bertjax.config import BertConfig
from bertjax.train.schedule import OptimConfig


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as err:
        raise RowSkippedError(f"torch is not installed ({err}); {INSTALL_HINT}") from err
    return torch


def _import_transformers() -> Any:
    try:
        import transformers
    except ImportError as err:
        raise RowSkippedError(f"transformers is not installed ({err}); {INSTALL_HINT}") from err
    return transformers


def _transformers_model(config: BertConfig, device: Any) -> Any:
    """transformers' BertForPreTraining, or the family's masked LM (RobertaForMaskedLM,
    ModernBertForMaskedLM, ...) for a family pre-trained without NSP; predicting at the labelled
    positions alone where its config can (`sparse_prediction`: with `labels` only)."""
    transformers = _import_transformers()
    name = config.family.pretraining_class
    data = config.to_hf_dict(name)
    hf_config = transformers.AutoConfig.for_model(data.pop("model_type"),
                                                  **{**data, "attn_implementation": "sdpa"})
    if hasattr(hf_config, "sparse_prediction"):
        hf_config.sparse_prediction = True
    return getattr(transformers, config.family.class_name(name))(hf_config).to(device)


def _adamw(model: Any, optim: OptimConfig, device: Any) -> Any:
    """torch.optim.AdamW with bertjax's settings and decay groups; fused on CUDA."""
    import torch

    from bert_torch.train import decay_parameter_names

    params = dict(model.named_parameters())
    decay, no_decay = decay_parameter_names(model)
    return torch.optim.AdamW(
        [{"params": [params[n] for n in decay], "weight_decay": optim.weight_decay},
         {"params": [params[n] for n in no_decay], "weight_decay": 0.0}],
        lr=optim.learning_rate, betas=(optim.b1, optim.b2), eps=optim.eps,
        fused=True if device.type == "cuda" else None,
    )


def _transformers_step(spec: RowSpec, batch: dict[str, Any], device: Any,
                       autocast: Callable[[], Any]) -> tuple[Any, Callable[[], Any]]:
    import torch

    model = _transformers_model(spec.config, device)
    run = model
    if spec.impl == "hf-compiled":
        run = torch.compile(model, backend=spec.compile_backend)
    family = spec.config.family  # DistilBERT's models take no token types
    inputs = {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")
              if k != "token_type_ids" or family.token_types}
    nsp = family.next_sentence  # else the family's masked LM: no NSP label
    if spec.mode == "infer":
        model.eval()

        def infer() -> Any:
            with torch.inference_mode(), autocast():
                out = run(**inputs)  # (B, S, V): every position
                return out.prediction_logits if nsp else out.logits
        return model, infer

    model.train()
    optim = spec.optim
    optimizer = _adamw(model, optim, device)

    def train() -> Any:
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            out = run(**inputs, labels=batch["labels"],
                      **({"next_sentence_label": batch["next_sentence_label"]} if nsp else {}))
        out.loss.backward()
        if optim.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), optim.clip_norm)
        optimizer.step()
        return out.loss.detach()
    return model, train


def _bert_torch_step(spec: RowSpec, batch: dict[str, Any],
                     device: Any) -> tuple[Any, Callable[[], Any]]:
    import torch

    import bert_torch
    from bert_torch.train import make_optimizer, train_step

    model = getattr(bert_torch, spec.config.family.pretraining_class)(spec.config).to(device)
    if spec.mode == "infer":
        model.eval()

        def infer() -> Any:
            with torch.inference_mode():
                return model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                             batch["masked_positions"]).mlm_logits  # (B, P, V)
        return model, infer

    model.train()
    optimizer, scheduler = make_optimizer(model, spec.optim, SCHEDULE_STEPS)
    return model, lambda: train_step(model, optimizer, scheduler, batch, spec.optim.clip_norm)["loss"]


def _device(spec: RowSpec) -> Any:
    """torch's device for the row; a CUDA row on a torch without CUDA is skipped."""
    torch = _import_torch()
    device = torch.device(spec.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RowSkippedError("JAX runs on the GPU but this torch sees no CUDA device (a CPU-only build?)")
    return device


def _torch_batch(spec: RowSpec, device: Any) -> dict[str, Any]:
    """The bench's batch (`pretraining_batch`) as tensors on `device`, integers as int64."""
    import torch

    host = pretraining_batch(spec.config, spec.batch, spec.seq, spec.predictions, spec.seed)
    return {k: torch.from_numpy(v.astype("int64") if v.dtype.kind == "i" else v).to(device)
            for k, v in host.items()}


def _autocast(spec: RowSpec, device: Any) -> Callable[[], Any]:
    """A context factory: torch.autocast(bfloat16) for a bfloat16 row, else nothing."""
    import torch

    if spec.dtype != "bfloat16":
        return contextlib.nullcontext
    return lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def _memory_and_name(device: Any) -> tuple[int, str, str]:
    """(peak memory in bytes, how it was measured, the GPU's name or "")."""
    import torch

    if device.type == "cuda":
        return (torch.cuda.max_memory_allocated(device), "torch.cuda.max_memory_allocated",
                torch.cuda.get_device_name(device))
    return peak_rss_bytes(), "peak RSS of the row's process", ""


def torch_row(spec: RowSpec) -> dict[str, Any]:
    """Time one PyTorch row (`spec.impl`: hf-eager, hf-compiled or bert_torch)."""
    torch = _import_torch()
    if spec.impl != "bert_torch":
        _import_transformers()  # skip before building anything
    torch.set_num_threads(spec.threads)
    device = _device(spec)
    torch.manual_seed(spec.seed)
    batch = _torch_batch(spec, device)
    if spec.impl == "bert_torch":
        model, step = _bert_torch_step(spec, batch, device)
    else:
        model, step = _transformers_step(spec, batch, device, _autocast(spec, device))

    def sync(_: Any) -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    last: list[Any] = [None]

    def timed_step() -> Any:
        last[0] = step()
        return last[0]

    timings = time_steps(timed_step, sync, steps=spec.steps, warmup=spec.warmup)
    memory, source, name = _memory_and_name(device)
    versions = {"torch": torch.__version__}
    if spec.impl != "bert_torch":
        versions["transformers"] = _import_transformers().__version__
    return {
        "first_step_s": timings.first_step_s,
        "step_times_s": timings.step_times_s,
        "dispatch_times_s": timings.dispatch_times_s,
        "pipelined_step_s": timings.pipelined_step_s,
        "peak_memory_bytes": int(memory),
        "memory_source": source,
        "loss": float(last[0]) if spec.mode == "train" else None,
        "parameters": sum(p.numel() for p in model.parameters()),  # tied weights counted once
        "model_class": (f"{type(model).__name__} ({spec.config.model_type})"
                        if spec.impl == "bert_torch" else type(model).__name__),
        "matmul_precision": torch.get_float32_matmul_precision(),
        "device": f"torch {device.type} {name}".strip(),
        "torch_threads": torch.get_num_threads(),
        "versions": versions,
    }


if __name__ == "__main__":
    sys.exit(child_main(torch_row, sys.argv[1:]))
