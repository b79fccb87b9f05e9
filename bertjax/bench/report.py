"""From the children's raw timings to the numbers people compare: tokens/s, ratios to
transformers, achieved FLOP/s, model FLOP utilisation; a compact table and the JSON.

Every row is credited with the same model FLOPs (`bertjax.bench.flops`), so MFU ratios between
rows equal their tokens/s ratios.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bertjax.bench.options import Row

# The reference rows of the ratio columns: (implementation, field).
RATIO_REFERENCES = (("hf-eager", "vs_hf_eager"), ("hf-compiled", "vs_hf_compiled"))


def summarize_row(
    row: Row,
    raw: dict[str, Any],
    *,
    tokens_per_step: int,
    flops_per_token: float,
    gemm_flops_per_s: float,
    peak_flops_per_s: float | None,
) -> dict[str, Any]:
    """One row's derived numbers (ratios are added by `add_ratios` once every row is in)."""
    times = np.asarray(raw["step_times_s"], np.float64)
    median = float(np.median(times))
    tokens_per_s = tokens_per_step / median
    achieved = flops_per_token * tokens_per_s
    return {
        "row": row.name,
        "impl": row.impl,
        "dtype": row.dtype,
        "tokens_per_s": tokens_per_s,
        "vs_hf_eager": None,
        "vs_hf_compiled": None,
        "model_flops_per_token": flops_per_token,
        "achieved_flops_per_s": achieved,
        "mfu_vs_gemm": achieved / gemm_flops_per_s,
        "mfu_vs_datasheet": achieved / peak_flops_per_s if peak_flops_per_s else None,
        "median_step_s": median,
        "p10_step_s": float(np.percentile(times, 10)),
        "p90_step_s": float(np.percentile(times, 90)),
        # the host's share of a synced step: until the step function returned (for a compiled JAX
        # step most likely its kernel launches; eager torch launches op by op)
        "median_dispatch_s": _median_or_none(raw.get("dispatch_times_s")),
        "pipelined_step_s": raw["pipelined_step_s"],
        "pipelined_tokens_per_s": tokens_per_step / raw["pipelined_step_s"],
        "first_step_s": raw["first_step_s"],
        "peak_memory_bytes": raw["peak_memory_bytes"],
        "memory_source": raw["memory_source"],
        "loss": raw.get("loss"),
        "parameters": raw["parameters"],
        # the class the row ran: bertjax's and bert_torch's with the family, transformers' own
        "model_class": raw.get("model_class"),
        "matmul_precision": raw["matmul_precision"],  # float32 matmuls: JAX's / torch's setting
        "xla_options": raw.get("xla_options"),  # bertjax rows: XLA_FLAGS and the step's options
        # bertjax rows: what bertjax.train.host_memory.keep_freed_memory did; PyTorch rows run as shipped
        "host_memory": raw.get("host_memory", "glibc's defaults"),
        "device": raw["device"],
        "versions": raw["versions"],
        "step_times_s": list(raw["step_times_s"]),
    }


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{1e3 * seconds:.1f}"


def _median_or_none(times: list[float] | None) -> float | None:
    return float(np.median(times)) if times else None  # None: a JSON written before it was kept


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """`vs_hf_eager` / `vs_hf_compiled`: tokens/s over the transformers row's of the same dtype
    (or the first transformers row when none has it); None when that row did not run."""
    for impl, field in RATIO_REFERENCES:
        refs = [r for r in rows if r["impl"] == impl]
        for r in rows:
            ref = next((c for c in refs if c["dtype"] == r["dtype"]), refs[0] if refs else None)
            r[field] = r["tokens_per_s"] / ref["tokens_per_s"] if ref else None
            r[f"{field}_row"] = ref["row"] if ref else None


def _si(value: float) -> str:
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _memory(num_bytes: int) -> str:
    return f"{num_bytes / 2**30:.2f} GiB" if num_bytes >= 2**30 else f"{num_bytes / 2**20:,.0f} MiB"


def _grid(headers: list[str], lines: list[list[str]]) -> list[str]:
    """Columns as wide as their widest cell; the first left-aligned, the others right."""
    widths = [max(len(x) for x in col) for col in zip(headers, *lines, strict=True)]

    def fmt(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        return "  ".join([first, *(c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))])

    return [fmt(headers), *(fmt(cells) for cells in lines)]


def format_table(report: dict[str, Any]) -> str:
    """The report as a header, one line per row, then the skipped and failed rows."""
    s, c, dev, gemm = report["settings"], report["config"], report["device"], report["gemm"]
    peak = report["datasheet_peak"]
    mode = "training step (forward, backward, AdamW)" if s["mode"] == "train" else \
        "inference forward"
    threads = report["threads"]
    counted = report.get("model_flops_counted_as", "BERT's")  # a report from before it was kept
    out = [
        f"bertjax bench {s['mode']}: {mode}",
        f"model: preset {s['preset']} (L{c['num_hidden_layers']} H{c['hidden_size']} "
        f"A{c['num_attention_heads']} I{c['intermediate_size']} V{c['vocab_size']}), seq {s['seq']}, "
        f"batch {s['batch']}, {s['predictions']} predictions, dropout {s['dropout']}"
        + (f" (bertjax PRNG {s.get('prng_impl', 'threefry2x32')})" if s["dropout"] else "")
        + (f", overrides {s['overrides']}" if s["overrides"] else ""),
        f"device: {dev['platform']} ({dev['device_kind']}); {threads['description']}",
        f"timing: {s['steps']} steps after the first + {s['warmup']} warm-up, a device sync after "
        f"each (median, p10-p90; host ms: until the step call returned); pipelined: {s['steps']} "
        "steps, one sync at the end",
        f"model FLOPs: {_si(report['model_flops_per_token'])}FLOP/token "
        f"({'3x forward, ' if s['mode'] == 'train' else ''}{counted} count for every row, so MFU "
        "ratios equal speed ratios)",
        f"MFU against: measured GEMM {gemm['dtype']} {gemm['size']}^3 through JAX "
        f"{_si(gemm['flops_per_s'])}FLOP/s; datasheet "
        + (f"{peak['name']} {_si(peak['flops_per_s'])}FLOP/s bf16 dense" if peak
           else f"n/a ({dev['platform']}: no datasheet peak)"),
        "",
    ]
    headers = ["row", "tokens/s", "x eager", "x compiled", "FLOP/s", "MFU gemm", "MFU peak",
               "step ms median (p10-p90)", "host ms", "pipelined tok/s", "first step s",
               "peak mem"]
    lines = [[
        r["row"], f"{r['tokens_per_s']:,.0f}", _ratio(r["vs_hf_eager"]), _ratio(r["vs_hf_compiled"]),
        _si(r["achieved_flops_per_s"]), _pct(r["mfu_vs_gemm"]), _pct(r["mfu_vs_datasheet"]),
        f"{1e3 * r['median_step_s']:.1f} ({1e3 * r['p10_step_s']:.1f}-{1e3 * r['p90_step_s']:.1f})",
        _ms(r.get("median_dispatch_s")), f"{r['pipelined_tokens_per_s']:,.0f}", f"{r['first_step_s']:.1f}",
        _memory(r["peak_memory_bytes"]),
    ] for r in report["rows"]]
    out += _grid(headers, lines) if lines else ["(no row ran)"]
    sources = sorted({r["memory_source"] for r in report["rows"]})
    if sources:
        out.append(f"peak mem: {'; '.join(sources)}")
    out += [f"skipped {x['row']}: {x['reason']}" for x in report["skipped"]]
    out += [f"FAILED {x['row']}: {x['error'].strip().splitlines()[-1] if x['error'].strip() else '?'}"
            for x in report["failed"]]
    return "\n".join(out)
