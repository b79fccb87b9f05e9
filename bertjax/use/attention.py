"""Attention maps of one input, drawn two ways: a PNG grid of heat maps per layer, and one
self-contained HTML page in the spirit of bertviz's head view (tokens in two columns joined by
lines whose opacity is the attention weight, plus a heat-map view).

Layers and heads are numbered from 1 in everything a person reads (file names, titles, the
`layer` argument of `plot_layer`, the command line); array indices are 0-based as usual.
Matplotlib is used through its Agg canvas directly (no pyplot, no global backend switch).
"""

from __future__ import annotations

import colorsys
import dataclasses
import html
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from bertjax.files import atomic_file, write_text_atomic

DPI = 100  # PNG resolution; figure sizes are multiples of 1/4 inch, so pixels = inches * DPI exactly
MAX_FIGURE_INCHES = 32.0  # long inputs shrink their panels rather than grow past this
LABEL_CHARS = 14  # longer token labels are cut (with an ellipsis) in the PNGs
CMAP = "Blues"  # heat maps: white = no attention, dark blue = the layer's largest weight
BOUNDARY_COLOR = "#d62728"  # the line between sentence A and sentence B
# one colour per head, shared by the PNG titles and the HTML page (bertviz uses d3's category10)
_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#ad494a"]


def head_colors(num_heads: int) -> list[str]:
    """A distinct colour per head: category10 (+2), then golden-angle hues beyond 12 heads."""
    colors = _PALETTE[:num_heads]
    for h in range(len(colors), num_heads):
        r, g, b = colorsys.hls_to_rgb((h * 0.618034) % 1.0, 0.42, 0.65)
        colors.append(f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}")
    return colors


@dataclasses.dataclass(frozen=True)
class AttentionMaps:
    """Every layer's and head's attention over one input's real tokens (no padding)."""

    tokens: list[str]  # [CLS] A [SEP] (B [SEP])
    boundary: int | None  # index of the first token of sentence B; None for a single sentence
    attentions: np.ndarray  # (L, A, S, S) float32: [layer, head, query, key], rows sum to 1
    model: str = "BERT"  # what produced them, for titles

    def __post_init__(self) -> None:
        n = len(self.tokens)
        if self.attentions.ndim != 4 or self.attentions.shape[2:] != (n, n):
            raise ValueError(f"attentions of shape {self.attentions.shape} do not fit {n} tokens: "
                             f"expected (layers, heads, {n}, {n})")
        if self.boundary is not None and not 0 < self.boundary < n:
            raise ValueError(f"boundary {self.boundary} is outside the {n} tokens")

    @property
    def num_layers(self) -> int:
        return self.attentions.shape[0]

    @property
    def num_heads(self) -> int:
        return self.attentions.shape[1]

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)


def attention_maps(
    model: Any,
    tokenizer: Any,
    sentence_a: str,
    sentence_b: str | None = None,
    *,
    max_length: int | None = None,
    name: str | None = None,
) -> AttentionMaps:
    """One inference forward of [CLS] A [SEP] (B [SEP]) with `output_attentions=True`.

    `max_length` (default: the model's positions) cuts longer text, with a `TruncationWarning`
    naming the sentence(s). `name` labels the pictures (default: the model's class name).
    Raises ValueError for an empty sentence or one that has no tokens.
    """
    from bertjax.use.encode import encode, jitted_forward, model_max_length

    if not sentence_a.strip():
        raise ValueError("sentence A is empty")
    if sentence_b is not None and not sentence_b.strip():
        raise ValueError("sentence B is empty (leave it out to look at one sentence)")
    limit = model_max_length(model)
    max_length = limit if max_length is None else max_length
    if max_length > limit:
        raise ValueError(f"max_length {max_length} is longer than the model's {limit} positions")
    pairs = None if sentence_b is None else [sentence_b]
    label = "sentence A" if sentence_b is None else "sentences A and B together"
    batch = encode(tokenizer, [sentence_a], pairs, max_length=max_length, names=[label])
    tokens = batch.tokens[0]
    n = len(tokens)
    types = batch.token_type_ids[0, :n]  # (S,) 0 on [CLS] A [SEP], 1 on B [SEP]
    boundary = None if sentence_b is None else int(np.argmax(types == 1))
    a_len = (n if boundary is None else boundary) - 2
    if a_len <= 0:
        raise ValueError(f"sentence A has no tokens in this vocabulary: {sentence_a!r}")
    if boundary is not None and n - boundary - 1 <= 0:
        raise ValueError(f"sentence B has no tokens in this vocabulary: {sentence_b!r}")

    out = jitted_forward(model, output_attentions=True)(batch.arrays(model.config))
    attentions = np.stack([np.asarray(a)[0, :, :n, :n] for a in out.attentions])  # (L, A, S, S)
    return AttentionMaps(tokens=tokens, boundary=boundary,
                         attentions=attentions.astype(np.float32, copy=False),
                         model=name or type(model).__name__)


# --- PNG grids ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class GridLayout:
    """How one layer's PNG is laid out: panel grid, label font, label stride, figure size."""

    rows: int
    cols: int
    font_pt: float  # token label size
    stride: int  # label every `stride`-th token (1 = all) so long inputs stay legible
    width_in: float
    height_in: float

    @property
    def pixels(self) -> tuple[int, int]:
        """(height, width) of the PNG, as `matplotlib.image.imread` returns its shape."""
        return round(self.height_in * DPI), round(self.width_in * DPI)


def grid_layout(num_tokens: int, num_heads: int, max_label_chars: int = 6) -> GridLayout:
    """Panels grow with the token count (2 to 5 inches) and labels shrink to fit, down to 6 pt;
    below that only every `stride`-th token is labelled. Sizes are rounded up to 1/4 inch."""
    cols = math.ceil(math.sqrt(num_heads))
    rows = math.ceil(num_heads / cols)
    panel = min(5.0, max(2.0, 0.16 * num_tokens + 0.6))  # inches per heat map
    pitch = panel * 72 / num_tokens  # points per token
    font = min(8.0, max(6.0, 0.8 * pitch))
    stride = max(1, math.ceil(1.15 * font / pitch))
    label = min(max_label_chars, LABEL_CHARS) * font * 0.62 / 72 + 0.3  # tick labels + ticks
    width = cols * (panel + label) + 1.2  # + colour bar
    height = rows * (panel + label + 0.3) + 0.7  # + panel titles, figure title

    def quarter(x: float) -> float:
        return min(MAX_FIGURE_INCHES, math.ceil(x * 4) / 4)

    return GridLayout(rows, cols, font, stride, quarter(width), quarter(height))


def _label(token: str) -> str:
    return token if len(token) <= LABEL_CHARS else token[:LABEL_CHARS - 1] + "…"


def _short(name: str, limit: int = 60) -> str:
    """A long model path keeps its end, the part that tells models apart."""
    return name if len(name) <= limit else "…" + name[-(limit - 1):]


def plot_layer(maps: AttentionMaps, layer: int, path: str | os.PathLike) -> Path:
    """Write layer `layer` (1-based) as a PNG grid of heat maps, one per head: queries down the
    y axis, keys along the x axis, one colour scale (0 to the layer's largest weight)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not 1 <= layer <= maps.num_layers:
        raise ValueError(f"layer {layer} does not exist: the model has layers 1 to {maps.num_layers}")
    att = maps.attentions[layer - 1]  # (A, S, S)
    labels = [_label(t) for t in maps.tokens]
    grid = grid_layout(maps.num_tokens, maps.num_heads, max(map(len, labels)))
    colors = head_colors(maps.num_heads)
    vmax = float(att.max()) or 1.0
    ticks = list(range(0, maps.num_tokens, grid.stride))

    fig = Figure(figsize=(grid.width_in, grid.height_in), dpi=DPI, layout="constrained",
                 facecolor="white")
    FigureCanvasAgg(fig)
    axes = fig.subplots(grid.rows, grid.cols, squeeze=False)
    image = None
    for h, ax in enumerate(axes.flat):
        if h >= maps.num_heads:
            ax.set_axis_off()
            continue
        image = ax.imshow(att[h], cmap=CMAP, vmin=0.0, vmax=vmax, interpolation="nearest")
        ax.set_title(f"head {h + 1}", color=colors[h], fontsize=10, fontweight="bold")
        ax.set_xticks(ticks, [labels[i] for i in ticks], rotation=90, fontsize=grid.font_pt)
        ax.set_yticks(ticks, [labels[i] for i in ticks], fontsize=grid.font_pt)
        ax.tick_params(length=2, pad=1)
        if maps.boundary is not None:
            ax.axhline(maps.boundary - 0.5, color=BOUNDARY_COLOR, lw=0.9, ls="--")
            ax.axvline(maps.boundary - 0.5, color=BOUNDARY_COLOR, lw=0.9, ls="--")
        if h % grid.cols == 0:
            ax.set_ylabel("query (attends from)", fontsize=8)
        if h + grid.cols >= maps.num_heads:  # lowest panel of its column
            ax.set_xlabel("key (attends to)", fontsize=8)
    fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    split = "" if maps.boundary is None else "; red dashes: start of sentence B"
    fig.suptitle(f"{_short(maps.model)}: layer {layer} of {maps.num_layers}, {maps.num_heads} heads, "
                 f"{maps.num_tokens} tokens{split}", fontsize=11)

    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, facecolor="white")
    return Path(path)


def plot_all(maps: AttentionMaps, out_dir: str | os.PathLike, layers: list[int] | None = None
             ) -> list[Path]:
    """`layer_01.png`, `layer_02.png`, ... in `out_dir`: every layer, or the 1-based `layers`."""
    layers = list(range(1, maps.num_layers + 1)) if layers is None else list(layers)
    bad = [layer for layer in layers if not 1 <= layer <= maps.num_layers]
    if bad:
        raise ValueError(f"no layer {', '.join(map(str, bad))}: the model has layers 1 to "
                         f"{maps.num_layers}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return [plot_layer(maps, layer, out_dir / f"layer_{layer:02d}.png") for layer in layers]


# --- HTML head view -------------------------------------------------------------------------------


def page_data(maps: AttentionMaps) -> str:
    """The page's data as JSON text; weights in float32's shortest round-trip form, so parsing
    them back as float32 gives the model's numbers exactly. Safe inside a <script> element."""
    att = maps.attentions  # (L, A, S, S)
    if not np.isfinite(att).all():
        raise ValueError("the attentions contain NaN or Inf: the model's weights are broken")

    def matrix(m: np.ndarray) -> str:  # (S, S) -> [[...], ...]
        return "[" + ",".join("[" + ",".join(map(str, row)) + "]" for row in m) + "]"

    layers = ",".join("[" + ",".join(matrix(m) for m in heads) + "]" for heads in att)
    head = json.dumps({"model": maps.model, "tokens": maps.tokens, "boundary": maps.boundary,
                       "num_layers": maps.num_layers, "num_heads": maps.num_heads,
                       "colors": head_colors(maps.num_heads)})
    text = head[:-1] + ',"attentions":[' + layers + "]}"
    # "</script>" or "<!--" in a token must not end the element: \u escapes are still JSON
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def write_html(maps: AttentionMaps, path: str | os.PathLike) -> Path:
    """One self-contained page (inline CSS, JS and data; nothing fetched) to browse every layer
    and head: bertviz's head view (lines) and a heat-map view."""
    split = ("one sentence" if maps.boundary is None else
             f"sentence A: tokens 1&ndash;{maps.boundary}, sentence B: tokens "
             f"{maps.boundary + 1}&ndash;{maps.num_tokens}")
    page = (_PAGE.replace("__TITLE__", html.escape(maps.model))
            .replace("__SUMMARY__", f"{maps.num_tokens} tokens &middot; {maps.num_layers} layers "
                                    f"&middot; {maps.num_heads} heads &middot; {split}")
            .replace("__DATA__", page_data(maps)))
    path = Path(path)
    write_text_atomic(path, page)
    return path


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Attention: __TITLE__</title>
<style>
  :root { --row: 22px; --b: #d62728; --ink: #222; --muted: #666; }
  body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink);
         margin: 0 24px 40px; background: #fff; }
  h1 { font-size: 20px; margin: 18px 0 2px; }
  .sub { color: var(--muted); margin: 0 0 10px; }
  .controls { display: flex; flex-wrap: wrap; gap: 18px; align-items: center; margin: 8px 0; }
  .controls select { font: inherit; padding: 2px 4px; }
  #legend { display: flex; flex-wrap: wrap; gap: 6px; margin: 6px 0; }
  .swatch { cursor: pointer; user-select: none; border-radius: 4px; padding: 1px 8px;
            color: #fff; font-size: 12px; border: 2px solid transparent; }
  .swatch.off { opacity: .25; }
  .swatch.sel { border-color: var(--ink); }
  #info { min-height: 1.4em; color: var(--muted); margin: 6px 0 12px; }
  #lines-view { display: flex; align-items: flex-start; }
  .col { display: flex; flex-direction: column; }
  .col .head { height: var(--row); color: var(--muted); font-size: 12px; white-space: nowrap; }
  #left .head { text-align: right; }
  .tok { height: var(--row); line-height: var(--row); display: flex; align-items: center;
         gap: 4px; cursor: default; white-space: nowrap; padding: 0 3px; border-radius: 3px; }
  #left .tok { justify-content: flex-end; }
  .tok.seg-b { background: #fff6f0; }
  .tok.first-b { box-shadow: inset 0 2px 0 var(--b); }
  .tok.special { color: var(--muted); }
  .tok.hover { background: #ffe9a8; font-weight: 600; }
  .seg { font-size: 10px; color: var(--b); font-weight: 700; width: 12px; text-align: center; }
  .boxes { display: inline-flex; gap: 1px; }
  .box { width: 8px; height: 14px; }
  #lines { display: block; }
  #heat-view { display: flex; flex-wrap: wrap; gap: 18px; }
  figure { margin: 0; }
  figcaption { font-size: 12px; font-weight: 600; margin-bottom: 4px; }
  [hidden] { display: none !important; }
</style>
</head>
<body>
<h1>Attention: <span id="model">__TITLE__</span></h1>
<p class="sub">__SUMMARY__</p>
<div class="controls">
  <label>Layer <select id="layer"></select></label>
  <label>Head <select id="head"></select></label>
  <span>View
    <label><input type="radio" name="view" value="lines" checked> lines</label>
    <label><input type="radio" name="view" value="heat"> heat map</label>
  </span>
</div>
<div id="legend"></div>
<p id="info"></p>
<section id="lines-view">
  <div class="col" id="left"><div class="head">query (attends from)</div></div>
  <div class="col"><div class="head"></div><canvas id="lines"></canvas></div>
  <div class="col" id="right"><div class="head">key (attends to)</div></div>
</section>
<section id="heat-view" hidden></section>
<script type="application/json" id="attention-data">__DATA__</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("attention-data").textContent);
const T = D.tokens, S = T.length, L = D.num_layers, A = D.num_heads, B = D.boundary;
const ROW = 22, WIDTH = 300, LEVELS = 255, MEAN_COLOR = "#333333";
const HINT = "Hover over a token to see only its lines (left: where it attends; right: what attends "
  + "to it). Click a head's colour to show or hide it when all heads are overlaid.";
const SPECIAL = /^\\[(CLS|SEP|PAD|MASK|UNK)\\]$/;
const state = { layer: 0, head: "overlay", view: "lines", on: new Array(A).fill(true), hover: null };
const meanCache = {};
const $ = (id) => document.getElementById(id);

function meanOf(layer) {  // average over heads: (S, S)
  if (!meanCache[layer]) {
    const m = Array.from({ length: S }, () => new Float64Array(S));
    for (const head of D.attentions[layer])
      for (let i = 0; i < S; i++) for (let j = 0; j < S; j++) m[i][j] += head[i][j] / A;
    meanCache[layer] = m;
  }
  return meanCache[layer];
}

function series() {  // what is drawn: [{label, color, m: (S, S)}]
  const att = D.attentions[state.layer];
  if (state.head === "mean")
    return [{ label: "mean of " + A + " heads", color: MEAN_COLOR, m: meanOf(state.layer) }];
  if (state.head === "overlay")
    return att.map((m, h) => ({ label: "head " + (h + 1), color: D.colors[h], m, h }))
              .filter((s) => state.on[s.h]);
  const h = Number(state.head);
  return [{ label: "head " + (h + 1), color: D.colors[h], m: att[h], h }];
}

function fmt(w) { return w.toFixed(3); }
function q(t) { return "\\u201c" + t + "\\u201d"; }

function buildControls() {
  for (let l = 0; l < L; l++) $("layer").add(new Option("layer " + (l + 1), l));
  $("head").add(new Option("all heads (overlaid)", "overlay"));
  $("head").add(new Option("all heads (average)", "mean"));
  for (let h = 0; h < A; h++) $("head").add(new Option("head " + (h + 1), h));
  $("layer").onchange = () => { state.layer = Number($("layer").value); draw(); };
  $("head").onchange = () => { state.head = $("head").value; draw(); };
  for (const r of document.querySelectorAll("input[name=view]"))
    r.onchange = () => { state.view = r.value; draw(); };
  for (let h = 0; h < A; h++) {
    const s = document.createElement("span");
    s.className = "swatch"; s.textContent = "head " + (h + 1); s.style.background = D.colors[h];
    s.onclick = () => {
      if (state.head === "overlay") state.on[h] = !state.on[h];
      else { state.head = String(h); $("head").value = String(h); }
      draw();
    };
    $("legend").appendChild(s);
  }
}

function buildColumns() {
  for (const side of ["left", "right"]) {
    T.forEach((t, i) => {
      const row = document.createElement("div");
      row.className = "tok" + (B !== null && i >= B ? " seg-b" : "") + (i === B ? " first-b" : "")
        + (SPECIAL.test(t) ? " special" : "");
      const text = document.createElement("span"); text.textContent = t;
      const boxes = document.createElement("span"); boxes.className = "boxes";
      const seg = document.createElement("span"); seg.className = "seg";
      seg.textContent = B === null ? "" : (i === 0 ? "A" : (i === B ? "B" : ""));
      if (side === "left") row.append(seg, text, boxes); else row.append(boxes, text, seg);
      row.onmouseenter = () => { state.hover = { side, i }; drawLines(); };
      row.onmouseleave = () => { state.hover = null; drawLines(); };
      $(side).appendChild(row);
    });
  }
}

function drawLegend() {
  document.querySelectorAll(".swatch").forEach((s, h) => {
    s.classList.toggle("off", state.head === "overlay" && !state.on[h]);
    s.classList.toggle("sel", state.head === String(h));
  });
}

function drawLines() {
  const c = $("lines"), dpr = window.devicePixelRatio || 1, H = S * ROW;
  c.width = WIDTH * dpr; c.height = H * dpr; c.style.width = WIDTH + "px"; c.style.height = H + "px";
  const ctx = c.getContext("2d");
  ctx.scale(dpr, dpr);
  const y = (i) => i * ROW + ROW / 2, hv = state.hover, ss = series();
  if (B !== null) {  // the A/B boundary across the gap
    ctx.strokeStyle = "#d62728"; ctx.setLineDash([4, 4]); ctx.lineWidth = 1; ctx.globalAlpha = 0.6;
    ctx.beginPath(); ctx.moveTo(0, B * ROW); ctx.lineTo(10, B * ROW);
    ctx.moveTo(WIDTH - 10, B * ROW); ctx.lineTo(WIDTH, B * ROW); ctx.stroke(); ctx.setLineDash([]);
  }
  ctx.lineWidth = 2;
  for (const s of ss) {
    // one path per opacity level (a canvas has 8-bit alpha): a few hundred strokes, not S*S
    const paths = new Map();
    for (let i = 0; i < S; i++) {
      if (hv && hv.side === "left" && hv.i !== i) continue;
      for (let j = 0; j < S; j++) {
        if (hv && hv.side === "right" && hv.i !== j) continue;
        const k = Math.round(Math.min(1, s.m[i][j]) * LEVELS);
        if (k === 0) continue;  // invisible
        if (!paths.has(k)) paths.set(k, new Path2D());
        paths.get(k).moveTo(0, y(i)); paths.get(k).lineTo(WIDTH, y(j));
      }
    }
    ctx.strokeStyle = s.color;
    for (const [k, path] of paths) { ctx.globalAlpha = k / LEVELS; ctx.stroke(path); }
  }
  ctx.globalAlpha = 1;
  drawBoxes(ss);
}

function drawBoxes(ss) {  // on hover: a box per head beside each token of the other column
  const hv = state.hover;
  for (const side of ["left", "right"]) {
    [...$(side).querySelectorAll(".tok")].forEach((row, k) => {
      row.classList.toggle("hover", !!hv && hv.side === side && hv.i === k);
      const boxes = row.querySelector(".boxes");
      boxes.replaceChildren();
      if (!hv || hv.side === side) return;
      for (const s of ss) {
        const w = hv.side === "left" ? s.m[hv.i][k] : s.m[k][hv.i];
        const b = document.createElement("span");
        b.className = "box"; b.style.background = s.color; b.style.opacity = Math.min(1, w);
        b.title = s.label + ": " + fmt(w);
        boxes.appendChild(b);
      }
    });
  }
  if (!hv) { $("info").textContent = HINT; return; }
  const avg = (k) => ss.reduce((a, s) => a + (hv.side === "left" ? s.m[hv.i][k] : s.m[k][hv.i]), 0)
    / Math.max(1, ss.length);
  const top = [...T.keys()].sort((a, b) => avg(b) - avg(a)).slice(0, 3)
    .map((k) => q(T[k]) + " (" + (k + 1) + ") " + fmt(avg(k))).join(", ");
  $("info").textContent = hv.side === "left"
    ? q(T[hv.i]) + " (token " + (hv.i + 1) + ") attends most to " + top
    : q(T[hv.i]) + " (token " + (hv.i + 1) + ") is attended most by " + top;
}

function hexRgb(hex) { const n = parseInt(hex.slice(1), 16); return [n >> 16, (n >> 8) & 255, n & 255]; }

function drawHeat() {
  const view = $("heat-view"), ss = series();
  view.replaceChildren();
  $("info").textContent = "Move over a heat map to read one weight.";
  const small = ss.length > 1;
  const cell = Math.max(small ? 3 : 5, Math.min(small ? 14 : 24, Math.floor((small ? 260 : 560) / S)));
  const font = Math.min(12, cell - 1);
  const step = font >= 6 ? 1 : Math.ceil(6 / cell);
  for (const s of ss) {
    const fig = document.createElement("figure"), cap = document.createElement("figcaption");
    const c = document.createElement("canvas"), ctx = c.getContext("2d");
    ctx.font = Math.max(font, 6) + "px sans-serif";
    const pad = Math.ceil(Math.max(...T.map((t) => ctx.measureText(t).width))) + 8;
    const size = pad + S * cell, dpr = window.devicePixelRatio || 1;
    c.width = size * dpr; c.height = size * dpr; c.style.width = size + "px"; c.style.height = size + "px";
    ctx.scale(dpr, dpr);
    let vmax = 0;
    for (const r of s.m) for (const w of r) vmax = Math.max(vmax, w);
    vmax = vmax || 1;
    const [r0, g0, b0] = hexRgb(s.color);
    for (let i = 0; i < S; i++) for (let j = 0; j < S; j++) {
      const a = s.m[i][j] / vmax;  // white -> the head's colour
      ctx.fillStyle = "rgb(" + Math.round(255 + (r0 - 255) * a) + "," + Math.round(255 + (g0 - 255) * a)
        + "," + Math.round(255 + (b0 - 255) * a) + ")";
      ctx.fillRect(pad + j * cell, pad + i * cell, cell, cell);
    }
    ctx.font = Math.max(font, 6) + "px sans-serif"; ctx.fillStyle = "#222"; ctx.textBaseline = "middle";
    for (let i = 0; i < S; i += step) {
      ctx.textAlign = "right"; ctx.fillText(T[i], pad - 4, pad + i * cell + cell / 2);
      ctx.save(); ctx.translate(pad + i * cell + cell / 2, pad - 4); ctx.rotate(-Math.PI / 2);
      ctx.textAlign = "left"; ctx.fillText(T[i], 0, 0); ctx.restore();
    }
    if (B !== null) {
      ctx.strokeStyle = "#d62728"; ctx.setLineDash([4, 3]); ctx.lineWidth = 1.2; ctx.beginPath();
      ctx.moveTo(pad, pad + B * cell); ctx.lineTo(size, pad + B * cell);
      ctx.moveTo(pad + B * cell, pad); ctx.lineTo(pad + B * cell, size); ctx.stroke();
    }
    c.onmousemove = (e) => {
      const rect = c.getBoundingClientRect();
      const j = Math.floor((e.clientX - rect.left - pad) / cell);
      const i = Math.floor((e.clientY - rect.top - pad) / cell);
      if (i < 0 || j < 0 || i >= S || j >= S) return;
      $("info").textContent = s.label + ": " + q(T[i]) + " (query " + (i + 1) + ") \\u2192 " + q(T[j])
        + " (key " + (j + 1) + ") = " + fmt(s.m[i][j]);
    };
    cap.textContent = s.label + " \\u2014 darkest = " + fmt(vmax) + " (rows: queries, columns: keys)";
    cap.style.color = s.color;
    fig.append(cap, c);
    view.appendChild(fig);
  }
}

function draw() {
  drawLegend();
  $("lines-view").hidden = state.view !== "lines";
  $("heat-view").hidden = state.view !== "heat";
  if (state.view === "lines") drawLines(); else drawHeat();
}

buildControls();
buildColumns();
draw();
</script>
</body>
</html>
"""
