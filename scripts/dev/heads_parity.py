"""Print the README's per-head parity table: every class against transformers and bert_torch
(outputs and gradients) and its transformers-v4 Flax fixture against FlaxBert's outputs.

Uses the tests' own models, batches and outputs (tests/parity/test_heads.py,
tests/io/test_flax_v4.py), so the table measures the distances the tests judge (each within 1e-5,
or 3 x the reference's own float32 noise where that is larger: `parity.noise`). Needs the test
extra (torch, transformers).

    python scripts/dev/heads_parity.py
"""

from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2] / "tests"
sys.path[:0] = [str(TESTS / "parity"), str(TESTS / "io"), str(TESTS)]  # the modules and their helpers

import test_flax_v4 as flax_v4  # noqa: E402
import test_heads as heads  # noqa: E402
import transformers  # noqa: E402

from bertjax.config.heads import MODELS  # noqa: E402
from bertjax.io.hf import hf_name  # noqa: E402
from bertjax.pretrained import load_hf  # noqa: E402
from parity.convert import to_torch_model  # noqa: E402
from parity.noise import judge  # noqa: E402


def worst(ours: dict, theirs: dict, relative: bool = False) -> float:
    """The largest difference over every array (`relative`: to max(1, the array's largest))."""
    return max(judge(k, ours[k], theirs[k], theirs[k], 0.0, relative=relative,
                     floor=1.0 if relative else 0.0).distance for k in ours)


COLUMNS = ("class", "outputs vs transformers", "gradients vs transformers",
           "outputs vs `bert_torch`", "gradients vs `bert_torch`", "v4 Flax fixture vs FlaxBert")


def row(name: str) -> list[float]:
    """The five worst differences of one class (gradients relative, as the tests judge them)."""
    hf = heads._hf_model(name)
    directory = Path(tempfile.mkdtemp())
    hf.save_pretrained(directory)
    ours = load_hf(directory)
    batch = heads._batch(name)
    outputs, grads = heads._ours(ours, batch, name)
    hf_outputs, hf_grads = heads._theirs(hf, batch, name, MODELS[name].hf_outputs)
    mirror = to_torch_model(ours)
    torch_outputs, torch_grads = heads._theirs(mirror, batch, name,
                                               {f: f for f in MODELS[name].hf_outputs})
    torch_grads = {hf_name(k, type(ours).base_model_prefix): v for k, v in torch_grads.items()}
    path, saved = flax_v4._fixture(f"Flax{name}")
    return [worst(outputs, hf_outputs), worst(grads, hf_grads, True),
            worst(outputs, torch_outputs), worst(grads, torch_grads, True),
            worst(*flax_v4.ours_and_flax(load_hf(path), saved))]


def main() -> None:
    warnings.simplefilter("ignore")  # transformers' notes on saving
    transformers.logging.set_verbosity_error()
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for name in flax_v4.CLASSES:
        print(f"| {name} | " + " | ".join(f"{x:.1e}" for x in row(name)) + " |")


if __name__ == "__main__":
    main()
