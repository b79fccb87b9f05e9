"""Compare bertjax with bert_torch tensor by tensor: outputs, attentions, hidden states, gradients.

Both models hold the same weights (converted by `parity.convert`), see the same padded batch and
run without dropout; the mirror runs twice, in float32 (the reference) and in float64 (its noise).
Each tensor is judged by `parity.noise`: a forward tensor on its max abs diff, a gradient on its
max abs diff relative to that gradient's max magnitude, against max(`tolerance` or
`grad_tolerance`, NOISE_FACTOR x the float32 mirror's own distance from the float64 one).

A gradient smaller than `GRAD_FLOOR` times the model's largest gradient is judged relative to that
floor instead: the NSP bias gradient is a cancelling sum of (p - y) terms of size ~0.5 and the
attention key-bias gradients are exactly zero in exact arithmetic (softmax is shift-invariant), so
dividing their float32 round-off by their own ~0 magnitude would measure nothing but the division.

Any model class compares: the outputs its class computes (`OUTPUT_FIELDS`), on its inputs
(`model_inputs`: masked positions for the masked-LM classes, choices for multiple choice), and
the gradients of BERT's pre-training loss (BertForPreTraining) or of a fixed random projection of
the class's outputs (the rest), the same function in both frameworks.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from bertjax.config import BertConfig
from bertjax.io.weights import state_to_numpy
from bertjax.losses import pretraining_loss
from parity.capture import FlaxCapture, TorchCapture
from parity.convert import flax_to_torch, to_torch_model
from parity.module_report import ModuleReport, ModuleRow, inputs_passed
from parity.noise import Judged, judge, max_abs

TOLERANCE = 1e-5  # the Hugging Face PT/Flax equivalence-test tolerance
GRAD_FLOOR = 1e-2  # gradients below 1% of the largest one are judged against that 1%
Row = Judged  # a row of the report: one tensor, judged by `parity.noise`


@dataclasses.dataclass
class ParityReport:
    rows: list[Row]
    layers: tuple[str, ...] = ()  # the modules the per-layer rows are the outputs of, in call order

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.rows)

    @property
    def first_divergence(self) -> str | None:
        """The first layer (`bert.embeddings`, `bert.layers.3`) whose output fails while its input
        passed, as `parity.compare_modules` names it; None when none does, or when the layers ran
        inside a transform of their own (`scan_layers`, `remat`) and were not captured."""
        per_layer = [r for r in self.rows if isinstance(r, ModuleRow)]
        return ModuleReport(sorted(per_layer, key=lambda r: self.layers.index(r.module))
                            ).first_divergence

    def row(self, name: str) -> Row:
        return next(r for r in self.rows if r.name == name)

    def worst(self, prefix: str) -> float:
        """Largest max abs diff among rows whose name starts with `prefix`."""
        return max(r.max_abs for r in self.rows if r.name.startswith(prefix))

    def format(self) -> str:
        """One line per tensor: its distance from the float32 mirror (abs and rel), the float32
        mirror's own from float64 (`f32 noise`, measured as the tensor is judged), the bar
        (`parity.noise.bar`) and the result; then how many passed."""
        width = max(len(r.name) for r in self.rows)
        lines = [f"{'tensor':<{width}}  {'max abs':>10}  {'max rel':>10}  {'f32 noise':>14}  "
                 f"{'bar':>14}  result"]
        for r in self.rows:
            kind = "rel " if r.relative else "abs "
            lines.append(
                f"{r.name:<{width}}  {r.max_abs:10.3e}  {r.max_rel:10.3e}  "
                f"{kind + format(r.noise, '.3e'):>14}  {kind + format(r.bar, '.3e'):>14}  "
                f"{'ok' if r.passed else 'FAIL'}"
            )
        failed = sum(not r.passed for r in self.rows)
        lines.append(f"{len(self.rows) - failed} passed, {failed} failed")
        return "\n".join(lines)


def gradient_floor(ref_grads: dict[str, Any]) -> float:
    """`GRAD_FLOOR` times the largest reference gradient: no gradient is judged on a smaller scale."""
    return GRAD_FLOOR * max(max_abs(g) for g in ref_grads.values())


def gradient_errors(ours: dict[str, Any], ref: dict[str, Any]) -> dict[str, float]:
    """Each gradient's max abs difference over its reference's max magnitude (floored)."""
    if set(ours) != set(ref):
        raise ValueError(f"gradient names differ: {sorted(set(ours) ^ set(ref))}")
    floor = gradient_floor(ref)
    return {n: max_abs(np.asarray(ours[n], np.float64) - np.asarray(ref[n], np.float64))
            / max(max_abs(ref[n]), floor) for n in ref}




def random_batch(
    config: BertConfig,
    *,
    batch_size: int = 2,
    seq_len: int = 16,
    num_predictions: int = 4,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """A pre-training batch with varied lengths (padding), padded prediction slots, NSP labels."""
    rng = np.random.default_rng(seed)
    B, S, P = batch_size, seq_len, num_predictions
    lengths = rng.integers(max(2, S // 2), S + 1, size=B)
    lengths[0] = S  # one full row, the others padded
    attention_mask = (np.arange(S)[None, :] < lengths[:, None]).astype(np.int32)  # (B, S)
    input_ids = rng.integers(1, config.vocab_size, size=(B, S)).astype(np.int32)
    input_ids = np.where(attention_mask == 1, input_ids, config.pad_token_id).astype(np.int32)
    token_type_ids = ((np.arange(S)[None, :] >= lengths[:, None] // 2) & (attention_mask == 1))
    token_type_ids = (token_type_ids * (config.type_vocab_size > 1)).astype(np.int32)
    masked_positions = np.stack([rng.integers(1, n, size=P) for n in lengths]).astype(np.int32)
    masked_weights = np.ones((B, P), np.float32)
    masked_weights[1:, P - 1] = 0.0  # padding prediction slots weigh nothing
    return {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": attention_mask,
        "masked_positions": masked_positions,
        "masked_ids": rng.integers(0, config.vocab_size, size=(B, P)).astype(np.int32),
        "masked_weights": masked_weights,
        "next_sentence_label": rng.integers(0, 2, size=B).astype(np.int32),
    }


# The outputs compared, in report order: those a class computes (the rest are None in both).
OUTPUT_FIELDS = ("mlm_logits", "nsp_logits", "logits", "start_logits", "end_logits",
                 "sequence_output", "pooled_output")
CHOICES = 2  # multiple choice: each row of the batch and the next one, as two choices


def masked_lm(model: Any) -> bool:
    """Whether `model`'s class has the masked-LM head (its call takes `masked_positions`)."""
    return type(model).spec.masked_lm


def model_inputs(model: Any, batch: dict[str, np.ndarray], masked: bool) -> tuple[Any, ...]:
    """The positional inputs of `model`'s class for `batch`: (ids, token types, mask), plus
    masked positions (or None) for the masked-LM classes; for multiple choice (B, C, S)."""
    ids, types, mask = batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]
    if type(model).spec.choices:
        def choices(x: np.ndarray) -> np.ndarray:  # (B, S) -> (B, C, S)
            return np.stack([np.roll(x, -c, axis=0) for c in range(CHOICES)], axis=1)
        return choices(ids), choices(types), choices(mask)
    if masked_lm(model):
        return ids, types, mask, (batch["masked_positions"] if masked else None)
    return ids, types, mask


def _probe_weights(field: str, shape: tuple[int, ...]) -> np.ndarray:
    """Fixed random weights of an output `field` (seeded by its name): the probe loss."""
    rng = np.random.default_rng(zlib.crc32(field.encode()))
    return rng.standard_normal(shape).astype(np.float32)


def probe_fields(model: Any) -> tuple[str, ...]:
    """The outputs of `model`'s class (what its head computes; the encoder's for BertModel, whose
    pooled output a family without a pooler lacks: DistilBERT, ELECTRA)."""
    pooled = getattr(model, "pooler", None) is not None  # a head class's outputs are its head's
    return tuple(f for f in type(model).spec.hf_outputs if pooled or f != "pooled_output")


def _loss(model: Any, out: Any, batch: dict[str, Any], xp: Any, pretraining: Callable) -> Any:
    """The scalar the gradients are taken of: BERT's MLM + NSP loss for BertForPreTraining, for
    any other class a fixed random projection of its outputs (mean of output x weights, summed
    over its fields), the same function in both frameworks."""
    if type(model).spec.pretraining:
        return pretraining(out.mlm_logits, out.nsp_logits, batch)[0]
    total = 0.0
    for field in probe_fields(model):
        value = getattr(out, field)
        total = total + (value * xp(_probe_weights(field, tuple(value.shape)))).mean()
    return total


def layer_modules(model: Any) -> tuple[str, ...]:
    """The modules whose outputs the per-layer rows are, in call order, named as
    `parity.capture` names them: the embeddings (ELECTRA's narrower ones: their projection to
    hidden_size), whose output is hidden_states.0, then each layer (hidden_states.{i+1},
    attentions.{i})."""
    prefix = type(model).base_model_prefix
    encoder, at = (getattr(model, prefix), f"{prefix}.") if prefix else (model, "")
    project = getattr(encoder, "embeddings_project", None)  # ModernBERT's encoder has none
    first = "embeddings" if project is None else "embeddings_project"
    return (at + first, *(f"{at}layers.{i}" for i in range(model.config.num_hidden_layers)))


def _flax_side(model: Any, batch: dict[str, np.ndarray], masked: bool) -> Any:
    graphdef, params, *others = nnx.split(model, nnx.Param, ...)
    rest = others[0]  # the model's other state (one State for `...`)
    jbatch = {k: jnp.asarray(v) for k, v in batch.items()}
    args = tuple(None if x is None else jnp.asarray(x) for x in model_inputs(model, batch, masked))
    layers = layer_modules(model)

    def forward(params: nnx.State) -> tuple[Any, dict[str, Any]]:
        m = nnx.merge(graphdef, params, rest)
        with FlaxCapture(m, only=layers) as calls:  # values the outputs hold anyway: same program
            out = m(*args, output_attentions=True, output_hidden_states=True)
        return out, {c.name: (c.inputs, c.outputs) for c in calls}

    def loss(params: nnx.State) -> tuple[jax.Array, Any]:
        out, calls = forward(params)
        return _loss(model, out, jbatch, jnp.asarray, pretraining_loss), (out, calls)

    # jitted: run op by op, every primitive compiles apart, which on a GPU took minutes for base
    with jax.default_matmul_precision("highest"):
        if masked or not masked_lm(model):
            (_, (out, calls)), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
            return out, calls, state_to_numpy(grads)
        return *jax.jit(forward)(params), None


def _tensors(out: Any, to_numpy: Callable[[Any], np.ndarray]) -> dict[str, np.ndarray]:
    """Every tensor the report compares, by its row name: the class's outputs, each layer's
    attention map and each hidden state."""
    found = {f: to_numpy(getattr(out, f)) for f in OUTPUT_FIELDS if getattr(out, f) is not None}
    found |= {f"attentions.{i}": to_numpy(a) for i, a in enumerate(out.attentions)}
    found |= {f"hidden_states.{i}": to_numpy(h) for i, h in enumerate(out.hidden_states)}
    return found


def _per_layer(layers: tuple[str, ...], *sides: dict[str, Any]) -> dict[str, str] | None:
    """Row name -> the module of `layers` whose captured output it is (`layer_modules`); None
    where a layer was not captured on every side (it ran inside `lax.scan` or `jax.checkpoint`)."""
    first, *rest = layers
    if not all(n in calls and (n == first or "[1]" in calls[n][1]) for calls in sides for n in layers):
        return None
    return {**{f"attentions.{i}": n for i, n in enumerate(rest)}, "hidden_states.0": first,
            **{f"hidden_states.{i + 1}": n for i, n in enumerate(rest)}}


def _layer_tensor(name: str, module: str, calls: dict[str, Any]) -> np.ndarray:
    """A per-layer row's array from its module's captured (inputs, outputs): the embeddings'
    output, a layer's output (`[0]`) or its attention probabilities (`[1]`)."""
    outputs = calls[module][1]
    key = "" if name == "hidden_states.0" else "[1]" if name.startswith("attentions.") else "[0]"
    return np.asarray(outputs[key])


def _torch_side(model: Any, torch_model: Any, batch: dict[str, np.ndarray], masked: bool
                ) -> tuple[dict[str, np.ndarray], dict[str, Any], dict[str, np.ndarray] | None]:
    """(tensors, the layers' captured (inputs, outputs), gradients or None) of `torch_model`,
    `model`'s PyTorch mirror (float32 or float64)."""
    import torch

    from bert_torch.losses import pretraining_loss as torch_loss

    tbatch = {k: torch.from_numpy(v) for k, v in batch.items()}
    args = tuple(None if x is None else torch.from_numpy(np.ascontiguousarray(x))
                 for x in model_inputs(model, batch, masked))
    with TorchCapture(torch_model, only=layer_modules(model)) as calls:
        out = torch_model(*args, output_attentions=True, output_hidden_states=True)
    tensors = _tensors(out, lambda t: t.detach().numpy())
    captured = {c.name: (c.inputs, c.outputs) for c in calls}
    if not masked and masked_lm(model):
        return tensors, captured, None
    _loss(model, out, tbatch, torch.from_numpy, torch_loss).backward()
    return tensors, captured, {n: p.grad.numpy() for n, p in torch_model.named_parameters()}


def compare(
    model: Any,
    batch: dict[str, np.ndarray] | None = None,
    *,
    masked: bool = True,
    tolerance: float = TOLERANCE,
    grad_tolerance: float = TOLERANCE,
    reference: Any = None,
) -> ParityReport:
    """Run `model` (any bertjax model class) and its PyTorch mirror on `batch`; report every
    output of its class, attention map, hidden state and every gradient (of the MLM + NSP loss
    for BertForPreTraining, where `masked` (the MLM head at the masked positions) defines it; of
    a fixed random projection of the outputs for any other class), each judged against the
    mirror's float32 noise (`parity.noise`: the mirror runs in float64 too). The mirror holds
    `model`'s weights, or those of `reference` (a model of the same class) if given: how a model
    whose weights differ from the right ones shows."""
    batch = random_batch(model.config) if batch is None else batch
    out, calls, our_grads = _flax_side(model, batch, masked)
    ours = _tensors(out, np.asarray)
    mirrored = model if reference is None else reference
    weights = flax_to_torch(mirrored)  # one conversion for both mirrors
    (ref, calls32, ref_grads), (ref64, calls64, ref64_grads) = (
        _torch_side(mirrored, to_torch_model(mirrored, float64=float64, state_dict=weights), batch,
                    masked) for float64 in (False, True))
    if set(ours) != set(ref):
        raise ValueError(f"outputs computed by only one of bertjax and PyTorch: "
                         f"{sorted(set(ours) ^ set(ref))}")
    layers, sides = layer_modules(model), (calls, calls32, calls64)
    per_layer = _per_layer(layers, *sides) or {}
    for tensors, captured in zip((ours, ref, ref64), sides, strict=True):  # the same arrays
        tensors |= {name: _layer_tensor(name, m, captured) for name, m in per_layer.items()}
    rows = [judge(name, ours[name], ref[name], ref64[name], tolerance) for name in ours]
    rows = [_with_inputs(r, per_layer[r.name], sides) if r.name in per_layer else r for r in rows]
    if our_grads is not None:
        assert ref_grads is not None and ref64_grads is not None  # the same `masked` as ours
        if set(our_grads) != set(ref_grads):
            raise ValueError(
                f"gradient names differ: only bertjax {sorted(set(our_grads) - set(ref_grads))}, "
                f"only PyTorch {sorted(set(ref_grads) - set(our_grads))}"
            )
        floor = gradient_floor(ref_grads)
        rows += [judge(f"grad.{n}", our_grads[n], ref_grads[n], ref64_grads[n], grad_tolerance,
                       relative=True, floor=floor)
                 for n in sorted(our_grads)]
    return ParityReport(rows, layers if per_layer else ())


def _with_inputs(row: Judged, module: str,
                 sides: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]) -> ModuleRow:
    """A per-layer row with its module and whether every input that module was fed passed (what
    `first_divergence` reads), judged as the row is."""
    ours, ref32, ref64 = (captured[module][0] for captured in sides)
    passed = inputs_passed(ours, ref32, ref64, row.tolerance)
    return ModuleRow(row.name, row.max_abs, row.noise_abs, row.scale, row.tolerance, row.relative,
                     module, 0, passed)
