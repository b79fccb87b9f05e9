"""`parity.load_torch_weights` and `parity.to_torch_state_dict` (issue 60): weights between any
NNX module and any PyTorch module by dotted name, with the standard layout rules (a dense
kernel transposed, a convolution's (*spatial, in, out) <-> (out, in, *spatial), norms' and
embeddings' `weight` <-> `scale` / `embedding`, BatchNorm's running statistics), strictly.
No comparison runs here: a round trip is checked by running the PyTorch model on the weights
that went through Flax (bitwise equal: nothing is computed on the way).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from ports import PORTS, inputs, pair, torch_model
from torch import nn

import parity
from bertjax.errors import InputError


@pytest.mark.parametrize("kind", sorted(PORTS))
def test_weights_go_through_flax_and_back_unchanged(kind):
    port, reference = pair(kind)
    state = parity.to_torch_state_dict(port)
    fresh = torch_model(kind, seed=1)
    fresh.load_state_dict(state, strict=True)  # every name and shape as PyTorch's own
    for name, tensor in reference.state_dict().items():
        assert torch.equal(state[name], tensor), name
    x = tuple(torch.from_numpy(a) for a in inputs(kind))
    with torch.no_grad():
        ours, theirs = fresh.eval()(*x), reference.eval()(*x)
    ours, theirs = (out if isinstance(out, dict) else {"": out} for out in (ours, theirs))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_the_layouts_are_pytorch_s():
    port, reference = pair("conv")
    conv = port.blocks[0].conv.kernel[...]  # (3, 3, in, out)
    weight = reference.blocks[0].conv.weight.detach().numpy()  # (out, in, 3, 3)
    assert conv.shape == (3, 3, 6, 6) and np.array_equal(conv[1, 2, 4, 5], weight[5, 4, 1, 2])
    dense = port.head.kernel[...]  # (in, out)
    assert np.array_equal(dense, reference.head.weight.detach().numpy().T)
    norm = port.stem.layers[1]  # nnx.Sequential's `layers` is nn.Sequential's numbering
    assert np.array_equal(norm.mean[...], reference.stem[1].running_mean.numpy())
    assert np.array_equal(norm.var[...], reference.stem[1].running_var.numpy())
    assert np.array_equal(port.blocks[2].norm.scale[...], reference.blocks[2].norm.weight.detach())


class TorchEmbedder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(11, 8)
        self.norm = nn.RMSNorm(8, eps=1e-6)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.norm(self.tokens(ids))


class FlaxEmbedder(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.tokens = nnx.Embed(11, 8, rngs=rngs)
        self.norm = nnx.RMSNorm(8, epsilon=1e-6, rngs=rngs)

    def __call__(self, ids: jax.Array) -> jax.Array:
        return self.norm(self.tokens(ids))


def test_embeddings_and_rms_norms_load_by_the_same_rules():
    torch.manual_seed(0)
    reference = TorchEmbedder()
    with torch.no_grad():
        reference.norm.weight.uniform_(0.5, 1.5)
    port = parity.load_torch_weights(nnx.eval_shape(lambda: FlaxEmbedder(rngs=nnx.Rngs(0))),
                                     reference)  # an abstract module, every variable filled in
    ids = np.array([[1, 5, 10], [0, 2, 3]], np.int32)
    with torch.no_grad():
        expected = reference(torch.from_numpy(ids).long()).numpy()
    np.testing.assert_allclose(np.asarray(port(jnp.asarray(ids))), expected, atol=1e-6)
    assert set(parity.to_torch_state_dict(port)) == {"tokens.weight", "norm.weight"}


def test_a_state_dict_that_does_not_fit_is_refused_in_one_error_naming_each_problem():
    port, reference = pair("mlp")
    state = dict(reference.state_dict())
    del state["blocks.0.fc1.bias"]
    state["blocks.0.extra.weight"] = torch.zeros(3)
    state["head.weight"] = torch.zeros(3, 15)
    kept = np.array(port.blocks[0].fc1.kernel[...])
    with pytest.raises(InputError) as err:
        parity.load_torch_weights(port, {k: v + 1 for k, v in state.items()})
    lines = str(err.value).splitlines()
    assert lines[0] == "the weights do not fit FlaxMLPStack (3 problems):"
    assert lines[1:4] == [
        "  missing blocks.0.fc1.bias (Flax blocks.0.fc1.bias, expected shape (64,))",
        "  unexpected blocks.0.extra.weight (shape (3,))",
        "  wrong shape for head.weight: expected (3, 16) (Flax head.kernel (16, 3)), found (3, 15)",
    ]
    assert "name_map" in lines[4]
    assert np.array_equal(port.blocks[0].fc1.kernel[...], kept)  # nothing copied


def test_name_maps_rename_prefixes_or_names_and_leave_out_none():
    port, reference = pair("dict")
    renamed = {k.replace("heads.", "outputs."): v for k, v in reference.state_dict().items()}
    with pytest.raises(InputError, match="missing heads.classifier.weight"):
        parity.load_torch_weights(port, renamed)
    parity.load_torch_weights(port, renamed, name_map={"heads": "outputs"})
    parity.load_torch_weights(port, renamed, name_map=lambda n: n.replace("heads.", "outputs."))
    assert set(parity.to_torch_state_dict(port, name_map={"heads": "outputs"})) == set(renamed)
    without = {k: v for k, v in reference.state_dict().items() if not k.startswith("trunk.2")}
    parity.load_torch_weights(port, without, name_map={"trunk.2": None})  # left as it is
    with pytest.raises(InputError, match="name_map sends both heads.classifier.bias and "
                                         "heads.projection.bias to x"):
        parity.load_torch_weights(port, reference, name_map=lambda n: "x" if "bias" in n else n)
    with pytest.raises(InputError, match="name_map is a list: pass a dict"):
        parity.load_torch_weights(port, reference, name_map=["heads"])
    with pytest.raises(InputError, match="weights: a torch.nn.Module or a state dict"):
        parity.load_torch_weights(port, [1, 2])


def test_a_transposed_convolution_is_refused_not_guessed():
    port = nnx.eval_shape(lambda: nnx.ConvTranspose(2, 3, (2, 2), rngs=nnx.Rngs(0)))
    with pytest.raises(InputError, match="^kernel: no layout rule for a ConvTranspose kernel .* "
                                         "map 'weight' to None in name_map$"):
        parity.load_torch_weights(port, {"weight": torch.zeros(3, 2, 2, 2), "bias": torch.ones(3)})
    parity.load_torch_weights(port, {"bias": torch.ones(3)}, name_map={"weight": None})
    assert np.array_equal(port.bias[...], np.ones(3))
