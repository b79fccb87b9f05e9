"""`parity.compare_modules` (issue 60): any NNX port beside its PyTorch original, submodule by
submodule, on small models no part of bertjax knows (`ports.py`: an MLP stack, a convolution +
norm net, a tiny attention block, a model returning a dict, a deep stack).

A correct port passes; a port with one defect fails, and `first_divergence` names the submodule
holding it, not a later one that only received its output. Tolerance 1e-5 (abs for outputs,
relative to each gradient's scale for gradients), or 3 x float32 PyTorch's own distance from
float64 PyTorch where larger.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from ports import DEEP_WIDTH, FlaxDeepBlock, inputs, move_weight, pair, torch_model
from torch import nn

import parity
from bertjax.errors import InputError
from parity.tensors import TOLERANCE


@pytest.mark.parametrize("kind", ["mlp", "conv", "attention", "dict"])
def test_a_correct_port_passes(kind):
    port, reference = pair(kind)
    report = parity.compare_modules(port, reference, inputs(kind))
    assert report.passed and report.first_divergence is None, report.format()
    with_params = {name for name, m in reference.named_modules()  # each one called is judged
                   if next(m.parameters(), None) is not None and not isinstance(m, nn.ModuleList)}
    assert with_params <= {r.module for r in report.rows if not r.is_gradient}
    assert {r.name for r in report.rows if r.is_gradient} == {
        f"grad.{name}" for name, _ in reference.named_parameters()}
    assert report.format().splitlines()[0] == (
        "first divergence: none, every output and gradient within its bar")


def _move(path: str, by: float):
    """A fault: the first entry of the Flax weight at dotted `path` moved by `by`."""
    return lambda port, reference: move_weight(port, path, by)


def _not_transposed(port: nnx.Module, reference: nn.Module) -> None:
    """A fault: one square kernel copied as PyTorch holds it, (out, in), not transposed."""
    port.blocks[1].attn.key.kernel[...] = jnp.asarray(reference.blocks[1].attn.key.weight.detach())


FAULTS = {  # id: (model, how the port is built, a fault put in after loading, where it is)
    "tanh-gelu": ("mlp", {"tanh_in": 1}, None, "blocks.1"),
    "layer-norm-eps": ("mlp", {"eps": {1: 1e-12}}, None, "blocks.1.norm"),
    "attention-layer-norm-eps": ("attention", {"eps": {1: 1e-12}}, None, "blocks.1.attn_norm"),
    "kernel-not-transposed": ("attention", {}, _not_transposed, "blocks.1.attn.key"),
    "mlp-weight-moved": ("mlp", {}, _move("blocks.1.fc1.kernel", 1e-3), "blocks.1.fc1"),
    "conv-weight-moved": ("conv", {}, _move("blocks.1.conv.kernel", 1e-3), "blocks.1.conv"),
    "dict-weight-moved": ("dict", {}, _move("heads.projection.kernel", 1e-3), "heads.projection"),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_a_port_with_one_defect_fails_where_the_defect_is(fault):
    kind, build, put_in, where = FAULTS[fault]
    port, reference = pair(kind, **build)
    if put_in is not None:
        put_in(port, reference)
    # a port built differently compiles anew: its outputs say where, gradients need not be taken
    report = parity.compare_modules(port, reference, inputs(kind), gradients=put_in is not None)
    assert not report.passed and report.first_divergence == where, report.format()
    first = [r for r in report.rows if r.module == where and not r.is_gradient]
    assert all(r.inputs_passed for r in first) and not all(r.passed for r in first)
    before = report.rows[:report.rows.index(first[0])]  # (what holds `where` fails with it)
    assert all(r.passed for r in before if not (r.module == "" or where.startswith(r.module + ".")))
    assert report.format().splitlines()[0].startswith(f"first divergence: {where}: output ")


def test_the_float32_noise_is_judged_per_tensor():
    """A deep stack with activations ~100, whose float32 noise exceeds 1e-5: the right port passes
    (a fixed 1e-5 would fail it), one weight moved by 1e-4 fails where it is."""
    port, reference = pair("deep")
    x = inputs("deep")
    report = parity.compare_modules(port, reference, x)
    assert report.passed, report.format()
    assert sum(r.noise > TOLERANCE for r in report.rows) >= 10  # float32's own distance
    assert any(r.distance > r.tolerance for r in report.rows)
    _move("layers.3.fc.kernel", 1e-4)(port, reference)
    moved = parity.compare_modules(port, reference, x)
    assert moved.first_divergence == "layers.3.fc", moved.format()
    assert moved.row("layers.3.fc").distance > 10 * moved.row("layers.3.fc").bar
    assert moved.row("layers.2").passed
    noisy = moved.row("layers.3")  # its bar is float32's noise, above 1e-5: still far past it
    assert noisy.bar > TOLERANCE and noisy.distance > 10 * noisy.bar


def test_assert_modules_match_raises_with_the_report():
    port, reference = pair("mlp")
    assert parity.assert_modules_match(port, reference, inputs("mlp")).passed
    _move("blocks.1.fc1.kernel", 1e-3)(port, reference)
    with pytest.raises(AssertionError, match=r"(?s)first divergence: blocks\.1\.fc1: .*"
                                             r"blocks\.1\.fc1 .* FAIL"):
        parity.assert_modules_match(port, reference, inputs("mlp"))


# --- names that differ ------------------------------------------------------------------------------

class TorchTwice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.out = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.out(self.fc(x))))  # `out` twice


class FlaxTwice(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.dense = nnx.Linear(8, 8, rngs=rngs)
        self.proj = nnx.Linear(8, 8, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.proj(jax.nn.relu(self.proj(self.dense(x))))


def test_names_that_differ_are_paired_by_name_map():
    torch.manual_seed(0)
    reference, port = TorchTwice(), nnx.eval_shape(lambda: FlaxTwice(rngs=nnx.Rngs(0)))
    x = (np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32),)
    name_map = {"dense": "fc", "proj": "out"}
    parity.load_torch_weights(port, reference, name_map=name_map)
    with pytest.raises(InputError) as err:
        parity.compare_modules(port, reference, x, gradients=False)
    message = str(err.value)
    assert "\n" not in message and "name_map" in message
    assert "Flax only dense, proj, proj (call 2); PyTorch only fc, out, out (call 2)" in message
    report = parity.compare_modules(port, reference, x, name_map=name_map, gradients=False)
    assert report.passed, report.format()
    assert [r.name for r in report.rows] == ["(root)", "dense", "proj", "proj (call 2)"]


class FlaxScanStack(nnx.Module):
    """The deep stack's layers stacked (L, ...) and run by `nnx.scan`: no layer is called on its
    own, so none has a row; the PyTorch layers are left out by name_map."""

    def __init__(self, *, rngs: nnx.Rngs) -> None:
        @nnx.split_rngs(splits=8)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def layers(rngs: nnx.Rngs) -> FlaxDeepBlock:
            return FlaxDeepBlock(DEEP_WIDTH, rngs=rngs)

        self.layers = layers(rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
        def step(x: jax.Array, layer: FlaxDeepBlock) -> jax.Array:
            return layer(x)

        return step(x, self.layers)


def test_layers_run_by_a_jax_transform_are_judged_by_what_they_return():
    reference = torch_model("deep")
    port = nnx.eval_shape(lambda: FlaxScanStack(rngs=nnx.Rngs(0)))
    state = reference.state_dict()
    for path in ("fc.kernel", "fc.bias", "norm.scale", "norm.bias"):
        module, leaf = path.split(".")
        torch_leaf = "weight" if leaf in ("kernel", "scale") else leaf
        stacked = np.stack([state[f"layers.{i}.{module}.{torch_leaf}"].numpy() for i in range(8)])
        getattr(getattr(port.layers, module), leaf).set_value(  # (L, out, in) -> (L, in, out)
            jnp.asarray(stacked.transpose(0, 2, 1) if leaf == "kernel" else stacked))
    with pytest.raises(InputError, match=r"Flax only none; PyTorch only layers\.0, layers\.0\.fc"):
        parity.compare_modules(port, reference, inputs("deep"), gradients=False)
    report = parity.compare_modules(port, reference, inputs("deep"), gradients=False,
                                    name_map={"layers": None})
    assert report.passed and [r.name for r in report.rows] == ["(root)"], report.format()


# --- what a user gets wrong: one line each ----------------------------------------------------------

@pytest.mark.parametrize("given, problem", [
    ([np.zeros((2, 6, 16), np.float32)], "inputs is a list: pass a tuple"),
    ((torch.zeros(2, 6, 16),), "inputs[0] is a torch.Tensor: pass NumPy arrays"),
    ({"x": jnp.zeros((2, 6, 16))}, "inputs['x'] is a jaxlib"),
])
def test_inputs_of_the_wrong_kind_are_refused_in_one_line(given, problem):
    port, reference = pair("mlp")
    with pytest.raises(InputError) as err:
        parity.compare_modules(port, reference, given)
    assert problem in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(InputError, match="torch_module is a FlaxMLPStack: pass a torch.nn.Module"):
        parity.compare_modules(port, port, inputs("mlp"))


class MadeInFloat32(nn.Module):
    """Makes a float32 tensor of its own: runs in float32, fails as a float64 copy."""

    def __init__(self, cast: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.cast = cast

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.cast:  # quietly back to float32
            return self.fc(x).float()
        return self.fc(x) @ torch.eye(4)


class FlaxLinear(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.fc = nnx.Linear(4, 4, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.fc(x)


@pytest.mark.parametrize("cast", [False, True])
def test_a_module_that_cannot_run_in_float64_is_refused_in_one_line(cast):
    reference = MadeInFloat32(cast)
    port = parity.load_torch_weights(nnx.eval_shape(lambda: FlaxLinear(rngs=nnx.Rngs(0))), reference)
    with pytest.raises(InputError, match="MadeInFloat32 cannot run in float64") as err:
        parity.compare_modules(port, reference, (np.ones((2, 4), np.float32),), gradients=False)
    assert "\n" not in str(err.value) and "x.dtype" in str(err.value)
    assert ("MadeInFloat32 is float32 in its float64 copy" if cast else "RuntimeError") in str(err.value)


# --- nothing left behind ---------------------------------------------------------------------------

def test_nothing_is_left_behind():
    port, reference = pair("conv")
    reference.train()
    reference.head.weight.requires_grad_(False)
    before = jax.tree.map(np.array, nnx.state(port))
    calls = {cls: cls.__dict__.get("__call__") for cls in (nnx.Conv, nnx.BatchNorm, nnx.Sequential)}
    precision, tf32 = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    jax_precision = jax.config.jax_default_matmul_precision
    torch.set_float32_matmul_precision("high")
    try:
        assert parity.compare_modules(port, reference, inputs("conv")).passed
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(precision)
    assert torch.backends.cudnn.allow_tf32 == tf32 and torch.get_default_dtype() == torch.float32
    assert jax.config.jax_default_matmul_precision == jax_precision
    for m in reference.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks and m.training
    assert not reference.head.weight.requires_grad and reference.stem[0].weight.requires_grad
    assert all(p.grad is None for p in reference.parameters())  # nothing accumulated
    assert {cls: cls.__dict__.get("__call__") for cls in calls} == calls
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(before),
                                                    jax.tree.leaves(nnx.state(port)), strict=True))
    assert not port.stem.layers[1].use_running_average  # still as it was built: training
