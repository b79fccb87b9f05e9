#!/usr/bin/env python
"""Write transformers-v4 Flax BERT checkpoint fixtures to tests/fixtures/flax_v4/.

transformers 5 removed Flax BERT, but `flax_model.msgpack` checkpoints written by
`FlaxBert*.save_pretrained` of transformers 4.x are still around. This script writes real ones, with
transformers 4.57.x + flax (the last releases with Flax BERT), together with the outputs FlaxBert itself
computes on fixed inputs, so that bertjax's tests can compare against them.

It runs in a SIDE environment, never in the project's own venv (transformers 4 / flax are not project
dependencies):

    python3 -m venv /tmp/flax4
    /tmp/flax4/bin/pip install "transformers==4.57.*" flax jax numpy
    # worked with: python 3.11.7, transformers 4.57.6, flax 0.12.8, jax/jaxlib 0.10.2 (CPU),
    # numpy 2.4.6, msgpack 1.2.4, tokenizers 0.22.2 (see tests/fixtures/flax_v4/versions.json)
    /tmp/flax4/bin/python scripts/make_flax_v4_fixtures.py

What it writes, one directory per class under tests/fixtures/flax_v4/<ClassName>/:

    config.json, flax_model.msgpack            FlaxBert*.save_pretrained(dir)
    vocab.txt, tokenizer_config.json,           BertTokenizer(vocab.txt).save_pretrained(dir)
    special_tokens_map.json
    outputs.npz                                 fixed inputs + FlaxBert outputs (deterministic, float32)

plus FlaxBertForPreTraining_sharded/ (the same params as FlaxBertForPreTraining, saved with a small
`max_shard_size`: flax_model-0000X-of-0000N.msgpack + flax_model.msgpack.index.json) and versions.json.

Every leaf of every model's params is perturbed with seeded noise (normal * 0.02), so no bias or
LayerNorm parameter sits at its init value of 0 or 1 and a wrong mapping cannot go unnoticed.
Each saved directory is reloaded with `cls.from_pretrained(dir)` and must reproduce the saved outputs.

Options: --out DIR (default tests/fixtures/flax_v4 beside this script), --quiet (no key listing).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import flax  # noqa: E402
import jax  # noqa: E402
import jaxlib  # noqa: E402
import msgpack  # noqa: E402
import numpy as np  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402
from flax.traverse_util import flatten_dict  # noqa: E402
from transformers import (  # noqa: E402
    BertConfig,
    BertTokenizer,
    FlaxBertForMaskedLM,
    FlaxBertForMultipleChoice,
    FlaxBertForNextSentencePrediction,
    FlaxBertForPreTraining,
    FlaxBertForQuestionAnswering,
    FlaxBertForSequenceClassification,
    FlaxBertForTokenClassification,
    FlaxBertModel,
)

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "flax_v4"

CONFIG = dict(
    vocab_size=99,
    hidden_size=36,
    num_hidden_layers=2,
    num_attention_heads=3,
    intermediate_size=52,
    max_position_embeddings=40,
    type_vocab_size=3,
    hidden_act="gelu",
    layer_norm_eps=1e-12,
    num_labels=5,  # sequence / token classification; question answering uses 2 (see main)
)

# (class, model seed, output field names). Seeds are distinct per class.
CLASSES = [
    (FlaxBertModel, 0, ("last_hidden_state", "pooler_output")),
    (FlaxBertForPreTraining, 1, ("prediction_logits", "seq_relationship_logits")),
    (FlaxBertForMaskedLM, 2, ("logits",)),
    (FlaxBertForNextSentencePrediction, 3, ("logits",)),
    (FlaxBertForSequenceClassification, 4, ("logits",)),
    (FlaxBertForTokenClassification, 5, ("logits",)),
    (FlaxBertForQuestionAnswering, 6, ("start_logits", "end_logits")),
    (FlaxBertForMultipleChoice, 7, ("logits",)),
]

SHARDED_SOURCE = "FlaxBertForPreTraining"
NOISE_SCALE = 0.02
SEQ_LEN = 9
PAD_TAIL = 3  # row 1 has its last 3 positions padded
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
FIRST_WORD = 5

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which but "
    "have an they you were her she there been one all we their has would when if so no will more can "
    "out up about into them than only other time new some could these two may first then do any like "
    "my now over such our man me even most made after also did many before must through back"
).split()
PIECES = "##s ##ed ##ing ##er ##ly ##es ##al ##ion ##ic ##y ##e ##a ##t ##n ##r ##d ##o".split()


def vocab_tokens() -> list[str]:
    n_words = CONFIG["vocab_size"] - len(SPECIALS) - len(PIECES)
    tokens = SPECIALS + WORDS[:n_words] + PIECES
    assert len(tokens) == CONFIG["vocab_size"] == len(set(tokens)), len(tokens)
    return tokens


def make_rows(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two rows of length 9: row 0 full, row 1 with its last 3 positions padded.

    Row 0: [CLS] w w [SEP] w w [SEP] w [SEP], token types 0 0 0 0 1 1 1 2 2.
    Row 1: [CLS] w w [SEP] w [SEP] pad pad pad, token types 0 0 0 0 2 2 0 0 0.
    """
    ids = rng.integers(FIRST_WORD, CONFIG["vocab_size"], size=(2, SEQ_LEN)).astype(np.int32)
    ids[:, 0] = CLS
    ids[0, [3, 6, 8]] = SEP
    ids[1, [3, 5]] = SEP
    ids[1, SEQ_LEN - PAD_TAIL :] = PAD
    types = np.array([[0, 0, 0, 0, 1, 1, 1, 2, 2], [0, 0, 0, 0, 2, 2, 0, 0, 0]], dtype=np.int32)
    mask = np.ones((2, SEQ_LEN), dtype=np.int32)
    mask[1, SEQ_LEN - PAD_TAIL :] = 0
    return ids, types, mask


def make_inputs(multiple_choice: bool, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if not multiple_choice:
        ids, types, mask = make_rows(rng)
    else:
        # (2 examples, 3 choices, 9): example 0's choices are full length, example 1's are padded.
        rows = [make_rows(rng) for _ in range(3)]
        ids, types, mask = (np.stack([r[i] for r in rows], axis=1) for i in range(3))
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


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


def run_model(model, inputs: dict[str, np.ndarray], fields) -> dict[str, np.ndarray]:
    out = model(
        inputs["input_ids"],
        attention_mask=inputs["attention_mask"],
        token_type_ids=inputs["token_type_ids"],
        train=False,
    )
    return {name: np.asarray(getattr(out, name), dtype=np.float32) for name in fields}


def check_params_equal(a, b, where: str) -> None:
    fa, fb = flatten_dict(a, sep="/"), flatten_dict(b, sep="/")
    assert fa.keys() == fb.keys(), (where, sorted(fa.keys() ^ fb.keys()))
    for key in fa:
        assert np.array_equal(np.asarray(fa[key]), np.asarray(fb[key])), (where, key)


def write_tokenizer(directory: Path, vocab_file: Path) -> None:
    BertTokenizer(str(vocab_file)).save_pretrained(str(directory))


def report_dir(directory: Path, params, quiet: bool) -> None:
    print(f"\n== {directory.name}")
    for path in sorted(directory.iterdir()):
        print(f"   {path.stat().st_size:>8d}  {path.name}")
    if quiet:
        return
    for key, value in flatten_dict(params, sep="/").items():
        print(f"   {key}  {tuple(value.shape)} {np.asarray(value).dtype}")


def save_and_check(cls, model, directory: Path, vocab_file: Path, inputs, outputs, fields, **save_kw):
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    model.save_pretrained(str(directory), **save_kw)
    write_tokenizer(directory, vocab_file)
    np.savez_compressed(directory / "outputs.npz", **inputs, **outputs)

    # Reload from disk in this (transformers 4) environment and compare against the saved file.
    reloaded = cls.from_pretrained(str(directory))
    check_params_equal(model.params, reloaded.params, directory.name)
    saved = np.load(directory / "outputs.npz")
    saved_inputs = {k: saved[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    again = run_model(reloaded, saved_inputs, fields)
    for name in fields:
        assert saved[name].dtype == np.float32
        diff = float(np.max(np.abs(again[name] - saved[name])))
        assert diff < 1e-6, (directory.name, name, diff)
    return reloaded


def versions() -> dict[str, str]:
    return {
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--quiet", action="store_true", help="do not list the flattened param keys")
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    transformers.logging.set_verbosity_error()

    config = BertConfig(**CONFIG)
    vocab_file = out / "vocab.txt"  # temporary; each directory gets its own copy via the tokenizer
    vocab_file.write_text("".join(t + "\n" for t in vocab_tokens()), encoding="utf-8")

    try:
        for cls, seed, fields in CLASSES:
            name = cls.__name__
            # FlaxBertForQuestionAnswering splits its logits into num_labels parts, start and end:
            # it only works with num_labels=2 (as on the hub); num_labels=5 is for the other heads.
            cfg = BertConfig(**{**CONFIG, "num_labels": 2}) if cls is FlaxBertForQuestionAnswering else config
            model = cls(cfg, seed=seed)
            model.params = perturb(model.params, seed=1000 + seed)
            multiple_choice = cls is FlaxBertForMultipleChoice
            inputs = make_inputs(multiple_choice, seed=2000 + seed)
            outputs = run_model(model, inputs, fields)
            directory = out / name
            save_and_check(cls, model, directory, vocab_file, inputs, outputs, fields)
            report_dir(directory, model.params, args.quiet)

            if name == SHARDED_SOURCE:
                total = sum(np.asarray(v).nbytes for v in flatten_dict(model.params, sep="/").values())
                max_shard = total // 3 + 1  # greedy split in key order: 3 or 4 shards
                sharded = out / f"{name}_sharded"
                save_and_check(
                    cls, model, sharded, vocab_file, inputs, outputs, fields, max_shard_size=max_shard
                )
                shards = sorted(sharded.glob("flax_model-*-of-*.msgpack"))
                assert 2 <= len(shards) <= 4, shards
                assert (sharded / "flax_model.msgpack.index.json").is_file()
                assert not (sharded / "flax_model.msgpack").exists()
                print(f"\n(sharded: {len(shards)} shards, max_shard_size={max_shard}, params {total} bytes)")
                report_dir(sharded, model.params, quiet=True)
    finally:
        vocab_file.unlink(missing_ok=True)

    info = versions()
    (out / "versions.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print("\nversions:", json.dumps(info, sort_keys=True))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
