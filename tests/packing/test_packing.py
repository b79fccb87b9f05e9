"""Packed rows: several sequences per row, each with its own [CLS], token types and positions from
0, attention kept inside each. For every model class, in bertjax (exact and fused attention) and in
the bert_torch mirror, a packed batch gives each sequence's outputs as running it alone, unpadded,
and the gradients of a loss summed over sequences as the sum of the sequences' gradients; the
outputs equal transformers run sequence by sequence; and no sequence sees another.

Each sequence alone runs in the bert_torch mirror of the same weights (tests/parity/test_heads.py holds
the mirror equal to bertjax and to transformers on unpadded rows): bertjax, op by op, would
compile every operation again for each of six new shapes, the mirror compiles nothing. The packed
batch's outputs and gradients in bertjax are one compiled program per class and attention.

Tolerances (float32, the tiny preset with perturbed biases and LayerNorm weights):
- outputs: 1e-5 max abs against the sequences run alone and against transformers;
- gradients: 1e-5 of each parameter gradient's largest entry (floored at 1% of the largest
  gradient, `parity.tensors.gradient_errors`): the packed batch sums over other rows, in another
  order (and bertjax's in another framework than the mirror's sequences alone);
- no leak: changing sequence 2 leaves the other sequences' outputs bitwise unchanged (masked keys
  get an exact 0 probability).
"""

from __future__ import annotations

import zlib

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx

import bert_torch
from bertjax import BertConfig, inputs
from bertjax.config.heads import MODELS
from bertjax.data.packing import pack_sequences
from bertjax.heads import MODEL_CLASSES
from bertjax.io.weights import state_to_numpy
from bertjax.pretrained import save_pretrained
from parity.convert import to_torch_model
from parity.tensors import gradient_errors

TOL = 1e-5
CONFIG = BertConfig.from_preset("tiny", vocab_size=99, type_vocab_size=3, initializer_range=0.1,
                                max_position_embeddings=40, id2label=("a", "b", "c"))
SEQ_LEN = 20
LENGTHS = (9, 5, 12, 7, 3, 6)
# Where each class's outputs are read per sequence: at its tokens, its [CLS] slot, or its masked
# positions. BertForPreTraining runs at masked positions (the last layer at [CLS] and those rows).
FIELDS = {
    "BertModel": {"sequence_output": "tokens", "pooled_output": "cls"},
    "BertForPreTraining": {"mlm_logits": "masked", "nsp_logits": "cls"},
    "BertForMaskedLM": {"mlm_logits": "tokens"},
    "BertForNextSentencePrediction": {"nsp_logits": "cls"},
    "BertForSequenceClassification": {"logits": "cls"},
    "BertForTokenClassification": {"logits": "tokens"},
    "BertForQuestionAnswering": {"start_logits": "tokens", "end_logits": "tokens"},
    "BertForMultipleChoice": {"logits": "cls"},
}
CLASSES = sorted(FIELDS)


def _sequences(seed: int = 0):
    """Token ids (each starting with [CLS] = 2), token types (0, then 1 and 2) and two masked
    positions per sequence."""
    rng = np.random.default_rng(seed)
    ids = [[2, *rng.integers(3, CONFIG.vocab_size, n - 1).tolist()] for n in LENGTHS]
    types = [np.minimum(np.arange(n) * 3 // n, 2).tolist() for n in LENGTHS]
    masked = [np.sort(rng.choice(np.arange(1, n), 2, replace=False)).tolist() for n in LENGTHS]
    return ids, types, masked


IDS, TYPES, MASKED = _sequences()
PACKED = pack_sequences(IDS, TYPES, seq_len=SEQ_LEN)


def _packed_masked_positions() -> tuple[np.ndarray, list[int]]:
    """(R, P) masked positions of the packed rows (each sequence's, shifted to its start; spare
    slots at 0) and where each sequence's begin in its row's P."""
    rows = [[] for _ in range(len(PACKED.input_ids))]
    offsets = []
    for (r, _), start, positions in zip(PACKED.placement, PACKED.starts, MASKED, strict=True):
        offsets.append(len(rows[r]))
        rows[r] += [int(start) + p for p in positions]
    P = max(len(r) for r in rows)
    return np.array([r + [0] * (P - len(r)) for r in rows], np.int32), offsets


MASKED_ROWS, MASKED_OFFSETS = _packed_masked_positions()


def _choice_rows() -> tuple[dict[str, np.ndarray], list[list[int]]]:
    """Multiple choice packed: each row one example, its choices the row's sequences, in order
    (example 1 has 2 of 3 choices). Returns the packed inputs and each example's sequences."""
    examples = [[0, 1, 4], [3, 5], [2, 4, 1]]  # indices into IDS: a choice is a sequence
    rows = {k: np.zeros((3, SEQ_LEN), np.int32) for k in ("input_ids", "token_type_ids",
                                                          "sequence_ids")}
    cls = np.full((3, 3), -1, np.int32)
    for r, choices in enumerate(examples):
        start = 0
        for c, n in enumerate(choices):
            span = slice(start, start + LENGTHS[n])
            rows["input_ids"][r, span], rows["token_type_ids"][r, span] = IDS[n], TYPES[n]
            rows["sequence_ids"][r, span] = c + 1
            cls[r, c], start = start, start + LENGTHS[n]
    return {**rows, "attention_mask": (rows["sequence_ids"] > 0).astype(np.int32),
            "cls_positions": cls}, examples


CHOICE_ROWS, EXAMPLES = _choice_rows()


def _packed_call(name: str) -> tuple[tuple, dict]:
    """(positional, keyword) numpy arguments of the packed batch for class `name`."""
    if name == "BertForMultipleChoice":
        rows = CHOICE_ROWS
        return ((rows["input_ids"], rows["token_type_ids"], rows["attention_mask"]),
                {k: rows[k] for k in ("sequence_ids", "cls_positions")})
    args = (PACKED.input_ids, PACKED.token_type_ids, PACKED.attention_mask)
    if name == "BertForPreTraining":
        args = (*args, MASKED_ROWS)
    return args, {"sequence_ids": PACKED.sequence_ids, "cls_positions": PACKED.cls_positions}


def _packed_split(name: str, out) -> list[dict]:
    """Per sequence (`IDS` order; multiple choice: per example and choice), its outputs read from
    the packed batch's outputs."""
    if name == "BertForMultipleChoice":
        return [{"logits": out.logits[r, c]} for r, ex in enumerate(EXAMPLES) for c in range(len(ex))]
    per = []
    for n, ((r, slot), start, length) in enumerate(zip(
            PACKED.placement.tolist(), PACKED.starts.tolist(), PACKED.lengths.tolist(),
            strict=True)):
        at = {"tokens": slice(start, start + length), "cls": slot,
              "masked": slice(MASKED_OFFSETS[n], MASKED_OFFSETS[n] + len(MASKED[n]))}
        per.append({f: getattr(out, f)[r, at[kind]] for f, kind in FIELDS[name].items()})
    return per


def _singles(name: str) -> list[tuple[tuple, dict]]:
    """Each sequence alone, unpadded, as (positional, keyword) numpy arguments (multiple choice:
    each choice alone, one example of one choice)."""
    order = [n for ex in EXAMPLES for n in ex] if name == "BertForMultipleChoice" else range(
        len(IDS))
    calls = []
    for n in order:
        args = (np.array([IDS[n]], np.int32), np.array([TYPES[n]], np.int32))
        if name == "BertForMultipleChoice":
            args = tuple(a[None] for a in args)  # (1, 1, L)
        if name == "BertForPreTraining":
            args = (*args, None, np.array([MASKED[n]], np.int32))
        calls.append((args, {}))
    return calls


def _single_split(name: str, out) -> dict:
    return {f: getattr(out, f)[0, 0] if name == "BertForMultipleChoice" else getattr(out, f)[0]
            for f in FIELDS[name]}


def _weights(i: int, field: str, shape: tuple[int, ...]) -> np.ndarray:
    """A fixed random projection per sequence and output, so the loss reaches every element."""
    rng = np.random.default_rng(zlib.crc32(f"{i}.{field}".encode()))
    return rng.normal(size=shape).astype(np.float32)


def _loss(per: list[dict], first: int = 0):
    return sum((outs[f] * _weights(first + i, f, tuple(outs[f].shape))).sum()
               for i, outs in enumerate(per) for f in outs)


def _jax(model, call, split) -> tuple[list[dict], dict]:
    """(per-sequence outputs, parameter gradients) of a bertjax model on one call, compiled: op
    by op, every operation of the forward and backward would compile on its own."""
    args, kwargs = call

    @nnx.jit
    def outputs_and_gradients(m, args, kwargs):
        def loss(m):
            per = split(m(*args, **kwargs))
            return _loss(per), per

        (_, per), grads = nnx.value_and_grad(loss, has_aux=True)(m)
        return per, grads

    per, grads = outputs_and_gradients(
        model, tuple(None if a is None else jnp.asarray(a) for a in args),
        {k: jnp.asarray(v) for k, v in kwargs.items()})
    return [{f: np.asarray(v) for f, v in d.items()} for d in per], state_to_numpy(grads)


def _call(model, args: tuple, kwargs: dict):
    return model(*args, **kwargs)


_compiled_call = nnx.jit(_call)  # `model(*args, **kwargs)` as one compiled program


def _torch(model, call, split, first: int = 0) -> tuple[list[dict], dict]:
    args, kwargs = call
    model.zero_grad()
    per = split(model(*(None if a is None else torch.from_numpy(a) for a in args),
                      **{k: torch.from_numpy(v) for k, v in kwargs.items()}))
    torch_weights = [{f: torch.from_numpy(_weights(first + i, f, tuple(v.shape)))
                      for f, v in d.items()} for i, d in enumerate(per)]
    sum((d[f] * w[f]).sum() for d, w in zip(per, torch_weights, strict=True) for f in d).backward()
    return ([{f: v.detach().numpy() for f, v in d.items()} for d in per],
            {n: p.grad.numpy().copy() for n, p in model.named_parameters() if p.grad is not None})


def _alone(mirror, name: str) -> tuple[list[dict], dict]:
    """Every sequence run alone in `mirror`: its outputs, and the sum of the sequences'
    gradients."""
    per, total = [], {}
    for i, call in enumerate(_singles(name)):
        outs, grads = _torch(mirror, call, lambda out: [_single_split(name, out)], first=i)
        per += outs
        total = {k: total.get(k, 0) + g for k, g in grads.items()}
    return per, total


def _worst(a: list[dict], b: list[dict]) -> float:
    assert len(a) == len(b) and all(x.keys() == y.keys() for x, y in zip(a, b, strict=True))
    return max(float(np.abs(np.asarray(x[f]) - np.asarray(y[f])).max())
               for x, y in zip(a, b, strict=True) for f in x)


def _model(name: str, implementation: str = "exact"):
    model = MODEL_CLASSES[name](CONFIG.replace(attn_implementation=implementation),
                                rngs=nnx.Rngs(0))
    rng = np.random.default_rng(1)
    for path, param in nnx.iter_graph(model):  # so a weight read at a wrong row shows
        if isinstance(param, nnx.Param) and path[-1] in ("bias", "scale"):
            param[...] = param[...] + jnp.asarray(0.1 * rng.normal(size=param.shape), jnp.float32)
    return model


@pytest.fixture(scope="module")
def alone():
    """Per class: the bertjax model, its bert_torch mirror, and each sequence run alone in the
    mirror (outputs; the sum of the sequences' gradients by PyTorch name, as bertjax's are read)."""
    out = {}
    for name in CLASSES:
        model = _model(name)
        mirror = to_torch_model(model)
        out[name] = (model, mirror, _alone(mirror, name))
    return out


def test_the_batch_is_packed():
    assert PACKED.input_ids.shape == (3, SEQ_LEN) and PACKED.cls_positions.shape == (3, 3)
    assert (PACKED.cls_positions == -1).any()  # a row with an empty slot
    assert (PACKED.sequence_ids == 0).any()  # and padding


@pytest.mark.slow
@pytest.mark.parametrize("implementation", ["exact", "fused"])
@pytest.mark.parametrize("name", CLASSES)
def test_bertjax_packed_equals_each_sequence_alone(alone, name, implementation):
    model, _, (ref, ref_grads) = alone[name]
    # the same weights on this path
    packed = nnx.merge(nnx.graphdef(_model(name, implementation)), nnx.state(model))
    outs, grads = _jax(packed, _packed_call(name), lambda out: _packed_split(name, out))
    assert _worst(outs, ref) <= TOL
    errors = gradient_errors(grads, ref_grads)
    assert max(errors.values()) <= TOL, sorted(errors.items(), key=lambda kv: -kv[1])[:3]


@pytest.mark.slow
@pytest.mark.parametrize("name", CLASSES)
def test_bert_torch_packed_equals_each_sequence_alone(alone, name):
    _, mirror, (ref, ref_grads) = alone[name]
    outs, grads = _torch(mirror, _packed_call(name), lambda out: _packed_split(name, out))
    assert _worst(outs, ref) <= TOL
    errors = gradient_errors(grads, ref_grads)
    assert max(errors.values()) <= TOL, sorted(errors.items(), key=lambda kv: -kv[1])[:3]


@pytest.mark.slow
@pytest.mark.parametrize("name", CLASSES)
def test_packed_equals_transformers_sequence_by_sequence(alone, name, tmp_path):
    model, _, _ = alone[name]
    save_pretrained(model, tmp_path / name)
    hf = getattr(transformers, name).from_pretrained(tmp_path / name,
                                                     attn_implementation="eager").eval()
    args, kwargs = _packed_call(name)
    ours = _packed_split(name, _compiled_call(model, tuple(map(jnp.asarray, args)),
                                              {k: jnp.asarray(v) for k, v in kwargs.items()}))
    theirs = []
    for (single, _), n in zip(_singles(name), range(len(ours)), strict=True):
        with torch.no_grad():
            out = hf(torch.from_numpy(single[0]), token_type_ids=torch.from_numpy(single[1]))
        outs = {f: getattr(out, hf_field)[0] for f, hf_field in MODELS[name].hf_outputs.items()}
        if name == "BertModel":
            outs = {"sequence_output": out.last_hidden_state[0], "pooled_output": out.pooler_output[0]}
        if name == "BertForPreTraining":  # transformers scores every token: take the masked ones
            outs["mlm_logits"] = outs["mlm_logits"][MASKED[n]]
        if name == "BertForMultipleChoice":
            outs["logits"] = outs["logits"][0]
        theirs.append({f: v.numpy() for f, v in outs.items() if f in FIELDS[name]})
    assert _worst([{f: np.asarray(v) for f, v in d.items()} for d in ours], theirs) <= TOL


LEAK_FIELDS = ("sequence_output", "pooled_output", "nsp_logits", "mlm_logits")


def _runner(framework: str, implementation: str):
    """A function of input ids -> {field: (R, ...) numpy} of one BertForPreTraining at the
    masked positions, packed, in `framework` with `implementation`."""
    model = _model("BertForPreTraining", implementation)
    args, kwargs = _packed_call("BertForPreTraining")
    if framework == "torch":
        mirror = to_torch_model(model)

        def run(ids):
            with torch.no_grad():
                out = mirror(torch.from_numpy(ids), *(torch.from_numpy(a) for a in args[1:]),
                             **{k: torch.from_numpy(v) for k, v in kwargs.items()})
            return {f: getattr(out, f).numpy() for f in LEAK_FIELDS}
        return run

    call = nnx.jit(_call)  # not `_compiled_call`: traced anew, so that a patched mask shows

    def run(ids):
        out = call(model, tuple(map(jnp.asarray, (ids, *args[1:]))),
                   {k: jnp.asarray(v) for k, v in kwargs.items()})
        return {f: np.asarray(getattr(out, f)) for f in LEAK_FIELDS}
    return run


def _per_sequence(outs: dict) -> list[dict]:
    """`_runner`'s outputs per sequence: at its [CLS] slot and its masked positions."""
    per = []
    for n, (r, slot) in enumerate(PACKED.placement.tolist()):
        mlm = slice(MASKED_OFFSETS[n], MASKED_OFFSETS[n] + len(MASKED[n]))
        per.append({"sequence_output": outs["sequence_output"][r, mlm],
                    "pooled_output": outs["pooled_output"][r, slot],
                    "nsp_logits": outs["nsp_logits"][r, slot],
                    "mlm_logits": outs["mlm_logits"][r, mlm]})
    return per


def _changed_sequence() -> tuple[np.ndarray, int, list[int]]:
    """The packed ids with one token of a second-slot sequence changed; that sequence's index and
    the other sequences of its row."""
    n = int(np.flatnonzero(PACKED.placement[:, 1] == 1)[0])  # a sequence in slot 2 of its row
    row = PACKED.placement[n, 0]
    ids = PACKED.input_ids.copy()
    ids[row, PACKED.starts[n] + 1] = (ids[row, PACKED.starts[n] + 1] + 7) % CONFIG.vocab_size
    neighbours = [m for m in range(len(IDS)) if m != n and PACKED.placement[m, 0] == row]
    return ids, n, neighbours


@pytest.mark.slow
@pytest.mark.parametrize(("framework", "implementation"),
                         [("jax", "exact"), ("jax", "fused"), ("torch", "exact")])
def test_changing_one_sequence_leaves_the_others_bitwise(framework, implementation):
    run = _runner(framework, implementation)
    ids, changed, neighbours = _changed_sequence()
    before, after = _per_sequence(run(PACKED.input_ids)), _per_sequence(run(ids))
    assert neighbours  # the row holds another sequence, which must not see the change
    for m in range(len(IDS)):
        for f in LEAK_FIELDS:
            if m == changed:
                assert np.abs(before[m][f] - after[m][f]).max() > 1e-4, f  # the change shows
            else:
                np.testing.assert_array_equal(after[m][f], before[m][f], err_msg=f"{m} {f}")


PACKED_ATTENTION = {"jax": inputs.packed_attention, "torch": bert_torch.inputs.packed_attention}


def _padding_only(sequence_ids, attention_mask):
    """The mask before packing: every token attends every token of its row (and the positions
    are still right), to show the leak check has teeth."""
    keys = (sequence_ids != 0) & (attention_mask != 0)  # (B, S)
    _, positions = PACKED_ATTENTION["jax"](sequence_ids, attention_mask)
    return jnp.broadcast_to(keys[:, None, :], keys.shape + keys.shape[-1:]), positions


def _torch_padding_only(sequence_ids, attention_mask):
    keys = (sequence_ids != 0) & (attention_mask != 0)
    _, positions = PACKED_ATTENTION["torch"](sequence_ids, attention_mask)
    return keys[:, None, :].expand(-1, keys.shape[1], -1), positions


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_the_leak_check_fails_with_the_padding_mask(monkeypatch, framework):
    if framework == "jax":
        monkeypatch.setattr(inputs, "packed_attention", _padding_only)
    else:
        monkeypatch.setattr(bert_torch.inputs, "packed_attention", _torch_padding_only)
    run = _runner(framework, "exact")
    ids, changed, neighbours = _changed_sequence()
    before, after = _per_sequence(run(PACKED.input_ids)), _per_sequence(run(ids))
    for m in neighbours:  # attention crosses sequences: the neighbours see the change
        assert np.abs(before[m]["sequence_output"] - after[m]["sequence_output"]).max() > 1e-4
