"""Shared builders for the tests of `bertjax.use`, the commands and runs (no tests here).

`tiny_checkpoint()` is a small random BERT with a WordPiece vocabulary trained on two scenes of
Shakespeare, saved as a Hugging Face directory (what `bertjax convert` writes), made once per
process. `tiny_run(path)` copies a 6-step run there, pre-trained once per test run
(`built_once`); `state_leaves(tree)` are a state's arrays on the host, to compare two states;
`qa_records(n, seed)` are question-answering examples whose answer is a name put in the lines.
"""

from __future__ import annotations

import atexit
import fcntl
import functools
import itertools
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np
from flax import nnx

from bertjax import BertConfig, BertForPreTraining, save_pretrained
from bertjax.common.caches import user_cache_directory
from bertjax.config.heads import MODELS
from bertjax.data import Tokenizer, corpus_documents
from bertjax.data.squad import QAExample

_TMP = Path(tempfile.mkdtemp(prefix="bertjax-use-tests-"))
# the run's shared cache of pre-training data (tests/conftest.py), where `bertjax pretrain` finds
# it: pass it to `pretrain(..., data_cache=DATA_CACHE)` (None where BERTJAX_DATA_CACHE=0)
DATA_CACHE = user_cache_directory("BERTJAX_DATA_CACHE", "data")
atexit.register(shutil.rmtree, _TMP, ignore_errors=True)


def sentences(n: int = 400) -> list[str]:
    """The first `n` sentences of the held-out plays."""
    docs = corpus_documents("shakespeare", split="eval")
    return list(itertools.islice((s for d in docs for s in d), n))


QA_NAMES = ["Prospero", "Miranda", "Caliban", "Ariel", "Titania", "Oberon"]  # not in the lines


def qa_records(n: int, seed: int, impossible: float = 0.0) -> list[QAExample]:
    """Contexts of 3 to 6 lines with a name put in one (none, for a share `impossible`)."""
    rng, lines = random.Random(seed), sentences(400)
    out = []
    for i in range(n):
        chosen = [rng.choice(lines) for _ in range(rng.randint(3, 6))]
        name = rng.choice(QA_NAMES)
        if rng.random() >= impossible:
            k = rng.randrange(len(chosen))
            chosen[k] = f"{chosen[k]} {name} said so."
        context = " ".join(chosen)
        at = context.find(f" {name} said so.")
        answers = ((name, at + 1),) if at >= 0 else ()
        out.append(QAExample(f"{seed}-{i}", "Who said so?", context, answers, f"q{i}"))
    return out


@functools.cache
def tiny_checkpoint(seed: int = 0) -> Path:
    """A Hugging Face directory: tiny BertForPreTraining (random weights) + its tokenizer."""
    tokenizer = Tokenizer.train(sentences(), vocab_size=400)
    config = BertConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size,
                                    pad_token_id=tokenizer.special.pad)
    out = _TMP / f"tiny-{seed}"
    save_pretrained(BertForPreTraining(config, rngs=nnx.Rngs(seed)), out, tokenizer)
    return out


def peaked_checkpoint(out: Path) -> Path:
    """A Hugging Face directory at `out`: a tiny checkpoint whose MLM distributions are peaked
    (large random weights), so the top-k order is decided by clear margins rather than float32
    round-off."""
    from bertjax.data import Tokenizer

    tokenizer = Tokenizer.train(sentences(), vocab_size=400)
    config = BertConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size, initializer_range=0.3,
                                    pad_token_id=tokenizer.special.pad)
    save_pretrained(BertForPreTraining(config, rngs=nnx.Rngs(4)), out, tokenizer)
    return out


def pipeline_fill_mask(model_dir: Path, texts: list[str], device: str) -> list[list[list[dict]]]:
    """transformers' `pipeline("fill-mask")` on `model_dir`: per text, per [MASK], its top 5
    (`{"token", "score", ...}` dicts); a one-mask text's flat list is wrapped as one mask."""
    import warnings

    import transformers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = transformers.pipeline("fill-mask", model=str(model_dir), tokenizer=str(model_dir),
                                     device=device)
    refs = [pipe(text, top_k=5) for text in texts]
    return [[ref] if isinstance(ref[0], dict) else ref for ref in refs]


def built_once(name: str, build: Callable[[Path], object]) -> Path:
    """`build(folder)` run once for the whole test run, by the first process that asks (the others
    wait on a lock, then reuse it), in the folder tests/conftest.py shares with every xdist worker.
    Treat the result as read-only: copy it before changing it."""
    root = Path(os.environ.get("BERTJAX_TESTS_SHARED") or _TMP)
    target, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            shutil.rmtree(target, ignore_errors=True)  # a build that failed half-way
            build(target)
            done.touch()
    return target


def _pretrain_tiny(run: Path) -> None:
    from bertjax.cli.main import main

    code = main(["pretrain", "--model.preset=tiny", "--data.vocab-size=300", "--data.seq-len=32",
                 "--data.max-predictions=5", "--data.batch-size=4", "--data.eval-batches=1",
                 "--train.steps=6", "--train.eval-every=3", "--train.checkpoint-every=3",
                 "--no-progress", f"--output-dir={run}"])
    assert code == 0


def tiny_run(run: Path) -> Path:
    """A `bertjax pretrain` run of 6 steps at `run`, checkpoints at 3 and 6 (evaluated at both):
    a copy of the one the test run trains once (its summary.json names that one's folder)."""
    shutil.copytree(built_once("tiny_run", _pretrain_tiny), run)
    return run


def state_leaves(tree) -> list[np.ndarray]:
    """The arrays of a (restored) state on the host; PRNG keys as their key data."""
    def host(x):
        if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        return np.asarray(x)

    return [host(x) for x in jax.tree.leaves(tree)]


def count_row_sharing(monkeypatch, module) -> list[int]:
    """Record, for every packed batch `module` makes (its `packed_batches`), how many inputs its
    fullest row holds: a packed test asserts some row held several, or a leak between the inputs
    of a row could not show."""
    made = module.packed_batches
    most: list[int] = []

    def recording(*args, **kwargs):
        batches = made(*args, **kwargs)
        most.extend(int(np.bincount(b.layout.row).max()) for b in batches)
        return batches

    monkeypatch.setattr(module, "packed_batches", recording)
    return most


def family_config(name: str, config: BertConfig) -> BertConfig:
    """`config` in a family model class `name` belongs to: ELECTRA's discriminator
    (BertForReplacedTokenDetection) is an ELECTRA's head only; every other class keeps `config`."""

    families = MODELS[name].families
    return config.replace(model_type=families[0]) if families else config
