"""`bertjax data` on a large generated corpus: input MB/s and the peak memory of the process, at
several corpus sizes, to show that memory stays flat while the corpus grows.

The corpus is the bundled Shakespeare repeated until it is large enough (each copy's scenes in a
new order and each scene's sentences shuffled, with a seeded generator, so no two documents are
equal), one scene per row, written as Parquet (or JSON lines, for comparison) in a temporary
directory, streaming. Nothing is downloaded.

Each size runs `bertjax data` in its own child process (`python -m bertjax.cli data ...`), so
its peak resident memory is its own: `os.wait4` gives the child's `ru_maxrss`, measured by a small
launcher process (see `run_child`: a child's ru_maxrss also counts the process it was forked
from). The input rate is
the text's UTF-8 megabytes over the child's wall time (start-up and vocabulary loading included,
so small corpora under-state it) and, beside it, the rate `bertjax data` itself writes in
meta.json (reading + tokenising + writing shards). By default no NSP pairs are made
(`--seq-len 0`): their array grows with the corpus by design and would hide what the reader
holds; `--seq-len 128` measures the whole command.

    bertjax bench corpus --sizes-mb 50 200          # the numbers for a report
    bertjax bench corpus --sizes-mb 5 --json out.json   # a quick check

The machine must be otherwise idle for the rates to mean anything; the peak memory does not
depend on it.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from bertjax.bench.options import SIZES_MB
from bertjax.errors import InputError

ROW_GROUP_ROWS = 4096  # rows per Parquet row group (scenes: about 20 MB of text)
FORMATS = ("parquet", "jsonl", "jsonl.zst")
# corpus sizes, MB of text: the smallest holds the two documents `bertjax data` needs (a scene is
# about 5 KB), the largest 100 GB


def shakespeare_texts(megabytes: float, seed: int = 0) -> Iterator[str]:
    """Scenes of the bundled plays as texts, copy after copy (scenes reordered, sentences
    shuffled), until `megabytes` of UTF-8 text have been given."""
    from bertjax.data import corpus_documents

    scenes = list(corpus_documents("shakespeare", split="all"))
    rng = random.Random(seed)
    left = megabytes * 1e6
    while True:
        for i in rng.sample(range(len(scenes)), len(scenes)):
            sentences = rng.sample(scenes[i], len(scenes[i]))
            text = " ".join(sentences)
            yield text
            left -= len(text.encode("utf-8"))
            if left <= 0:
                return


def write_corpus(path: Path, megabytes: float, kind: str, *, seed: int = 0,
                 row_group_rows: int = ROW_GROUP_ROWS) -> dict[str, Any]:
    """Write `megabytes` of generated text as `kind` ("parquet", "jsonl" or "jsonl.zst") to
    `path`, streaming; its text megabytes, rows and file megabytes."""
    texts = shakespeare_texts(megabytes, seed)
    text_bytes = rows = 0
    if kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pa.schema([("text", pa.string())])
        with pq.ParquetWriter(path, schema) as writer:
            while chunk := list(itertools.islice(texts, row_group_rows)):
                writer.write_table(pa.table({"text": chunk}, schema=schema))
                rows += len(chunk)
                text_bytes += sum(len(t.encode("utf-8")) for t in chunk)
    elif kind in ("jsonl", "jsonl.zst"):
        with open(path, "wb") as raw:
            out: Any = raw
            if kind == "jsonl.zst":
                import zstandard

                out = zstandard.ZstdCompressor(level=3).stream_writer(raw)
            for text in texts:
                out.write((json.dumps({"text": text}) + "\n").encode("utf-8"))
                rows += 1
                text_bytes += len(text.encode("utf-8"))
            if out is not raw:
                out.flush(zstandard.FLUSH_FRAME)
    else:
        raise InputError(f"unknown corpus format {kind!r}; choose one of {', '.join(FORMATS)}")
    return {"text_mb": round(text_bytes / 1e6, 3), "rows": rows,
            "file_mb": round(path.stat().st_size / 1e6, 3)}


# Runs the command and reports its peak memory. A process's ru_maxrss counts the image it was
# forked from (Linux takes the old image's high-water mark at exec), so the command is started by
# this small launcher, not by the benchmark's own process, whose size grows with the corpora it
# writes.
_LAUNCHER = """
import json, os, subprocess, sys
proc = subprocess.Popen(json.loads(sys.argv[1]))
_, status, usage = os.wait4(proc.pid, 0)
print(json.dumps({"returncode": os.waitstatus_to_exitcode(status), "max_rss": usage.ru_maxrss}))
"""


def run_child(argv: Sequence[str], cpus: int | None = None) -> dict[str, Any]:
    """Run `argv`; its exit status, wall seconds, peak resident memory (bytes: the command's own,
    from `os.wait4` in a small launcher) and output. `cpus`: pin it to the first N cores this
    process may use."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    pin = set(allowed[:cpus]) if cpus and allowed else None
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _LAUNCHER, json.dumps(list(argv))],
                          capture_output=True, text=True, check=False,
                          preexec_fn=(lambda: os.sched_setaffinity(0, pin)) if pin else None)
    seconds = time.perf_counter() - start
    *output, report = proc.stdout.rstrip("\n").split("\n") or [""]
    if proc.returncode != 0 or not report.startswith("{"):
        raise RuntimeError(f"the launcher of {argv[:4]} failed:\n{proc.stderr[-2000:]}")
    launched = json.loads(report)
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return {"returncode": launched["returncode"], "seconds": round(seconds, 3),
            "max_rss_bytes": launched["max_rss"] * scale,
            "output": "\n".join(output) + proc.stderr}


def _vocabulary(vocab: str | None, directory: Path) -> Path:
    """`vocab`, or an 8,000-token vocabulary trained on the bundled plays into `directory`."""
    if vocab:
        return Path(vocab)
    from bertjax.data import Tokenizer, corpus_documents

    sentences = (s for d in corpus_documents("shakespeare", split="all") for s in d)
    Tokenizer.train(sentences, vocab_size=8000).save(directory)
    return directory


def measure(corpus: Path, vocab: Path, out: Path, *, seq_len: int = 0,
            cpus: int | None = None) -> dict[str, Any]:
    """One `bertjax data` run in a child process: its wall time, peak memory and meta.json."""
    argv = [sys.executable, "-m", "bertjax.cli", "data", "--corpus", str(corpus), "--vocab",
            str(vocab), "--out", str(out), "--seq-len", str(seq_len), "--no-progress"]
    child = run_child(argv, cpus)
    if child["returncode"] != 0:
        raise RuntimeError(f"`bertjax data` failed (exit status {child['returncode']}):\n"
                           f"{child['output'][-2000:]}")
    meta = json.loads((out / "meta.json").read_text())
    return {"seconds": child["seconds"], "max_rss_mb": round(child["max_rss_bytes"] / 1e6, 1),
            "shards_mb_per_s": meta["mb_per_s"], "documents": meta["documents"],
            "tokens": meta["tokens"]}


def run_corpus_benchmark(sizes_mb: Sequence[float] = (50, 200), formats: Sequence[str] = ("parquet",),
                         *, vocab: str | None = None, seq_len: int = 0, cpus: int | None = None,
                         workdir: str | None = None, seed: int = 0,
                         print_fn: Callable[[str], None] = print) -> dict[str, Any]:
    """Generate each corpus, run `bertjax data` on it, report; the rows and the setting. A size
    outside `SIZES_MB` (or NaN) is an InputError, before anything is written."""
    check_sizes(sizes_mb)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    result: dict[str, Any] = {"cores": min(cpus or cores or 1, cores or 1), "seq_len": seq_len,
                              "python": sys.version.split()[0], "rows": []}
    with tempfile.TemporaryDirectory(prefix="bertjax-bench-corpus-", dir=workdir) as tmp:
        root = Path(tmp)
        vocab_path = _vocabulary(vocab, root / "vocab")
        for kind, size in itertools.product(formats, sizes_mb):
            corpus = root / f"corpus-{size:g}mb.{kind}"
            made = write_corpus(corpus, size, kind, seed=seed)
            row = {"format": kind, **made,
                   **measure(corpus, vocab_path, root / f"shards-{kind}-{size:g}", seq_len=seq_len,
                             cpus=cpus)}
            row["input_mb_per_s"] = round(row["text_mb"] / row["seconds"], 3)
            result["rows"].append(row)
            print_fn(_row_line(row))
            corpus.unlink()
            shutil.rmtree(root / f"shards-{kind}-{size:g}")
    print_fn(_summary(result))
    return result


def check_sizes(sizes_mb: Sequence[float]) -> None:
    """InputError naming the first size that is no number of megabytes in `SIZES_MB`."""
    low, high = SIZES_MB
    for size in sizes_mb:
        if not low <= size <= high:  # NaN too
            raise InputError(f"corpus size {size} MB is out of range: give sizes from {low:g} to "
                             f"{high:g} MB of text")


def _row_line(row: dict[str, Any]) -> str:
    return (f"{row['format']:>9}  {row['text_mb']:8.1f} MB text ({row['file_mb']:.1f} MB file, "
            f"{row['rows']:,} rows)  {row['seconds']:7.1f} s  {row['input_mb_per_s']:6.2f} MB/s "
            f"wall, {row['shards_mb_per_s']:6.2f} MB/s in bertjax data  peak RSS "
            f"{row['max_rss_mb']:7.1f} MB")


def _summary(result: dict[str, Any]) -> str:
    """How the peak memory changed from the smallest to the largest corpus of each format."""
    lines = [f"on {result['cores']} core(s), seq_len {result['seq_len']} "
             f"({'no NSP pairs' if not result['seq_len'] else 'with NSP pairs'})"]
    for kind in dict.fromkeys(r["format"] for r in result["rows"]):
        rows = sorted((r for r in result["rows"] if r["format"] == kind), key=lambda r: r["text_mb"])
        if len(rows) > 1:
            small, large = rows[0], rows[-1]
            lines.append(
                f"{kind}: corpus x{large['text_mb'] / small['text_mb']:.1f} "
                f"({small['text_mb']:.1f} -> {large['text_mb']:.1f} MB of text), peak RSS "
                f"{small['max_rss_mb']:.0f} -> {large['max_rss_mb']:.0f} MB "
                f"({large['max_rss_mb'] - small['max_rss_mb']:+.0f} MB)")
    return "\n".join(lines)
