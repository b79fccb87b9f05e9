"""Child process: the PyTorch rows. transformers' `BertForPreTraining` eager (SDPA attention) or
under `torch.compile`, and the `bert_torch` mirror; training step or inference forward.

transformers' row is built from `BertConfig.to_hf_dict()` and trains as a transformers user
would: `labels` (-100 except at the masked positions) and `next_sentence_label` give the loss,
then `loss.backward()`, the same global-norm clip as bertjax (transformers' Trainer clips at 1.0
by default too) and `torch.optim.AdamW` (fused on CUDA) with BERT's decay groups. By its design
it computes MLM logits at every position, not only the masked ones. bert_torch's row runs
`bert_torch.train.make_optimizer` / `train_step`, which syncs every step (it returns floats).

On an NVIDIA GPU the bfloat16 rows run under `torch.autocast(bfloat16)`.

    python -m bertjax.bench.torch_rows SPEC.json RESULT.json
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

from bertjax.bench.batch import pretraining_batch
from bertjax.bench.options import INSTALL_HINT
from bertjax.bench.timing import RowSkippedError, child_main, peak_rss_bytes, time_steps
from bertjax.config import BertConfig


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
    transformers = _import_transformers()
    hf_config = transformers.BertConfig(**{**config.to_hf_dict(), "attn_implementation": "sdpa"})
    return transformers.BertForPreTraining(hf_config).to(device)


def _adamw(model: Any, optim: Any, device: Any) -> Any:
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


def _transformers_step(spec: dict[str, Any], config: BertConfig, batch: dict[str, Any],
                       device: Any, autocast: Callable[[], Any]) -> tuple[Any, Callable[[], Any]]:
    import torch

    from bertjax.train.schedule import OptimConfig

    model = _transformers_model(config, device)
    run = model
    if spec["impl"] == "hf-compiled":
        run = torch.compile(model, backend=spec["compile_backend"])
    inputs = {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    if spec["mode"] == "infer":
        model.eval()

        def infer() -> Any:
            with torch.inference_mode(), autocast():
                return run(**inputs).prediction_logits  # (B, S, V): every position
        return model, infer

    model.train()
    optim = OptimConfig(**spec["optim"])
    optimizer = _adamw(model, optim, device)

    def train() -> Any:
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            out = run(**inputs, labels=batch["labels"],
                      next_sentence_label=batch["next_sentence_label"])
        out.loss.backward()
        if optim.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), optim.clip_norm)
        optimizer.step()
        return out.loss.detach()
    return model, train


def _bert_torch_step(spec: dict[str, Any], config: BertConfig, batch: dict[str, Any],
                     device: Any) -> tuple[Any, Callable[[], Any]]:
    import torch

    from bert_torch import BertForPreTraining
    from bert_torch.train import make_optimizer, train_step
    from bertjax.train.schedule import OptimConfig

    model = BertForPreTraining(config).to(device)
    if spec["mode"] == "infer":
        model.eval()

        def infer() -> Any:
            with torch.inference_mode():
                return model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                             batch["masked_positions"]).mlm_logits  # (B, P, V)
        return model, infer

    model.train()
    optim = OptimConfig(**spec["optim"])
    optimizer, scheduler = make_optimizer(model, optim)
    return model, lambda: train_step(model, optimizer, scheduler, batch, optim.clip_norm)["loss"]


def torch_row(spec: dict[str, Any]) -> dict[str, Any]:
    """Time one PyTorch row (`spec['impl']`: hf-eager, hf-compiled or bert_torch)."""
    torch = _import_torch()
    if spec["impl"] != "bert_torch":
        _import_transformers()  # skip before building anything
    torch.set_num_threads(spec["threads"])
    device = torch.device(spec["device"])
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RowSkippedError("JAX runs on the GPU but this torch sees no CUDA device (a CPU-only build?)")
    torch.manual_seed(spec["seed"])
    config = BertConfig(**spec["config"])
    host = pretraining_batch(config, spec["batch"], spec["seq"], spec["predictions"], spec["seed"])
    batch = {k: torch.from_numpy(v.astype("int64") if v.dtype.kind == "i" else v).to(device)
             for k, v in host.items()}
    bf16 = spec["dtype"] == "bfloat16"

    def autocast() -> Any:
        if not bf16:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)

    if spec["impl"] == "bert_torch":
        model, step = _bert_torch_step(spec, config, batch, device)
    else:
        model, step = _transformers_step(spec, config, batch, device, autocast)

    def sync(_: Any) -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    out: dict[str, Any] = {}

    def timed_step() -> Any:
        out["last"] = step()
        return out["last"]

    timings = time_steps(timed_step, sync, steps=spec["steps"], warmup=spec["warmup"])
    if device.type == "cuda":
        memory, source = torch.cuda.max_memory_allocated(device), "torch.cuda.max_memory_allocated"
        name = torch.cuda.get_device_name(device)
    else:
        memory, source, name = peak_rss_bytes(), "peak RSS of the row's process", ""
    versions = {"torch": torch.__version__}
    if spec["impl"] != "bert_torch":
        versions["transformers"] = _import_transformers().__version__
    return {
        "first_step_s": timings.first_step_s,
        "step_times_s": timings.step_times_s,
        "pipelined_step_s": timings.pipelined_step_s,
        "peak_memory_bytes": int(memory),
        "memory_source": source,
        "loss": float(out["last"]) if spec["mode"] == "train" else None,
        "parameters": sum(p.numel() for p in model.parameters()),  # tied weights counted once
        "matmul_precision": torch.get_float32_matmul_precision(),
        "device": f"torch {device.type} {name}".strip(),
        "torch_threads": torch.get_num_threads(),
        "versions": versions,
    }


if __name__ == "__main__":
    sys.exit(child_main(torch_row, sys.argv[1:]))
