"""The numerics contract for PyTorch: the same choices as `bertjax.numerics`, function for function."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from bertjax.config import BertConfig


def compute_dtype(config: BertConfig) -> torch.dtype | None:
    """The dtype activations and matmuls run in, as `bertjax.numerics.compute_dtype`; None for
    float32, meaning the parameters' own dtype (so a `.double()` mirror computes in float64)."""
    return None if config.dtype == "float32" else getattr(torch, config.dtype)


def gelu_exact(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="none")


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


# Hugging Face activation names; "gelu" is exact (erf), as `F.gelu`'s default.
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": gelu_exact,
    "gelu_new": gelu_tanh,
    "gelu_pytorch_tanh": gelu_tanh,
    "relu": F.relu,
}


def activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    return ACTIVATIONS[name]


def head_activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """A pooler's or classifier head's activation (`Family.pooler_activation`,
    `Family.classifier_head`): BERT's tanh, or one of the hidden activations."""
    return torch.tanh if name == "tanh" else ACTIVATIONS[name]


def upcast(t: torch.Tensor) -> torch.Tensor:
    """At least float32 (float64 stays float64, so the mirror can serve as a float64 referee)."""
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax in float32 over keys where `mask` is true; masked scores get finfo(float32).min."""
    scores = upcast(scores).masked_fill(~mask.bool(), torch.finfo(torch.float32).min)
    return torch.softmax(scores, dim=-1)
