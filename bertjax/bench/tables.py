"""Benchmark tables rendered from the JSON the benchmarks write, into the pages that show them.

A page marks where a table goes with the JSON it comes from (a path relative to the page):

    <!-- bench: benchmarks/train-cpu.json -->
    (the rendered table, replaced on every update)
    <!-- /bench -->

`python -m bertjax.bench.tables README.md docs/*.md` rewrites every marked block from its JSON
(a missing file renders as "not yet measured"); `--check` changes nothing and fails if a block is
out of date (the test suite runs it). So re-measuring is two commands: the benchmark with
`--json docs/benchmarks/NAME.json`, then this. Each table ends with its stamp: machine, command,
commit and date (`bertjax.bench.stamp`).

No framework import.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

BLOCK = re.compile(r"(<!-- bench: (?P<path>\S+) -->\n)(?P<body>.*?)(<!-- /bench -->)", re.S)


def _f(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _memory(num_bytes: float) -> str:
    return f"{num_bytes / 2**30:.2f} GiB"


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers),
            *("| " + " | ".join(cells) + " |" for cells in rows)]



def _training_settings(settings: dict[str, Any]) -> str:
    """"dropout 0.1", with the overrides of `--set`, a PRNG other than the default and a flat
    optimizer named."""
    text = f"dropout {settings['dropout']}"
    if settings.get("overrides"):
        text += ", " + ", ".join(f"{k}={v}" for k, v in settings["overrides"].items())
    if settings.get("prng_impl") not in (None, "threefry2x32"):
        text += f", dropout PRNG {settings['prng_impl']}"
    if settings.get("flat_optimizer"):
        text += ", optimizer over one vector (optim.flatten)"
    return text

def _step(report: dict[str, Any]) -> list[str]:
    """`bertjax bench train` / `infer`: the rows side by side."""
    s, c = report["settings"], report["config"]
    gpu = report.get("datasheet_peak") is not None
    mfu = "MFU (vs datasheet)" if gpu else "MFU (vs GEMM)"
    rows = [[f"{r['row']}", f"{r['tokens_per_s']:,.0f}", _f(r["vs_hf_eager"]),
             _f(r["vs_hf_compiled"]),
             f"{100 * (r['mfu_vs_datasheet'] if gpu else r['mfu_vs_gemm']):.1f}%",
             f"{1e3 * r['median_step_s']:.1f} ({1e3 * r['p10_step_s']:.1f}–"
             f"{1e3 * r['p90_step_s']:.1f})", f"{r['pipelined_tokens_per_s']:,.0f}",
             f"{r['first_step_s']:.1f}", _memory(r["peak_memory_bytes"])]
            for r in report["rows"]]
    lines = _table(["row", "tokens/s", "× transformers eager", "× transformers compiled", mfu,
                    "step ms median (p10–p90)", "pipelined tokens/s", "first step s",
                    "peak memory"], rows)
    gemm = report["gemm"]
    against = (f"{report['datasheet_peak']['name']}'s bfloat16 datasheet peak" if gpu else
               f"a float32 {gemm['size']}³ matmul measured in the same run "
               f"({gemm['flops_per_s'] / 1e9:,.0f} GFLOP/s)")
    lines += ["", f"`{c['num_hidden_layers']}` layers of `{c['hidden_size']}` "
              f"(preset {s['preset']}), sequence {s['seq']}, batch {s['batch']}, "
              f"{s['predictions']} predictions, {_training_settings(s)}; MFU against {against}."]
    lines += [f"Skipped {x['row']}: {x['reason']}." for x in report.get("skipped", [])]
    lines += [f"Failed {x['row']}." for x in report.get("failed", [])]
    return lines


def _embed(result: dict[str, Any]) -> list[str]:
    """`bertjax bench embed`: sentences/s of each row on the same lines, each bertjax row's
    ratio to transformers and its vectors' largest difference from transformers'."""
    rows = [[r["row"], f"{r['sentences_per_s']:,.1f}", f"{r['median_s']:.2f}",
             f"{r['first_s']:.2f}", f"{r['ratio']:.2f}×" if "ratio" in r else "",
             f"{r['max_abs_diff']:.1e}" if "max_abs_diff" in r else ""]
            for r in result["rows"]]
    lines = _table(["row", "sentences/s", "median s", "first call s", "× transformers",
                    "vectors' max difference"], rows)
    padding = 1 - result["real_tokens"] / result["padded_tokens"]
    lines += ["", f"{result['lines']:,} lines, {result['model_name']}; sorted batches of "
                  f"{result['batch_size']} ({padding:.0%} padding)"
                  + ("." if result.get("max_tokens") is None else
                     f"; packed: batches of {result['max_tokens']} token slots, "
                     + " and ".join(f"{R} rows × {S}" for R, S, _ in result["packed_shapes"])
                     + f" ({1 - result['real_tokens'] / result['packed_slots']:.0%} empty).")]
    return lines


def _finetune(result: dict[str, Any]) -> list[str]:
    """`bertjax bench finetune`: per task, padded against packed: steps, training seconds and
    the validation score of each seed."""
    rows = [[t["task"], t["score_name"], str(t["padded_steps"]), f"{t['padded_train_s']:.1f}",
             " ".join(f"{s:.3f}" for s in t["padded_scores"]), str(t["packed_steps"]),
             str(t["max_tokens"]), f"{t['packed_train_s']:.1f}",
             " ".join(f"{s:.3f}" for s in t["packed_scores"]), f"{t['speedup']:.2f}×"]
            for t in result["tasks"]]
    lines = _table(["task", "metric", "padded steps", "padded s", "scores", "packed steps",
                    "max tokens", "packed s", "scores", "speed-up"], rows)
    return lines + ["", f"{result['model_name']}, {result['epochs']} epoch(s), batch "
                        f"{result['batch_size']} (packed: the token budget of as many steps), "
                        f"max length {result['max_length']}, seeds {result['seeds']}; the "
                        "training loop's wall time, compilation included."]


def _pack(result: dict[str, Any]) -> list[str]:
    """`bertjax bench pack`: real-token shares per row, then the train step both ways."""
    shares = [[name, f"{c['none']['rows']:,}", f"{c['none']['real_token_share']:.1%}",
               f"{c['best-fit']['rows']:,}", f"{c['best-fit']['real_token_share']:.1%}", c["auto"]]
              for name, c in result["corpora"].items()]
    lines = _table(["corpus", "unpacked rows", "real tokens", "packed rows", "real tokens",
                    "auto"], shares)
    steps = [[r["packing"], f"{1e3 * r['step_s']:.1f}", f"{r['pairs_per_step']:.1f}",
              f"{r['real_tokens_per_step']:,.0f}", f"{r['real_tokens_per_s']:,.0f}"]
             for r in result["rows"]]
    lines += ["", *_table(["packing", "step ms", "pairs a step", "real tokens a step",
                           "real tokens/s"], steps)]
    return lines + ["", f"Rows of {result['seq_len']} tokens; the step: {result['preset']}, "
                        f"{result['batch_size']} rows, on the plays cut into speeches; packed "
                        f"trains on {result['speedup_real_tokens']:.2f}× the real tokens per "
                        "second."]


def _data(result: dict[str, Any]) -> list[str]:
    """`bertjax bench data`: the input pipeline's rates on one core."""
    rows = [["tokenise", f"{result['tokenise_mb_per_s']:.2f} MB/s"],
            ["tokenise + write shards", f"{result['preprocess_mb_per_s']:.2f} MB/s"],
            ["NSP pairs", f"{result['pairs_per_s']:,} pairs/s"],
            ["masked batches", f"{result['sequences_per_s']:,} sequences/s "
                               f"({result['tokens_per_s']:,} tokens/s)"]]
    return _table(["stage", "rate"], rows) + [
        "", f"{result['corpus_mb']:.2f} MB corpus, {result['documents']:,} documents, "
            f"{result['tokens']:,} tokens; one core."]


def _corpus(result: dict[str, Any]) -> list[str]:
    """`bertjax bench corpus`: `bertjax data` on generated corpora of several sizes."""
    rows = [[r["format"], f"{r['text_mb']:,.0f}", f"{r['input_mb_per_s']:.2f}",
             f"{r['max_rss_mb']:,.0f}"] for r in result["rows"]]
    return _table(["format", "corpus MB of text", "input MB/s", "peak RSS MB"], rows)


def _pretrain_job(result: dict[str, Any]) -> list[str]:
    """`scripts/dev/pretrain_vs_bench.py`: `bertjax pretrain` against the bench's step."""
    job, bench = result["job"], result["bench"]
    pipelined = bench["pipelined_tokens_per_s"]
    rows = [["the job (its summary: compilation, evaluation and checkpoints left out)",
             f"{job['tokens_per_s']:,.0f}", f"{result['share_of_pipelined']:.0%}"]]
    after = job.get("after_first_interval")
    if after:
        rows.append([f"the job after its first log interval (from step {after['from_step']})",
                     f"{after['tokens_per_s']:,.0f}",
                     f"{result['share_of_pipelined_after_first_interval']:.0%}"])
    if job["intervals"]:
        rates = [r["tokens_per_s"] for r in job["intervals"]]
        low, high = f"{min(rates) / pipelined:.0%}", f"{max(rates) / pipelined:.0%}"
        rows.append([f"each log interval ({len(rates)}, `speed` records)",
                     f"{min(rates):,.0f}–{max(rates):,.0f}",
                     low if low == high else f"{low}–{high}"])
    rows.append([f"the bench's {bench['row']} row, pipelined (synced: {bench['tokens_per_s']:,.0f})",
                 f"{pipelined:,.0f}", "100%"])
    return _table(["", "tokens/s", "share of the bench's pipelined"], rows) + [
        "", f"{job['steps']} steps, first step {job['first_step_s']:.1f} s. The bench, in the "
            f"same lease: `{bench['command']}`."]


RENDERERS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "train": _step, "infer": _step, "embed": _embed, "data": _data, "corpus": _corpus,
    "finetune": _finetune, "pack": _pack, "pretrain-job": _pretrain_job}


def render(path: Path) -> str:
    """The Markdown of the table in `path` (a benchmark's JSON) with its stamp line, or a line
    saying it was not measured yet."""
    if not path.is_file():
        return (f"Not yet measured on the current code (`{path.name}` is written by the "
                "benchmark's `--json`).\n")
    result = json.loads(path.read_text())
    stamp = result["provenance"]
    lines = RENDERERS[stamp["kind"]](result)
    lines += ["", f"Measured on {stamp['machine']}, commit `{stamp['commit'] or 'unknown'}`, "
                  f"{stamp['date']}: `{stamp['command']}`."]
    return "\n".join(lines) + "\n"


def update(page: Path, check: bool = False) -> list[str]:
    """Rewrite the marked blocks of `page` (unless `check`); the JSON paths of blocks that were
    (or, with `check`, would be) changed."""
    text = page.read_text(encoding="utf-8")
    changed: list[str] = []

    def replace(match: re.Match) -> str:
        body = render((page.parent / match["path"]).resolve())
        if body != match["body"]:
            changed.append(match["path"])
        return match[1] + body + match[4]

    new = BLOCK.sub(replace, text)
    if changed and not check:
        page.write_text(new, encoding="utf-8")
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bertjax.bench.tables",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a table differs from its JSON")
    args = parser.parse_args(argv)
    stale = [f"{page}: {path}" for page in args.pages for path in update(page, args.check)]
    for line in stale:
        print(("out of date: " if args.check else "updated: ") + line)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
