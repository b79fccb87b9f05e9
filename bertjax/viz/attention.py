"""Attention maps drawn two ways: a PNG grid of heat maps per layer, and one self-contained HTML
page in the spirit of bertviz's head view (tokens in two columns joined by lines whose opacity is
the attention weight, plus a heat-map view). The page is `head_view.html` beside this module.

A model with sliding-window layers (ModernBERT's local layers, `AttentionMaps.windows`) has each
layer's window in its PNG title, the window's edges dotted on its heat maps (no key outside them
has weight) and named in the page's layer menu.

Layers and heads are numbered from 1 in everything a person reads (file names, titles, the
`layer` argument of `plot_layer`, the command line); array indices are 0-based as usual.
Matplotlib is used through its Agg canvas directly (no pyplot, no global backend switch).

The page carries every weight (L x A x S x S) as text, about 13 bytes each: a 6-layer, 12-head
model at 512 tokens would need some 250 MB, which no browser opens comfortably. So the page
takes at most `HTML_MAX_WEIGHTS` (2.4 million, about 32 MB): `html_token_limit` tokens, 182
for that model, 129 for BERT-base (12 x 12); the PNGs have no such limit.
"""

from __future__ import annotations

import colorsys
import dataclasses
import html
import json
import math
import os
from importlib import resources
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from bertjax.common.files import atomic_file, write_text_atomic
from bertjax.errors import InputError
from bertjax.use.attention import AttentionMaps

GENERATOR = "bertjax attention"  # in every PNG and page written here: a later --force may replace it
DPI = 100  # PNG resolution; figure sizes are multiples of 1/4 inch, so pixels = inches * DPI exactly
MAX_FIGURE_INCHES = 32.0  # long inputs shrink their panels rather than grow past this
LABEL_CHARS = 14  # longer token labels are cut (with an ellipsis) in the PNGs
CMAP = "Blues"  # heat maps: white = no attention, dark blue = the layer's largest weight
BOUNDARY_COLOR = "#d62728"  # the line between sentence A and sentence B
WINDOW_COLOR = "#7f7f7f"  # the edges of a sliding window (ModernBERT's local layers)
HTML_MAX_WEIGHTS = 2_400_000  # attention weights the HTML page holds at most (about 32 MB)
HTML_BYTES_PER_WEIGHT = 13.3  # measured: all-MiniLM-L6-v2, 512 tokens, 250.5 MB / 18.9 M weights
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
    if not 1 <= layer <= maps.num_layers:
        raise InputError(f"layer {layer} does not exist: the model has layers 1 to {maps.num_layers}")
    att = maps.attentions[layer - 1]  # (A, S, S)
    window = None if maps.windows is None else maps.windows[layer - 1]
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
        if window is not None:
            for xs, ys in window_edges(maps.num_tokens, window):
                ax.plot(xs, ys, color=WINDOW_COLOR, lw=0.8, ls=":")
        if h % grid.cols == 0:
            ax.set_ylabel("query (attends from)", fontsize=8)
        if h + grid.cols >= maps.num_heads:  # lowest panel of its column
            ax.set_xlabel("key (attends to)", fontsize=8)
    fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")  # type: ignore[arg-type]
    split = "" if maps.boundary is None else "; red dashes: start of sentence B"
    fig.suptitle(f"{_short(maps.model)}: layer {layer} of {maps.num_layers}{layer_kind(maps, layer)}"
                 f", {maps.num_heads} heads, {maps.num_tokens} tokens{split}", fontsize=11)

    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, facecolor="white",
                    metadata={"Software": GENERATOR})
    return Path(path)


def layer_kind(maps: AttentionMaps, layer: int) -> str:
    """How a title names layer `layer`'s (1-based) attention where some layer of the model is
    windowed (ModernBERT's): " (global)" or " (sliding window: 4 tokens either side, gray
    dots)"; "" for a model whose every layer is global (BERT's)."""
    if not maps.windows or not maps.windowed:
        return ""
    window = maps.windows[layer - 1]
    return (" (global)" if window is None else
            f" (sliding window: {window} tokens either side, gray dots)")


def window_edges(num_tokens: int, window: int) -> list[tuple[list[float], list[float]]]:
    """The edges of a sliding window on an (S, S) heat map, as (xs, ys) staircases along the
    cell borders: query i sees keys i - window to i + window, none outside (weight 0)."""
    edges = []
    for side in (-1, 1):
        xs, ys = [], []
        for i in range(num_tokens):
            x = min(max(i + side * (window + 0.5), -0.5), num_tokens - 0.5)
            xs += [x, x]
            ys += [i - 0.5, i + 0.5]
        edges.append((xs, ys))
    return edges


def plot_all(maps: AttentionMaps, out_dir: str | os.PathLike, layers: list[int] | None = None
             ) -> list[Path]:
    """`layer_01.png`, `layer_02.png`, ... in `out_dir`: every layer, or the 1-based `layers`."""
    layers = list(range(1, maps.num_layers + 1)) if layers is None else list(layers)
    bad = [layer for layer in layers if not 1 <= layer <= maps.num_layers]
    if bad:
        raise InputError(f"no layer {', '.join(map(str, bad))}: the model has layers 1 to "
                         f"{maps.num_layers}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return [plot_layer(maps, layer, out_dir / f"layer_{layer:02d}.png") for layer in layers]


def written_here(path: str | os.PathLike) -> bool:
    """Whether `path` is a picture or page this module wrote (its PNG's Software field or its
    page's generator says GENERATOR): what `bertjax attention --force` may replace."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return GENERATOR.encode() in head


# --- HTML head view -------------------------------------------------------------------------------


def page_data(maps: AttentionMaps) -> str:
    """The page's data as JSON text; weights in float32's shortest round-trip form, so parsing
    them back as float32 gives the model's numbers exactly. Safe inside a <script> element."""
    att = maps.attentions  # (L, A, S, S)
    if not np.isfinite(att).all():
        raise InputError("the attentions contain NaN or Inf: the model's weights are broken")

    def matrix(m: np.ndarray) -> str:  # (S, S) -> [[...], ...]
        return "[" + ",".join("[" + ",".join(map(str, row)) + "]" for row in m) + "]"

    layers = ",".join("[" + ",".join(matrix(m) for m in heads) + "]" for heads in att)
    head = json.dumps({"model": maps.model, "tokens": maps.tokens, "boundary": maps.boundary,
                       "num_layers": maps.num_layers, "num_heads": maps.num_heads,
                       "colors": head_colors(maps.num_heads),
                       "windows": list(maps.windows) if maps.windows and maps.windowed
                       else None})
    text = head[:-1] + ',"attentions":[' + layers + "]}"
    # "</script>" or "<!--" in a token must not end the element: \u escapes are still JSON
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def html_token_limit(num_layers: int, num_heads: int) -> int:
    """The most tokens the HTML page shows for a model of this shape (`HTML_MAX_WEIGHTS`)."""
    return math.isqrt(HTML_MAX_WEIGHTS // (num_layers * num_heads))


def html_too_large(maps: AttentionMaps) -> str | None:
    """Why `maps` are too large for the HTML page (one line), or None if they fit."""
    limit = html_token_limit(maps.num_layers, maps.num_heads)
    if maps.num_tokens <= limit:
        return None
    megabytes = maps.attentions.size * HTML_BYTES_PER_WEIGHT / 1e6
    return (f"{maps.num_tokens} tokens would make an HTML page of about {megabytes:.0f} MB; it "
            f"shows at most {limit} tokens of a model with {maps.num_layers} layers x "
            f"{maps.num_heads} heads (about {HTML_MAX_WEIGHTS * HTML_BYTES_PER_WEIGHT / 1e6:.0f} MB)")


def write_html(maps: AttentionMaps, path: str | os.PathLike) -> Path:
    """One self-contained page (inline CSS, JS and data; nothing fetched) to browse every layer
    and head: bertviz's head view (lines) and a heat-map view. Maps of more tokens than
    `html_token_limit` are a ValueError (`html_too_large` says why)."""
    too_large = html_too_large(maps)
    if too_large:
        raise InputError(f"{too_large}; shorten the text")
    split = ("one sentence" if maps.boundary is None else
             f"sentence A: tokens 1&ndash;{maps.boundary}, sentence B: tokens "
             f"{maps.boundary + 1}&ndash;{maps.num_tokens}")
    page = (_page_template().replace("__TITLE__", html.escape(maps.model))
            .replace("__SUMMARY__", f"{maps.num_tokens} tokens &middot; {maps.num_layers} layers "
                                    f"&middot; {maps.num_heads} heads &middot; {split}")
            .replace("__DATA__", page_data(maps)))
    path = Path(path)
    write_text_atomic(path, page)
    return path


def _page_template() -> str:
    return resources.files("bertjax.viz").joinpath("head_view.html").read_text(encoding="utf-8")
