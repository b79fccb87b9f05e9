#!/usr/bin/env python
"""Write transformers-5 reference fixtures for ModernBERT: every class, two configurations.

One byte-level BPE tokenizer is trained with `tokenizers` on Hamlet's lines (as the families'
script does, scripts/dev/make_family_fixtures.py, whose helpers this one reuses), with BERT's
special tokens added after the pieces in ModernBERT's order ([UNK] [CLS] [SEP] [PAD] [MASK], ids
at the end of the vocabulary, [MASK] eating the space before it) and ModernBERT's template
([CLS] A [SEP] B [SEP]), wrapped in PreTrainedTokenizerFast. Every class of two configurations
gets a tiny randomly initialised model with odd sizes whose every parameter is perturbed with
seeded noise (normal * 0.1, so that no bias or norm sits at 0 or 1 and logits are not near
zero):

    a: transformers' defaults where it matters (no biases but the decoder's, LayerNorms without
       bias, [CLS] pooling, GELU, every third layer global from the first, RoPE bases 160000 /
       10000), 4 layers, local_attention 8, a vocabulary padded past the tokenizer's (+13 rows)
    b: every switch turned: all biases on but the decoder's, mean pooling, gelu_new in the
       feed-forward and ReLU in the heads, layer_types local-global-local-global (the first
       layer local), RoPE bases 1000 / 50 in transformers 5's rope_parameters, local_attention 5
       (an odd window: 2 tokens each side), norm_eps 1e-6

Sequences are 21 tokens, longer than both windows, right-padded to rows of 21, 15 and 9 real
tokens (multiple choice: 2 examples x 3 choices). Each model is saved, reloaded and must
reproduce its outputs (within 1e-6: multiple choice's have differed in the last bit).

Float32 outputs and gradients come from transformers' eager attention; the float64 run uses its
sdpa attention: eager ModernBERT turns padded rows to NaN in float64 (its sliding-window mask),
sdpa does not. The two differ at padded positions, whose queries may have no key inside their
window (eager attends uniformly, sdpa not): the tests compare real tokens' outputs. The script
prints the float32-float64 and eager-sdpa distances there.

It runs in the project's venv, offline (nothing is downloaded from the Hub):

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/dev/make_modernbert_fixtures.py
    # worked with: python 3.11.7, transformers 5.24.0, torch 2.13.0+cpu, tokenizers 0.23.3

It writes tests/fixtures/modernbert/<a|b>/<ClassName>/: config.json, model.safetensors,
tokenizer.json, tokenizer_config.json, outputs.npz (inputs, float32 and float64 outputs, fixed
loss weights zero at padded positions of per-token fields, float32 gradients under
model.safetensors' names; as the families' fixtures) and, for ModernBertForMaskedLM,
fill_mask.json (pipeline("fill-mask", top_k=5)), for the other classes use.json (what the
`bertjax` commands are compared with: scripts/dev/modernbert_use_outputs.py); plus
<a|b>/keys.txt and versions.json. A rerun writes the same files.

Options: --out DIR (default tests/fixtures/modernbert beside this script).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from make_family_fixtures import (  # noqa: E402  (the families' helpers: same fixtures' layout)
    FILL_MASK_TEXT,
    HEADS,
    NUM_LABELS,
    fill_mask,
    loss_weights,
    mask_token,
    tied_groups,
    tied_pairs,
    training_text,
    versions,
)
from modernbert_use_outputs import write_use_outputs  # noqa: E402
from safetensors import safe_open  # noqa: E402
from tokenizers import AddedToken, processors  # noqa: E402
from transformers import ModernBertConfig, PreTrainedTokenizerFast  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "modernbert"

NOISE_SCALE = 0.1
SEQ_LEN = 21
ROW_LENGTHS = (21, 15, 9)
MC_LENGTHS = ((21, 17, 10), (12, 21, 6))  # (2 examples, 3 choices)
BPE_PIECES = 298  # the tokenizer: 298 pieces + 5 special tokens = 303
SPECIALS = ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")  # ModernBERT's order, after the pieces

CONFIGS = {
    "a": dict(
        config=dict(hidden_size=30, intermediate_size=17, num_hidden_layers=4,
                    num_attention_heads=3, max_position_embeddings=64, local_attention=8),
        vocab_padding=13,
        seed=500,
    ),
    "b": dict(
        config=dict(hidden_size=28, intermediate_size=13, num_hidden_layers=4,
                    num_attention_heads=2, local_attention=5, norm_eps=1e-6,
                    norm_bias=True, attention_bias=True, mlp_bias=True, decoder_bias=False,
                    classifier_bias=True, classifier_pooling="mean",
                    hidden_activation="gelu_new", classifier_activation="relu",
                    layer_types=["sliding_attention", "full_attention", "sliding_attention",
                                 "full_attention"],
                    rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000.0},
                                     "sliding_attention": {"rope_type": "default",
                                                           "rope_theta": 50.0}}),
        vocab_padding=0,
        seed=600,
    ),
}


def train_tokenizer(lines: list[str]) -> PreTrainedTokenizerFast:
    """Byte-level BPE pieces, then ModernBERT's special tokens at the end and its template."""
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(lines, vocab_size=BPE_PIECES, min_frequency=2, show_progress=False)
    tok = bpe._tokenizer
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS[:-1]]
                           + [mask_token(SPECIALS[-1])])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", pad_token="[PAD]", mask_token="[MASK]",
                                   model_max_length=SEQ_LEN)


def make_rows(rng: np.random.Generator, lengths, tok, with_mask: bool):
    """Right-padded rows: [CLS], random pieces, [SEP]; one [MASK] on a piece for the MLM."""
    special = set(tok.all_special_ids)
    pieces = np.array([i for i in range(len(tok)) if i not in special])
    ids = np.full((len(lengths), SEQ_LEN), tok.pad_token_id, dtype=np.int64)
    mask = np.zeros((len(lengths), SEQ_LEN), dtype=np.int64)
    for r, length in enumerate(lengths):
        ids[r, :length] = rng.choice(pieces, size=length)
        ids[r, 0], ids[r, length - 1] = tok.cls_token_id, tok.sep_token_id
        mask[r, :length] = 1
        if with_mask:
            ids[r, int(rng.integers(1, length - 1))] = tok.mask_token_id
    return ids, mask


def make_inputs(tok, head: str, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if head == "ForMultipleChoice":
        parts = [make_rows(rng, lengths, tok, False) for lengths in MC_LENGTHS]
        return {"input_ids": np.stack([p[0] for p in parts]),
                "attention_mask": np.stack([p[1] for p in parts])}
    ids, mask = make_rows(rng, ROW_LENGTHS, tok, head == "ForMaskedLM")
    return {"input_ids": ids, "attention_mask": mask}


def fields_of(model, inputs) -> dict[str, torch.Tensor]:
    out = model(**{k: torch.from_numpy(v) for k, v in inputs.items()})
    return {name: getattr(out, name) for name in
            ("last_hidden_state", "logits", "start_logits", "end_logits")
            if getattr(out, name, None) is not None}


def build(spec: dict, tok, head: str, attn: str):
    cls = getattr(transformers, "ModernBert" + head)
    special = {name: getattr(tok, f"{role}_token_id") for name, role in (
        ("pad_token_id", "pad"), ("cls_token_id", "cls"), ("sep_token_id", "sep"),
        ("bos_token_id", "cls"), ("eos_token_id", "sep"))}
    config = ModernBertConfig(**spec["config"], vocab_size=len(tok) + spec["vocab_padding"],
                              **special, num_labels=NUM_LABELS.get(head, 2))
    return cls._from_config(config, attn_implementation=attn)


def perturb(model, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for _, param in model.named_parameters():
            noise = rng.standard_normal(tuple(param.shape)).astype(np.float32)
            param.add_(torch.from_numpy(noise) * NOISE_SCALE)


def make_class(spec: dict, head: str, index: int, tok, directory: Path, keys_out: list) -> None:
    seed = spec["seed"] + index
    torch.manual_seed(seed)
    model = build(spec, tok, head, "eager")
    perturb(model, seed=1000 + seed)
    model.eval()
    groups = tied_groups(model)
    inputs = make_inputs(tok, head, seed=2000 + seed)
    with torch.no_grad():
        fields = fields_of(model, inputs)
    weights = loss_weights(fields, inputs, head, seed=3000 + seed)
    model.zero_grad(set_to_none=True)
    graded = fields_of(model, inputs)
    loss = sum((graded[n] * torch.from_numpy(weights[n])).sum() for n in graded)
    loss.backward()

    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    model.save_pretrained(str(directory))
    tok.save_pretrained(str(directory))
    with safe_open(str(directory / "model.safetensors"), "pt") as f:
        saved = set(f.keys())
    duplicates = dict(tied_pairs(model, saved))
    grads = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if name in duplicates:
            continue
        assert name in saved and param.grad is not None, (head, name)
        grads[f"grad/{name}"] = param.grad.detach().numpy().astype(np.float32)
    model.zero_grad(set_to_none=True)

    cls = type(model)
    reloaded = cls.from_pretrained(str(directory), attn_implementation="eager").eval()
    sdpa64 = cls.from_pretrained(str(directory), attn_implementation="sdpa").double().eval()
    sdpa32 = cls.from_pretrained(str(directory), attn_implementation="sdpa").eval()
    assert tied_groups(reloaded) == groups
    with torch.no_grad():
        again = fields_of(reloaded, inputs)
        double, sdpa = fields_of(sdpa64, inputs), fields_of(sdpa32, inputs)
    for name in fields:  # multiple choice's reload has differed in the last bit (6e-8)
        torch.testing.assert_close(again[name], fields[name], rtol=0, atol=1e-6)
    arrays = dict(inputs)
    arrays |= {name: v.numpy().astype(np.float32) for name, v in fields.items()}
    arrays |= {f"{name}@float64": v.numpy() for name, v in double.items()}
    arrays |= {f"loss_weight/{name}": w for name, w in weights.items()}
    arrays |= {"loss": np.float32(loss.item()), **grads}
    assert all(np.isfinite(v).all() for v in arrays.values())
    np.savez_compressed(directory / "outputs.npz", **arrays)

    keys_out.append(f"== {cls.__name__}  ({sum(p.numel() for p in model.parameters())} params)")
    keys_out += [f"{n}  {tuple(p.shape)}" + (f"  tied -> {duplicates[n]} (not saved)"
                                            if n in duplicates else "")
                 for n, p in sorted(model.named_parameters(remove_duplicate=False))]
    keys_out.append("")
    real = _real_tokens(inputs, fields)
    gap = {n: float(np.max(np.abs(arrays[n].astype(np.float64) - arrays[f"{n}@float64"])[real[n]]))
           for n in fields}
    eager_sdpa = {n: float((fields[n] - sdpa[n]).abs().numpy()[real[n]].max()) for n in fields}
    print(f"   {cls.__name__:36s} f32-vs-f64 " + ", ".join(f"{v:.1e}" for v in gap.values())
          + "  eager-vs-sdpa f32 " + ", ".join(f"{v:.1e}" for v in eager_sdpa.values())
          + "  scale " + ", ".join(f"{float(v.abs().max()):.2g}" for v in fields.values()))


def _real_tokens(inputs: dict[str, np.ndarray], fields: dict) -> dict[str, np.ndarray]:
    """Per field, where it is a real token's (or pooled) output: padded rows' outputs differ
    between eager and sdpa (a query with no key inside its window attends uniformly in one, not
    the other), so distances are measured at real tokens."""
    mask = inputs["attention_mask"].astype(bool)
    return {name: (np.broadcast_to(mask.reshape(mask.shape + (1,) * (value.ndim - mask.ndim)),
                                   tuple(value.shape))
                   if tuple(value.shape[:mask.ndim]) == mask.shape else np.ones(value.shape, bool))
            for name, value in fields.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    out: Path = args.out
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(1)
    lines = training_text()
    tok = train_tokenizer(lines)
    again = train_tokenizer(lines)  # the training must not depend on the run
    assert tok.backend_tokenizer.to_str() == again.backend_tokenizer.to_str()
    assert FILL_MASK_TEXT
    if out.exists():
        shutil.rmtree(out)
    for name, spec in CONFIGS.items():
        print(f"\n== config {name}")
        keys: list[str] = []
        for index, head in enumerate(HEADS):
            directory = out / name / f"ModernBert{head}"
            make_class(spec, head, index, tok, directory, keys)
            if head == "ForMaskedLM":
                fill_mask(directory, tok)
            write_use_outputs(directory, head)
        (out / name / "keys.txt").write_text("\n".join(keys), encoding="utf-8")
    info = versions()
    (out / "versions.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    print("\nversions:", json.dumps(info, sort_keys=True))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
