"""Figures for the labs: matplotlib, rendered to inline SVG (no JavaScript, renders offline).

A :class:`Plot` is a matplotlib ``Figure`` and a one-line caption that says
what the figure shows and what it does not. Notebooks display a Plot (or its
``.figure``) inline; reports embed its SVG. The builders here are generic:
a layer x head heatmap, lines over positions or stages, bars with the random
draws shown as points, an estimate-vs-exact scatter, a 2-D training trace.

SVG output is deterministic: no date in the metadata and a fixed hash salt
for element ids, so the same findings give byte-identical figures.

Example:
    >>> plot = lines([0, 1, 2], {"loss": [3.0, 1.0, 0.5]}, xlabel="position",
    ...              ylabel="loss (nats)", caption="Loss falls along the sequence.")
    >>> svg = plot.svg()
    >>> svg.startswith("<svg") and svg is plot.svg()
    True
"""

from __future__ import annotations

import dataclasses
import html
import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from interp.errors import InterpError

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2")
_RC = {
    "svg.hashsalt": "interp",
    "svg.fonttype": "none",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
}


def _figure(width: float = 5.6, height: float = 3.4) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


@dataclasses.dataclass(frozen=True)
class Plot:
    """A matplotlib figure and its caption (what it shows, and what it does not)."""

    figure: Any
    caption: str
    _svg: list[str] = dataclasses.field(default_factory=list, init=False, repr=False, compare=False)

    def svg(self, *, fresh: bool = False) -> str:
        """The figure as a standalone ``<svg>`` element (deterministic).

        Rendered once and reused, so a report, its ``figures/`` file and the notebook's
        display show the same drawing (constrained layout moves a redrawn figure by a few
        thousandths of a point); pass ``fresh=True`` after editing ``.figure``.
        """
        if self._svg and not fresh:
            return self._svg[0]
        import matplotlib

        buf = io.StringIO()
        with matplotlib.rc_context(_RC):
            self.figure.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
        text = buf.getvalue()
        self._svg[:] = [text[text.index("<svg") :]]
        return self._svg[0]

    def html(self, name: str = "") -> str:
        """``<figure>`` with the inline SVG and the caption, for a report."""
        return (
            f'<figure class="interp-figure" data-name="{html.escape(name)}">{self.svg()}'
            f"<figcaption>{html.escape(self.caption)}</figcaption></figure>"
        )

    def _repr_html_(self) -> str:  # Jupyter
        return self.html()


def _label(ax: Any, xlabel: str, ylabel: str, title: str | None) -> None:
    """Axis labels (every figure has both) and an optional title."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)


def _check_2d(values: Any, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 2 or arr.size == 0:
        raise InterpError(f"{name} must be a non-empty 2-D array, got shape {arr.shape}")
    return arr


def heatmap(
    values: Any,
    *,
    row_labels: Sequence[Any],
    col_labels: Sequence[Any],
    xlabel: str,
    ylabel: str,
    colorbar: str,
    caption: str,
    title: str | None = None,
    vmin: float | None = None,
    vmax: float | None = None,
    cmap: str = "viridis",
    annotate: bool | None = None,
) -> Plot:
    """A heatmap of ``values [rows, cols]`` (e.g. layer x head scores) with a labelled colour bar.

    ``annotate`` prints the values in the cells (default: when there are at most 64).

    Raises:
        InterpError: for a non-2-D array or labels that do not match its shape.
    """
    arr = _check_2d(values, "values")
    if len(row_labels) != arr.shape[0] or len(col_labels) != arr.shape[1]:
        raise InterpError(
            f"{len(row_labels)} row and {len(col_labels)} column labels for a {arr.shape} array"
        )
    fig = _figure(5.6, max(2.4, min(7.5, 0.9 + 0.22 * arr.shape[0])))
    ax = fig.add_subplot()
    im = ax.imshow(arr, aspect="auto", cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
    ax.set_xticks(range(arr.shape[1]), [str(c) for c in col_labels])
    step = max(1, arr.shape[0] // 16)
    ax.set_yticks(range(0, arr.shape[0], step), [str(r) for r in row_labels][::step])
    _label(ax, xlabel, ylabel, title)
    fig.colorbar(im, ax=ax, label=colorbar)
    if annotate if annotate is not None else arr.size <= 64:
        lo, hi = np.nanmin(arr), np.nanmax(arr)
        mid = (lo + hi) / 2
        for (r, c), v in np.ndenumerate(arr):
            if np.isfinite(v):
                colour = "white" if v < mid else "black"
                ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=7, color=colour)
    return Plot(fig, caption)


def lines(
    x: Sequence[Any],
    series: Mapping[str, Sequence[float]],
    *,
    xlabel: str,
    ylabel: str,
    caption: str,
    title: str | None = None,
    logy: bool = False,
    logx: bool = False,
    markers: bool = False,
    shade: tuple[float, float] | None = None,
    shade_label: str | None = None,
) -> Plot:
    """Several named series over a shared ``x`` (positions, stages, steps).

    ``shade`` marks an ``x`` interval (e.g. the repeated half of a sequence);
    ``logx`` / ``logy`` put that axis on a log scale.

    Raises:
        InterpError: for no series or a series whose length differs from ``x``.
    """
    if not series:
        raise InterpError("lines needs at least one series")
    xs = list(x)
    fig = _figure()
    ax = fig.add_subplot()
    for i, (name, ys) in enumerate(series.items()):
        ys = list(ys)
        if len(ys) != len(xs):
            raise InterpError(f"series {name!r} has {len(ys)} values for {len(xs)} x values")
        style = {"marker": "o", "markersize": 3} if markers else {}
        ax.plot(xs, ys, label=name, color=PALETTE[i % len(PALETTE)], linewidth=1.4, **style)
    if shade is not None:
        ax.axvspan(*shade, color="0.9", zorder=0, label=shade_label)
    if logy:
        ax.set_yscale("log")
    if logx:
        ax.set_xscale("log")
    _label(ax, xlabel, ylabel, title)
    if len(series) > 1 or shade_label:
        ax.legend(frameon=False, fontsize=8)
    return Plot(fig, caption)


def line_panels(
    panels: Sequence[Mapping[str, Any]],
    *,
    xlabel: str,
    caption: str,
) -> Plot:
    """Side-by-side panels of lines, each series with its own ``x`` (different lengths allowed).

    Each panel is ``{"title": str, "ylabel": str, "series": {name: (x, y)}}``; a
    series may be ``(x, y, style)`` with ``style = {"colour": int, "dashed": bool}``
    (the same colour index on several panels marks the same model, say).

    Raises:
        InterpError: for no panels, or a series whose ``x`` and ``y`` differ in length.
    """
    if not panels:
        raise InterpError("line_panels needs at least one panel")
    fig = _figure(3.0 * len(panels) + 1.0, 3.3)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, panel in zip(axes, panels):
        for i, (name, spec) in enumerate(panel["series"].items()):
            xs, ys = list(spec[0]), list(spec[1])
            style = spec[2] if len(spec) > 2 else {}
            if len(xs) != len(ys):
                raise InterpError(f"series {name!r}: {len(xs)} x values for {len(ys)} y values")
            colour = PALETTE[style.get("colour", i) % len(PALETTE)]
            dash = "--" if style.get("dashed") else "-"
            ax.plot(xs, ys, label=name, color=colour, linestyle=dash, linewidth=1.3)
        _label(ax, xlabel, panel["ylabel"], panel["title"])
        ax.legend(frameon=False, fontsize=7)
    return Plot(fig, caption)


def bars(
    labels: Sequence[str],
    values: Sequence[float],
    *,
    xlabel: str,
    ylabel: str,
    caption: str,
    points: Mapping[str, Sequence[float]] | None = None,
    title: str | None = None,
    highlight: Sequence[str] = (),
) -> Plot:
    """Bars, one per label; ``points[label]`` adds individual values (e.g. random draws) as dots.

    Raises:
        InterpError: for labels and values of different lengths.
    """
    if len(labels) != len(values):
        raise InterpError(f"{len(labels)} labels for {len(values)} values")
    fig = _figure(5.6, 3.2)
    ax = fig.add_subplot()
    colours = [PALETTE[1] if lab in highlight else PALETTE[0] for lab in labels]
    ax.bar(range(len(labels)), values, color=colours, alpha=0.8)
    for i, lab in enumerate(labels):
        pts = list((points or {}).get(lab, ()))
        if pts:
            jitter = np.linspace(-0.15, 0.15, len(pts)) if len(pts) > 1 else [0.0]
            ax.scatter([i + j for j in jitter], pts, color="black", s=14, zorder=3)
    ax.axhline(0, color="0.4", linewidth=0.8)
    ax.set_xticks(range(len(labels)), labels, rotation=0)
    _label(ax, xlabel, ylabel, title)
    return Plot(fig, caption)


def grouped_bars(
    categories: Sequence[str],
    series: Mapping[str, Sequence[float]],
    *,
    xlabel: str,
    ylabel: str,
    caption: str,
    logy: bool = False,
    title: str | None = None,
) -> Plot:
    """One group of bars per category, one bar per named series (e.g. null vs row space).

    Raises:
        InterpError: for no series or a series whose length differs from the categories.
    """
    if not series:
        raise InterpError("grouped_bars needs at least one series")
    fig = _figure(5.6, 3.2)
    ax = fig.add_subplot()
    width = 0.8 / len(series)
    for i, (name, vals) in enumerate(series.items()):
        vals = list(vals)
        if len(vals) != len(categories):
            raise InterpError(
                f"series {name!r} has {len(vals)} values for {len(categories)} groups"
            )
        xs = [c + (i - (len(series) - 1) / 2) * width for c in range(len(categories))]
        ax.bar(xs, vals, width=width, label=name, color=PALETTE[i % len(PALETTE)])
    if logy:
        ax.set_yscale("log")
    ax.set_xticks(range(len(categories)), list(categories))
    _label(ax, xlabel, ylabel, title)
    ax.legend(frameon=False, fontsize=8)
    return Plot(fig, caption)


def scatter(
    x: Sequence[float],
    y: Sequence[float],
    *,
    xlabel: str,
    ylabel: str,
    caption: str,
    labels: Sequence[str] | None = None,
    annotate_top: int = 5,
    diagonal: bool = True,
    title: str | None = None,
) -> Plot:
    """``y`` against ``x`` (e.g. estimate against exact); the ``annotate_top`` points farthest
    out on either axis are named.

    Raises:
        InterpError: for ``x``, ``y`` (and ``labels``) of different lengths.
    """
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.shape != ys.shape:
        raise InterpError(f"x has {xs.size} values but y has {ys.size}")
    if labels is not None and len(labels) != xs.size:
        raise InterpError(f"{len(labels)} labels for {xs.size} points")
    fig = _figure(4.8, 4.0)
    ax = fig.add_subplot()
    ax.scatter(xs, ys, s=12, color=PALETTE[0], alpha=0.7)
    finite = np.isfinite(xs) & np.isfinite(ys)
    if diagonal and finite.any():  # e.g. exact values only for the verified rows
        lo = float(min(xs[finite].min(), ys[finite].min()))
        hi = float(max(xs[finite].max(), ys[finite].max()))
        ax.plot([lo, hi], [lo, hi], color="0.5", linewidth=0.8, linestyle="--", label="y = x")
        ax.legend(frameon=False, fontsize=8)
    if labels is not None and annotate_top:
        # the points far from the origin on either axis, so misses (large x, small y) are named
        size = np.maximum(np.abs(np.nan_to_num(xs)), np.abs(np.nan_to_num(ys)))
        order = np.argsort(-size)[:annotate_top]
        for i in order:
            ax.annotate(
                str(labels[i]),
                (xs[i], ys[i]),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
    _label(ax, xlabel, ylabel, title)
    return Plot(fig, caption)


def trace_2d(
    paths: Mapping[str, Any],
    *,
    xlabel: str,
    ylabel: str,
    caption: str,
    title: str | None = None,
) -> Plot:
    """Trajectories in a plane, one per name (``[steps, 2]`` each), start and end marked.

    Raises:
        InterpError: for a path that is not ``[steps, 2]``.
    """
    fig = _figure(4.8, 4.0)
    ax = fig.add_subplot()
    for i, (name, path) in enumerate(paths.items()):
        p = np.asarray(path, dtype=float)
        if p.ndim != 2 or p.shape[1] != 2:
            raise InterpError(f"path {name!r} must be [steps, 2], got {p.shape}")
        colour = PALETTE[i % len(PALETTE)]
        ax.plot(p[:, 0], p[:, 1], color=colour, linewidth=1.2, label=name)
        ax.scatter(p[:1, 0], p[:1, 1], color=colour, marker="o", s=18)
        ax.scatter(p[-1:, 0], p[-1:, 1], color=colour, marker="x", s=28)
    _label(ax, xlabel, ylabel, title)
    ax.legend(frameon=False, fontsize=8)
    return Plot(fig, caption)


def dla_heatmap(
    heads: Any,
    mlp: Any,
    *,
    caption: str,
    colorbar: str = "direct share of the logit difference",
    title: str | None = None,
) -> Plot:
    """Direct logit attribution as a layer x head heatmap, with each layer's MLP in a column
    beside it on the same colour scale (blank where a model has no MLPs).

    ``heads`` is ``[layer, head]``, ``mlp`` ``[layer]`` (NaN for none); see
    :func:`interp.analysis.components.dla.head_grid`.

    Raises:
        InterpError: for a non-2-D ``heads`` or an ``mlp`` of another length.
    """
    grid = _check_2d(heads, "heads")
    col = np.asarray(mlp, dtype=float).reshape(-1)
    if col.shape[0] != grid.shape[0]:
        raise InterpError(f"mlp has {col.shape[0]} values for {grid.shape[0]} layers")
    finite = np.concatenate([grid[np.isfinite(grid)], col[np.isfinite(col)]])
    span = float(np.abs(finite).max()) if finite.size else 1.0
    span = span or 1.0
    L, H = grid.shape
    fig = _figure(5.8, max(2.6, min(7.5, 1.0 + 0.2 * L)))
    axes = fig.subplots(1, 2, width_ratios=[max(H, 1), 1.4], sharey=True)
    ax, ax_mlp = axes
    kw = {"aspect": "auto", "cmap": "RdBu_r", "vmin": -span, "vmax": span}
    im = ax.imshow(grid, interpolation="nearest", **kw)
    ax_mlp.imshow(col[:, None], interpolation="nearest", **kw)
    ax.set_xticks(range(H), [str(h) for h in range(H)])
    step = max(1, L // 16)
    ax.set_yticks(range(0, L, step), [str(l) for l in range(0, L, step)])
    _label(ax, "head", "layer", title)
    ax_mlp.set_xticks([0], ["MLP"])
    ax_mlp.set_xlabel("")
    if not np.isfinite(col).any():
        ax_mlp.text(0, (L - 1) / 2, "none", ha="center", va="center", fontsize=8, rotation=90)
    if grid.size <= 64:
        for (r, c), v in np.ndenumerate(grid):
            if np.isfinite(v):
                ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=7)
    fig.colorbar(im, ax=list(axes), label=colorbar)
    return Plot(fig, caption)


def lens_grid(
    top_tokens: Sequence[Sequence[str]],
    top_probs: Any,
    target_rank: Any,
    *,
    stage_labels: Sequence[str],
    position_labels: Sequence[str],
    caption: str,
    title: str | None = None,
) -> Plot:
    """The logit lens as a stage x position grid: each cell shows the top token and its
    probability; its colour is the target token's rank there (log scale, 1 = top).

    ``top_tokens`` and ``top_probs`` are ``[stage, position]``; ``target_rank``
    too (NaN where there is no target: blank).

    Raises:
        InterpError: for arrays whose shapes differ from the labels'.
    """
    from matplotlib.colors import LogNorm

    probs = _check_2d(top_probs, "top_probs")
    ranks = _check_2d(target_rank, "target_rank")
    S, P = probs.shape
    if ranks.shape != (S, P) or len(top_tokens) != S or any(len(r) != P for r in top_tokens):
        raise InterpError(f"top_tokens, top_probs and target_rank must all be {S} x {P}")
    if len(stage_labels) != S or len(position_labels) != P:
        raise InterpError(f"{len(stage_labels)} stage and {len(position_labels)} position labels")
    fig = _figure(max(5.6, 0.6 * P + 1.8), max(2.8, min(11.0, 0.8 + 0.34 * S)))
    ax = fig.add_subplot()
    finite = ranks[np.isfinite(ranks)]
    hi = float(finite.max()) if finite.size else 10.0
    norm = LogNorm(vmin=1, vmax=max(hi, 10.0))
    im = ax.imshow(ranks, aspect="auto", cmap="viridis_r", norm=norm, interpolation="nearest")
    size = 6 if P <= 16 else 5
    for (s, p), prob in np.ndenumerate(probs):
        tok = str(top_tokens[s][p]).replace("\n", "\\n")
        tok = tok if len(tok) <= 8 else tok[:7] + "~"
        dark = np.isfinite(ranks[s, p]) and norm(ranks[s, p]) > 0.45  # viridis_r is dark there
        colour = "white" if dark else "black"
        ax.text(p, s, f"{tok}\n{prob:.2f}", ha="center", va="center", fontsize=size, color=colour)
    ax.set_xticks(range(P), [str(x) for x in position_labels], rotation=90 if P > 8 else 0)
    step = max(1, S // 16)
    ax.set_yticks(range(0, S, step), [str(x) for x in stage_labels][::step])
    _label(ax, "position (input token)", "stage (0 = embeddings)", title)
    fig.colorbar(im, ax=ax, label="target's rank (1 = top prediction)")
    return Plot(fig, caption)


INPUT_COLOURS = {
    "q": "#1f77b4",
    "k": "#2ca02c",
    "v": "#ff7f0e",
    "mlp": "#9467bd",
    "logits": "#555555",
}


def circuit_figure(
    edges: Sequence[Mapping[str, Any]],
    *,
    n_layers: int,
    caption: str,
    title: str | None = None,
    max_edges: int = 100,
) -> Plot:
    """A circuit as a layered graph: the input at the top, layers top to bottom, the logits at
    the bottom; components as boxes; each edge a line from its sender to the component whose
    input it feeds, coloured by that input (q, k, v, MLP, logits), its width by ``|score|``.

    Each edge is ``{"sender", "receiver", "receiver_input", "score"}`` (receivers as
    :mod:`interp.analysis.circuits.circuit` names them: ``L1H1.k``, ``L3.mlp``, ``logits``). A
    circuit of more than ``max_edges`` edges is drawn by its ``max_edges`` strongest
    (by ``|score|``), and the caption says so.

    Example:
        >>> plot = circuit_figure([{"sender": "embed", "receiver": "L0H1.v",
        ...     "receiver_input": "v", "score": 1.0}], n_layers=1, caption="One edge.")
        >>> plot.svg().startswith("<svg")
        True

    Raises:
        InterpError: for no edges, or an edge whose input is not q, k, v, mlp or logits.
    """
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyBboxPatch

    if not edges:
        raise InterpError("circuit_figure needs at least one edge")
    edges = list(edges)
    if len(edges) > max_edges:
        strength = [abs(float(e.get("score", 0.0) or 0.0)) for e in edges]
        keep = sorted(np.argsort(strength, kind="stable")[::-1][:max_edges])
        caption = (
            f"{caption} The {max_edges} strongest of the circuit's {len(edges):,} edges are "
            "drawn; the table lists all."
        )
        edges = [edges[int(i)] for i in keep]

    def component(name: str, inp: str) -> str:
        if inp == "logits":
            return "logits"
        if inp == "mlp":
            return name
        base = name.rsplit(".", 1)[0]
        return base

    def row(node: str) -> float:
        if node in ("embed", "pos_embed"):
            return 0.0
        if node == "logits":
            return float(n_layers + 1)
        layer = int(node[1:].split("H")[0].split("K")[0].split(".")[0])
        return layer + 1 + (0.5 if node.endswith(".mlp") else 0.0)

    nodes: dict[str, float] = {}
    for e in edges:
        if e["receiver_input"] not in INPUT_COLOURS:
            raise InterpError(
                f"edge input {e['receiver_input']!r} is not one of {list(INPUT_COLOURS)}"
            )
        nodes[e["sender"]] = row(e["sender"])
        r = component(str(e["receiver"]), e["receiver_input"])
        nodes[r] = row(r)
    by_row: dict[float, list[str]] = {}
    for n, y in nodes.items():
        by_row.setdefault(y, []).append(n)
    pos: dict[str, tuple[float, float]] = {}
    width = max(len(v) for v in by_row.values())
    for y, names in by_row.items():
        names.sort(key=lambda s: (not s.startswith("embed"), s))
        for i, n in enumerate(names):
            pos[n] = ((i + 1) * (width + 1) / (len(names) + 1), y)
    scores = np.array([abs(float(e.get("score", 1.0) or 0.0)) for e in edges])
    top = float(scores.max()) if scores.size and scores.max() > 0 else 1.0
    fig = _figure(max(5.6, 1.1 * width + 2.0), max(3.4, 0.55 * (n_layers + 2) + 1.0))
    ax = fig.add_subplot()
    order = np.argsort(scores)  # the strongest edges drawn last, on top
    for i in order:
        e = edges[int(i)]
        x0, y0 = pos[e["sender"]]
        x1, y1 = pos[component(str(e["receiver"]), e["receiver_input"])]
        lw = 0.6 + 4.0 * scores[i] / top
        ax.plot([x0, x1], [y0 + 0.18, y1 - 0.18], color=INPUT_COLOURS[e["receiver_input"]],
                linewidth=lw, alpha=0.75, solid_capstyle="round")  # fmt: skip
    for n, (x, y) in pos.items():
        box = FancyBboxPatch((x - 0.42, y - 0.16), 0.84, 0.32, boxstyle="round,pad=0.02",
                             facecolor="#f7f7f7", edgecolor="#333333", linewidth=0.8)  # fmt: skip
        ax.add_patch(box)
        ax.text(x, y, n, ha="center", va="center", fontsize=7)
    ax.set_xlim(0, width + 1)
    ax.set_ylim(n_layers + 1.6, -0.6)
    labels = ["input"] + [f"L{l}" for l in range(n_layers)] + ["logits"]
    ticks = list(range(n_layers + 2))
    step = max(1, len(ticks) // 16)
    ax.set_yticks(ticks[::step], labels[::step])
    ax.set_xticks([])
    _label(ax, "components (boxes); edges coloured by the input they feed", "layer", title)
    used = sorted({e["receiver_input"] for e in edges}, key=list(INPUT_COLOURS).index)
    handles = [Line2D([0], [0], color=INPUT_COLOURS[k], linewidth=2.5) for k in used]
    ax.legend(handles, [f"into {k}" for k in used], frameon=False, fontsize=7, loc="lower right")
    return Plot(fig, caption)
