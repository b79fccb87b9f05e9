"""Small PyTorch models and their Flax NNX ports, none of them bertjax's: what tests/parity
compares. Each port takes the faults a port meets (`tanh_in`: the tanh GELU in that block; `eps`:
a LayerNorm epsilon per block), the PyTorch side is always right; `pair(...)` builds both with the
PyTorch weights copied in by `parity.load_torch_weights`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import torch
from flax import nnx
from torch import nn

import parity

WIDTH = 16
EPS = 1e-5  # PyTorch's LayerNorm and GroupNorm default


def layer_norm(width: int, eps: float, rngs: nnx.Rngs) -> nnx.LayerNorm:
    """PyTorch's LayerNorm in NNX: its epsilon and a two-pass variance (both NNX defaults differ)."""
    return nnx.LayerNorm(width, epsilon=eps, use_fast_variance=False, rngs=rngs)


# --- an MLP stack: pre-norm residual blocks and a head ---------------------------------------------

class TorchMLPBlock(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class TorchMLPStack(nn.Module):
    def __init__(self, width: int = WIDTH, depth: int = 3) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([TorchMLPBlock(width) for _ in range(depth)])
        self.head = nn.Linear(width, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class FlaxMLPBlock(nnx.Module):
    def __init__(self, width: int, *, tanh: bool = False, eps: float = EPS, rngs: nnx.Rngs) -> None:
        self.norm = layer_norm(width, eps, rngs)
        self.fc1 = nnx.Linear(width, 4 * width, rngs=rngs)
        self.fc2 = nnx.Linear(4 * width, width, rngs=rngs)
        self.tanh = tanh

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.fc2(jax.nn.gelu(self.fc1(self.norm(x)), approximate=self.tanh))


class FlaxMLPStack(nnx.Module):
    def __init__(self, width: int = WIDTH, depth: int = 3, *, tanh_in: int | None = None,
                 eps: dict[int, float] | None = None, rngs: nnx.Rngs) -> None:
        self.blocks = nnx.List([FlaxMLPBlock(width, tanh=i == tanh_in,
                                             eps=(eps or {}).get(i, EPS), rngs=rngs)
                                for i in range(depth)])
        self.head = nnx.Linear(width, 3, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


# --- a convolution + norm net (NCHW in PyTorch, channels last in NNX) ------------------------------

class TorchConvBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm = nn.GroupNorm(2, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.norm(self.conv(x)))


class TorchConvNet(nn.Module):
    def __init__(self, channels: int = 6, depth: int = 3) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, padding=1), nn.BatchNorm2d(channels),
                                  nn.ReLU())
        self.blocks = nn.ModuleList([TorchConvBlock(channels) for _ in range(depth)])
        self.head = nn.Linear(channels, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(dim=(2, 3)))  # (B, C, H, W) -> (B, C) -> (B, 4)


class FlaxConvBlock(nnx.Module):
    def __init__(self, channels: int, *, eps: float = EPS, rngs: nnx.Rngs) -> None:
        self.conv = nnx.Conv(channels, channels, (3, 3), padding=1, rngs=rngs)
        self.norm = nnx.GroupNorm(channels, num_groups=2, epsilon=eps, use_fast_variance=False,
                                  rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + jax.nn.relu(self.norm(self.conv(x)))


class FlaxConvNet(nnx.Module):
    def __init__(self, channels: int = 6, depth: int = 3, *, eps: dict[int, float] | None = None,
                 rngs: nnx.Rngs) -> None:
        self.stem = nnx.Sequential(nnx.Conv(3, channels, (3, 3), padding=1, rngs=rngs),
                                   nnx.BatchNorm(channels, epsilon=EPS, use_fast_variance=False,
                                                 rngs=rngs),
                                   nnx.relu)
        self.blocks = nnx.List([FlaxConvBlock(channels, eps=(eps or {}).get(i, EPS), rngs=rngs)
                                for i in range(depth)])
        self.head = nnx.Linear(channels, 4, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.stem(jnp.moveaxis(x, 1, -1))  # (B, C, H, W) as PyTorch takes it -> (B, H, W, C)
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(axis=(1, 2)))  # (B, H, W, C) -> (B, C) -> (B, 4)


# --- a tiny attention block: attention + MLP, post-norm, two of them ------------------------------

HEADS = 2


class TorchAttention(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.query, self.key, self.value, self.out = (nn.Linear(width, width) for _ in range(4))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, S, D = x.shape
        q, k, v = (f(x).view(B, S, HEADS, D // HEADS).transpose(1, 2)  # (B, H, S, D/H)
                   for f in (self.query, self.key, self.value))
        scores = q @ k.transpose(-1, -2) / (D // HEADS) ** 0.5  # (B, H, S, S)
        scores = scores.masked_fill(mask[:, None, None, :] == 0, torch.finfo(scores.dtype).min)
        out = scores.softmax(-1) @ v  # (B, H, S, D/H)
        return self.out(out.transpose(1, 2).reshape(B, S, D))


class TorchEncoderBlock(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.attn = TorchAttention(width)
        self.attn_norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 2 * width)
        self.fc2 = nn.Linear(2 * width, width)
        self.out_norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.attn_norm(x + self.attn(x, mask))
        return self.out_norm(x + self.fc2(nn.functional.gelu(self.fc1(x))))


class TorchEncoder(nn.Module):
    def __init__(self, width: int = WIDTH, depth: int = 2) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([TorchEncoderBlock(width) for _ in range(depth)])

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, mask)
        return x


class FlaxAttention(nnx.Module):
    def __init__(self, width: int, *, rngs: nnx.Rngs) -> None:
        self.query, self.key, self.value, self.out = (nnx.Linear(width, width, rngs=rngs)
                                                      for _ in range(4))

    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        B, S, D = x.shape
        q, k, v = (f(x).reshape(B, S, HEADS, D // HEADS) for f in (self.query, self.key, self.value))
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / (D // HEADS) ** 0.5  # (B, H, S, S)
        scores = jnp.where(mask[:, None, None, :] == 0, jnp.finfo(scores.dtype).min, scores)
        out = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)  # (B, S, H, D/H)
        return self.out(out.reshape(B, S, D))


class FlaxEncoderBlock(nnx.Module):
    def __init__(self, width: int, *, eps: float = EPS, rngs: nnx.Rngs) -> None:
        self.attn = FlaxAttention(width, rngs=rngs)
        self.attn_norm = layer_norm(width, eps, rngs)
        self.fc1 = nnx.Linear(width, 2 * width, rngs=rngs)
        self.fc2 = nnx.Linear(2 * width, width, rngs=rngs)
        self.out_norm = layer_norm(width, EPS, rngs)

    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        x = self.attn_norm(x + self.attn(x, mask))
        return self.out_norm(x + self.fc2(jax.nn.gelu(self.fc1(x), approximate=False)))


class FlaxEncoder(nnx.Module):
    def __init__(self, width: int = WIDTH, depth: int = 2, *, eps: dict[int, float] | None = None,
                 rngs: nnx.Rngs) -> None:
        self.blocks = nnx.List([FlaxEncoderBlock(width, eps=(eps or {}).get(i, EPS), rngs=rngs)
                                for i in range(depth)])

    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        for block in self.blocks:
            x = block(x, mask)
        return x


# --- a model returning a dict, from a submodule returning one --------------------------------------

class TorchHeads(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.classifier = nn.Linear(width, 5)
        self.projection = nn.Linear(width, 8)

    def forward(self, h: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"logits": self.classifier(h), "embedding": self.projection(h)}


class TorchTwoHeads(nn.Module):
    def __init__(self, width: int = WIDTH) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width))
        self.heads = TorchHeads(width)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.trunk(x)
        return {**self.heads(h), "trunk": h}


def exact_gelu(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=False)


class FlaxHeads(nnx.Module):
    def __init__(self, width: int, *, rngs: nnx.Rngs) -> None:
        self.classifier = nnx.Linear(width, 5, rngs=rngs)
        self.projection = nnx.Linear(width, 8, rngs=rngs)

    def __call__(self, h: jax.Array) -> dict[str, jax.Array]:
        return {"logits": self.classifier(h), "embedding": self.projection(h)}


class FlaxTwoHeads(nnx.Module):
    def __init__(self, width: int = WIDTH, *, rngs: nnx.Rngs) -> None:
        self.trunk = nnx.Sequential(nnx.Linear(width, width, rngs=rngs), exact_gelu,
                                    nnx.Linear(width, width, rngs=rngs))
        self.heads = FlaxHeads(width, rngs=rngs)

    def __call__(self, x: jax.Array) -> dict[str, jax.Array]:
        h = self.trunk(x)
        return {**self.heads(h), "trunk": h}


# --- a deep stack whose float32 noise exceeds 1e-5: post-norm blocks with large norm weights ------

DEEP_WIDTH, DEEP_GAIN = 64, 100.0


class TorchDeepBlock(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + torch.relu(self.fc(x)))


class TorchDeepStack(nn.Module):
    def __init__(self, width: int = DEEP_WIDTH, depth: int = 8) -> None:
        super().__init__()
        self.layers = nn.ModuleList([TorchDeepBlock(width) for _ in range(depth)])
        with torch.no_grad():  # activations ~100: float32 rounds them by ~1e-5
            for layer in self.layers:
                layer.norm.weight.uniform_(DEEP_GAIN / 2, DEEP_GAIN)
                layer.fc.weight.mul_(3 / DEEP_GAIN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class FlaxDeepBlock(nnx.Module):
    def __init__(self, width: int, *, rngs: nnx.Rngs) -> None:
        self.fc = nnx.Linear(width, width, rngs=rngs)
        self.norm = layer_norm(width, EPS, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.norm(x + jax.nn.relu(self.fc(x)))


class FlaxDeepStack(nnx.Module):
    def __init__(self, width: int = DEEP_WIDTH, depth: int = 8, *, rngs: nnx.Rngs) -> None:
        self.layers = nnx.List([FlaxDeepBlock(width, rngs=rngs) for _ in range(depth)])

    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.layers:
            x = layer(x)
        return x


# --- breaking a port ------------------------------------------------------------------------------

def move_weight(module: nnx.Module, path: str, by: float) -> None:
    """Move the first entry of the weight at dotted `path` of `module` by `by` (list indices as
    numbers: `blocks.1.fc1.kernel`), in place."""
    *modules, leaf = path.split(".")
    for name in modules:
        module = module[int(name)] if name.isdigit() else getattr(module, name)
    weight = getattr(module, leaf)
    weight[...] = weight[...].at[(0,) * weight.ndim].add(by)


# --- building pairs ----------------------------------------------------------------------------------

PORTS = {"mlp": (TorchMLPStack, FlaxMLPStack), "conv": (TorchConvNet, FlaxConvNet),
         "attention": (TorchEncoder, FlaxEncoder), "dict": (TorchTwoHeads, FlaxTwoHeads),
         "deep": (TorchDeepStack, FlaxDeepStack)}


def torch_model(kind: str, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = PORTS[kind][0]()
    if kind == "conv":  # running statistics a real BatchNorm would have learned
        norm = model.stem[1]
        norm.running_mean.uniform_(-0.5, 0.5)
        norm.running_var.uniform_(0.5, 2.0)
    return model


def pair(kind: str, seed: int = 0, **fault: object) -> tuple[nnx.Module, nn.Module]:
    """(the NNX port with `fault`, the PyTorch model), holding the same weights. The port is
    built abstract (`nnx.eval_shape`: no random numbers, whose initialisers compile op by op,
    seconds here) and every variable filled in by loading."""
    reference = torch_model(kind, seed)
    port = nnx.eval_shape(lambda: PORTS[kind][1](**fault, rngs=nnx.Rngs(seed)))
    return parity.load_torch_weights(port, reference), reference


def inputs(kind: str, seed: int = 0) -> tuple[np.ndarray, ...]:
    """What both models take: (B, S, D) rows; (B, C, H, W) images for the conv net (H != W != C,
    so that the channel axis is where its size says); rows and a padding mask (B, S) for the
    attention block."""
    rng = np.random.default_rng(seed)
    if kind == "conv":
        return (rng.standard_normal((2, 3, 5, 7)).astype(np.float32),)
    if kind == "deep":
        return ((rng.standard_normal((8, DEEP_WIDTH)) * DEEP_GAIN).astype(np.float32),)
    x = rng.standard_normal((2, 6, WIDTH)).astype(np.float32)
    if kind == "attention":
        mask = np.ones((2, 6), np.int32)
        mask[1, 4:] = 0  # the second row padded
        return x, mask
    return (x,)
