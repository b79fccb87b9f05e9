#!/usr/bin/env python
"""Write transformers-v4 Flax RoBERTa, XLM-R, DistilBERT and ELECTRA checkpoint fixtures.

transformers 5 removed its Flax models, but `flax_model.msgpack` checkpoints written by the
`FlaxRoberta*`, `FlaxXLMRoberta*`, `FlaxDistilBert*` and `FlaxElectra*` classes of transformers 4.x
are still around. This script writes real ones, with transformers 4.57.x + flax (the last releases
with those classes), together with the outputs the Flax class itself computes on fixed inputs, so
that bertjax's tests can compare against them.

The sizes (config.json), the tokenizer files and the inputs are those of the transformers-5
fixtures of the same family, tests/fixtures/families/<model_type>/<Class>/ (written by
scripts/dev/make_family_fixtures.py, which must have run first), so that the tests can share them;
the weights are the Flax class's own random init (not those of the transformers-5 fixture).

It runs in a SIDE environment, never in the project's own venv (transformers 4 / flax / torch are
not project dependencies):

    python3 -m venv /tmp/flax4
    /tmp/flax4/bin/pip install "transformers==4.57.*" flax jax numpy msgpack tokenizers
    /tmp/flax4/bin/pip install torch==2.13.0   # optional: the PyTorch cross-check below
    # worked with: python 3.11.7, transformers 4.57.6, flax 0.12.8, jax/jaxlib 0.10.2 (CPU),
    # numpy 2.4.6, msgpack 1.2.4, tokenizers 0.22.2, torch 2.13.0+cpu
    # (see tests/fixtures/flax_v4_families/versions.json)
    /tmp/flax4/bin/python scripts/dev/make_flax_v4_family_fixtures.py

What it writes, one directory per class under tests/fixtures/flax_v4_families/<model_type>/<Class>/
(model_type roberta, xlm-roberta, distilbert, electra; Class FlaxXModel, FlaxXForMaskedLM,
FlaxXForSequenceClassification (3 labels), FlaxXForTokenClassification (5 labels),
FlaxXForQuestionAnswering, FlaxXForMultipleChoice, and FlaxElectraForPreTraining):

    config.json, flax_model.msgpack     FlaxX*.save_pretrained(dir)
    tokenizer.json, tokenizer_config.json  copied from the transformers-5 fixture of the same family
    outputs.npz                         input_ids, attention_mask[, token_type_ids]: copied from the
                                        transformers-5 fixture's outputs.npz of the same class
                                        (int64, right padded); then every output of the Flax model
                                        (last_hidden_state, pooler_output, logits, start_logits,
                                        end_logits; train=False, i.e. deterministic; float32)

plus <model_type>/keys.txt (every class's flattened param keys and shapes) and versions.json.

Every leaf of every model's params is perturbed with seeded noise (normal * 0.05), so no bias or
LayerNorm parameter sits at its init value of 0 or 1 and a wrong mapping cannot go unnoticed. (The
Flax classes store a tied word embedding once: a tied MLM decoder has no kernel of its own.)
Each saved directory is reloaded with `cls.from_pretrained(dir)` and must reproduce the saved
outputs. Where torch is importable, the transformers-4 PyTorch class of the same name is loaded from
the directory's msgpack (transformers' own Flax-to-PyTorch converter, see torch_check) and must
agree at the real (unpadded) tokens (--no-torch skips).

Options: --out DIR (default tests/fixtures/flax_v4_families beside this script), --families DIR
(the transformers-5 fixtures, default tests/fixtures/families), --quiet (no key listing),
--no-torch (no PyTorch cross-check).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import flax  # noqa: E402
import jax  # noqa: E402
import jaxlib  # noqa: E402
import msgpack  # noqa: E402
import numpy as np  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402
from flax.traverse_util import flatten_dict  # noqa: E402
from transformers import (  # noqa: E402
    DistilBertConfig,
    ElectraConfig,
    RobertaConfig,
    XLMRobertaConfig,
)

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "flax_v4_families"
DEFAULT_FAMILIES = ROOT / "tests" / "fixtures" / "families"

NOISE_SCALE = 0.05

HEADS = (
    "Model",
    "ForMaskedLM",
    "ForSequenceClassification",
    "ForTokenClassification",
    "ForQuestionAnswering",
    "ForMultipleChoice",
)

# Seeds as in make_family_fixtures.py: class seed = family seed + index of the head.
FAMILIES = {
    "roberta": dict(prefix="Roberta", heads=HEADS, config_cls=RobertaConfig, seed=100),
    "xlm-roberta": dict(prefix="XLMRoberta", heads=HEADS, config_cls=XLMRobertaConfig, seed=200),
    "distilbert": dict(prefix="DistilBert", heads=HEADS, config_cls=DistilBertConfig, seed=300),
    "electra": dict(
        prefix="Electra",
        heads=(HEADS[0], "ForPreTraining") + HEADS[1:],
        config_cls=ElectraConfig,
        seed=400,
    ),
}
REQUIRED = ("roberta", "xlm-roberta")  # the others are skipped, with a note, if a class is missing

NUM_LABELS = {
    "ForSequenceClassification": 3,
    "ForTokenClassification": 5,
    "ForQuestionAnswering": 2,
}
FIELDS = ("last_hidden_state", "pooler_output", "logits", "start_logits", "end_logits")
PER_TOKEN = {"last_hidden_state", "start_logits", "end_logits"}  # plus logits of these heads:
PER_TOKEN_LOGITS = {"ForMaskedLM", "ForTokenClassification", "ForPreTraining"}
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "sentencepiece.bpe.model",
)
CONFIG_DROP = ("architectures", "transformers_version", "dtype", "torch_dtype")
TORCH_TOL = 1e-4


def has_torch() -> bool:
    return importlib.util.find_spec("torch") is not None


def load_config(spec: dict, ref_dir: Path, head: str):
    """The transformers-5 fixture's config.json, minus what transformers 4 need not be told."""
    kw = json.loads((ref_dir / "config.json").read_text(encoding="utf-8"))
    for key in CONFIG_DROP:
        kw.pop(key, None)
    config = spec["config_cls"](**kw)
    if head in NUM_LABELS:
        assert config.num_labels == NUM_LABELS[head], (ref_dir.name, config.num_labels)
    return config


def load_inputs(ref_dir: Path) -> dict[str, np.ndarray]:
    saved = np.load(ref_dir / "outputs.npz")
    return {k: saved[k] for k in INPUTS if k in saved.files}


def perturb(params, seed: int):
    """Add seeded normal * NOISE_SCALE noise to every leaf (float32 kept)."""
    rng = np.random.default_rng(seed)
    leaves, treedef = jax.tree_util.tree_flatten(params)
    new = []
    for leaf in leaves:
        arr = np.asarray(leaf)
        assert arr.dtype == np.float32, arr.dtype
        new.append((arr + NOISE_SCALE * rng.standard_normal(arr.shape)).astype(np.float32))
    return jax.tree_util.tree_unflatten(treedef, new)


def run_model(model, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every output field of the Flax model, float32 (train=False: dropout off)."""
    kw = {k: np.asarray(v, dtype=np.int32) for k, v in inputs.items() if k != "input_ids"}
    out = model(np.asarray(inputs["input_ids"], dtype=np.int32), **kw, train=False)
    fields = {}
    for name in FIELDS:
        value = getattr(out, name, None)
        if value is not None:
            fields[name] = np.asarray(value, dtype=np.float32)
    return fields


def check_params_equal(a, b, where: str) -> None:
    fa, fb = flatten_dict(a, sep="/"), flatten_dict(b, sep="/")
    assert fa.keys() == fb.keys(), (where, sorted(fa.keys() ^ fb.keys()))
    for key in fa:
        assert np.array_equal(np.asarray(fa[key]), np.asarray(fb[key])), (where, key)


def copy_tokenizer(ref_dir: Path, directory: Path) -> list[str]:
    copied = []
    for name in TOKENIZER_FILES:
        if (ref_dir / name).is_file():
            shutil.copyfile(ref_dir / name, directory / name)
            copied.append(name)
    assert {"tokenizer.json", "tokenizer_config.json"} <= set(copied), (ref_dir, copied)
    return copied


def report_dir(directory: Path, params, quiet: bool) -> None:
    print(f"\n== {directory.parent.name}/{directory.name}")
    for path in sorted(directory.iterdir()):
        print(f"   {path.stat().st_size:>8d}  {path.name}")
    if quiet:
        return
    for key, value in flatten_dict(params, sep="/").items():
        print(f"   {key}  {tuple(value.shape)} {np.asarray(value).dtype}")


def key_lines(name: str, params) -> list[str]:
    flat = flatten_dict(params, sep="/")
    lines = [f"== {name}  ({sum(int(np.asarray(v).size) for v in flat.values())} params)"]
    lines += [f"{key}  {tuple(value.shape)}" for key, value in sorted(flat.items())]
    return lines + [""]


def torch_check(head: str, pt_name: str, directory: Path, inputs, outputs) -> dict[str, float]:
    """The PyTorch class of the same name, from_flax: max |diff| at real tokens per field.

    `pt_cls.from_pretrained(dir, from_flax=True)` of transformers 4.57 builds the model on the meta
    device and then load_state_dict()s the converted Flax weights into it, which is a no-op (the
    forward then fails on meta tensors); so the model is built with real tensors here and the same
    converter from_pretrained calls, load_flax_checkpoint_in_pytorch_model, loads the msgpack.
    """
    import torch
    from transformers.modeling_flax_pytorch_utils import load_flax_checkpoint_in_pytorch_model

    pt_cls = getattr(transformers, pt_name)
    config = pt_cls.config_class.from_pretrained(str(directory))
    model = pt_cls(config)
    model = load_flax_checkpoint_in_pytorch_model(model, str(directory / "flax_model.msgpack"))
    model.eval()
    with torch.no_grad():
        out = model(**{k: torch.from_numpy(np.asarray(v, np.int64)) for k, v in inputs.items()})
    mask = inputs["attention_mask"].astype(bool)
    diffs = {}
    for name, flax_value in outputs.items():
        value = getattr(out, name).numpy()
        assert value.shape == flax_value.shape, (pt_name, name, value.shape, flax_value.shape)
        diff = np.abs(value.astype(np.float64) - flax_value)
        if name in PER_TOKEN or (name == "logits" and head in PER_TOKEN_LOGITS):
            diffs[name] = float(diff[mask].max())  # real tokens only
            diffs[name + "@all"] = float(diff.max())  # padded positions included
        else:
            diffs[name] = float(diff.max())
        assert diffs[name] < TORCH_TOL, (pt_name, name, diffs[name])
    return diffs


def make_class(spec: dict, head: str, index: int, ref_dir: Path, directory: Path, args):
    cls = getattr(transformers, "Flax" + spec["prefix"] + head)
    seed = spec["seed"] + index
    config = load_config(spec, ref_dir, head)
    model = cls(config, seed=seed)
    model.params = perturb(model.params, seed=1000 + seed)
    inputs = load_inputs(ref_dir)
    outputs = run_model(model, inputs)

    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    model.save_pretrained(str(directory))
    copy_tokenizer(ref_dir, directory)
    np.savez_compressed(directory / "outputs.npz", **inputs, **outputs)

    # Reload from disk in this (transformers 4) environment and compare against the saved file.
    reloaded = cls.from_pretrained(str(directory))
    check_params_equal(model.params, reloaded.params, directory.name)
    saved = np.load(directory / "outputs.npz")
    saved_inputs = {k: saved[k] for k in INPUTS if k in saved.files}
    for k, v in inputs.items():
        assert np.array_equal(saved_inputs[k], v) and saved_inputs[k].dtype == v.dtype, k
    again = run_model(reloaded, saved_inputs)
    assert again.keys() == outputs.keys(), (directory.name, again.keys(), outputs.keys())
    for name in outputs:
        assert saved[name].dtype == np.float32
        diff = float(np.max(np.abs(again[name] - saved[name])))
        assert diff < 1e-6, (directory.name, name, diff)

    shapes = ", ".join(f"{n} {v.shape}" for n, v in outputs.items())
    line = f"   {cls.__name__:42s} {shapes}"
    if args.torch:
        diffs = torch_check(head, spec["prefix"] + head, directory, inputs, outputs)
        line += "\n      torch from_flax max|diff| " + ", ".join(
            f"{n} {d:.1e}" for n, d in diffs.items()
        )
    print(line)
    report_dir(directory, model.params, args.quiet)
    return key_lines(cls.__name__, model.params)


def versions(with_torch: bool) -> dict[str, str]:
    info = {
        "python": platform.python_version(),
        "transformers": transformers.__version__,
        "flax": flax.__version__,
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "numpy": np.__version__,
        "msgpack": ".".join(map(str, msgpack.version)),
        "tokenizers": tokenizers.__version__,
        "jax_backend": jax.default_backend(),
    }
    if with_torch:
        import torch

        info["torch"] = torch.__version__  # the from_flax cross-check only
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--families", type=Path, default=DEFAULT_FAMILIES)
    parser.add_argument("--quiet", action="store_true", help="do not list the flattened param keys")
    parser.add_argument("--no-torch", dest="torch", action="store_false", help="no PyTorch check")
    args = parser.parse_args(argv)
    args.torch = args.torch and has_torch()
    if args.torch:
        import torch

        torch.set_num_threads(1)
    else:
        print("(no PyTorch cross-check)")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    transformers.logging.set_verbosity_error()

    skipped = []
    for model_type, spec in FAMILIES.items():
        names = ["Flax" + spec["prefix"] + head for head in spec["heads"]]
        missing = [n for n in names if not hasattr(transformers, n)]
        if missing:
            assert model_type not in REQUIRED, (model_type, missing)
            skipped.append(f"{model_type}: transformers {transformers.__version__} lacks {missing}")
            continue
        family_dir = out / model_type
        if family_dir.exists():
            shutil.rmtree(family_dir)
        family_dir.mkdir(parents=True)
        keys: list[str] = []
        for index, (head, name) in enumerate(zip(spec["heads"], names, strict=True)):
            ref_dir = args.families / model_type / (spec["prefix"] + head)
            assert (ref_dir / "outputs.npz").is_file(), f"{ref_dir}: run make_family_fixtures.py"
            keys += make_class(spec, head, index, ref_dir, family_dir / name, args)
        (family_dir / "keys.txt").write_text("\n".join(keys), encoding="utf-8")

    for note in skipped:
        print("SKIPPED", note)
    info = versions(args.torch)
    (out / "versions.json").write_text(
        json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    print("\nversions:", json.dumps(info, sort_keys=True))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
