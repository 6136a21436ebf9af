"""Figures of a model's parts: the DLA layer x head heatmap, the logit-lens grid, a circuit's edges.

Example:
    >>> import numpy as np
    >>> plot = dla_heatmap(np.zeros((2, 2)), np.zeros(2), caption="Nothing is written.")
    >>> plot.svg().startswith("<svg")
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from interp.core.errors import InterpError
from interp.outputs.figures.plot import Plot, check_2d, label_axes, new_figure


def dla_heatmap(
    heads: Any,
    mlp: Any,
    *,
    caption: str,
    colorbar: str = "direct share of the logit difference",
    title: str | None = None,
) -> Plot:
    """Direct logit attribution as a layer x head heatmap, each layer's MLP in a column beside it.

    The MLP column shares the colour scale (symmetric around 0), blank where a model has no
    MLPs; cells are annotated when there are at most 64.

    Args:
        heads: ``[layer, head]`` shares (:func:`interp.analysis.components.dla.head_grid`).
        mlp: ``[layer]`` MLP shares (NaN for none).
        caption: One line saying what the figure shows and what it does not.
        colorbar: The colour bar's label (default ``"direct share of the logit
            difference"``).
        title: A title above the axes (``None``: none).

    Returns:
        A :class:`~interp.outputs.figures.plot.Plot`: the figure and its caption.

    Raises:
        InterpError: for a non-2-D ``heads`` or an ``mlp`` of another length.
    """
    grid = check_2d(heads, "heads")
    col = np.asarray(mlp, dtype=float).reshape(-1)
    if col.shape[0] != grid.shape[0]:
        raise InterpError(f"mlp has {col.shape[0]} values for {grid.shape[0]} layers")
    finite = np.concatenate([grid[np.isfinite(grid)], col[np.isfinite(col)]])
    span = float(np.abs(finite).max()) if finite.size else 1.0
    span = span or 1.0
    L, H = grid.shape
    fig = new_figure(5.8, max(2.6, min(7.5, 1.0 + 0.2 * L)))
    axes = fig.subplots(1, 2, width_ratios=[max(H, 1), 1.4], sharey=True)
    ax, ax_mlp = axes
    kw = {"aspect": "auto", "cmap": "RdBu_r", "vmin": -span, "vmax": span}
    im = ax.imshow(grid, interpolation="nearest", **kw)
    ax_mlp.imshow(col[:, None], interpolation="nearest", **kw)
    ax.set_xticks(range(H), [str(h) for h in range(H)])
    step = max(1, L // 16)
    ax.set_yticks(range(0, L, step), [str(l) for l in range(0, L, step)])
    label_axes(ax, "head", "layer", title)
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
    """The logit lens as a stage x position grid: top token per cell, coloured by the target's rank.

    Each cell shows the top token and its probability; its colour is the target token's
    rank there (log scale, 1 = top).

    Args:
        top_tokens: ``[stage, position]`` top-token strings.
        top_probs: ``[stage, position]`` their probabilities.
        target_rank: ``[stage, position]`` the target's rank (NaN where there is no target:
            blank).
        stage_labels: One label per stage (row).
        position_labels: One label per position (column), e.g. the input tokens.
        caption: One line saying what the figure shows and what it does not.
        title: A title above the axes (``None``: none).

    Returns:
        A :class:`~interp.outputs.figures.plot.Plot`: the figure and its caption.

    Raises:
        InterpError: for arrays whose shapes differ from the labels'.
    """
    from matplotlib.colors import LogNorm

    probs = check_2d(top_probs, "top_probs")
    ranks = check_2d(target_rank, "target_rank")
    S, P = probs.shape
    if ranks.shape != (S, P) or len(top_tokens) != S or any(len(r) != P for r in top_tokens):
        raise InterpError(f"top_tokens, top_probs and target_rank must all be {S} x {P}")
    if len(stage_labels) != S or len(position_labels) != P:
        raise InterpError(f"{len(stage_labels)} stage and {len(position_labels)} position labels")
    fig = new_figure(max(5.6, 0.6 * P + 1.8), max(2.8, min(11.0, 0.8 + 0.34 * S)))
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
    label_axes(ax, "position (input token)", "stage (0 = embeddings)", title)
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
    """A circuit as a layered graph: input at the top, layers top to bottom, logits at the bottom.

    Components are boxes; each edge is a line from its sender to the component whose input
    it feeds, coloured by that input (q, k, v, MLP, logits), its width by ``|score|``. A
    circuit of more than ``max_edges`` edges is drawn by its ``max_edges`` strongest (by
    ``|score|``), and the caption says so.

    Args:
        edges: One mapping per edge: ``{"sender", "receiver", "receiver_input", "score"}``
            (receivers as :mod:`interp.analysis.circuits.circuit` names them: ``L1H1.k``,
            ``L3.mlp``, ``logits``; ``receiver_input`` one of q, k, v, mlp, logits).
        n_layers: The model's number of layers (the rows between input and logits).
        caption: One line saying what the figure shows and what it does not.
        title: A title above the axes (``None``: none).
        max_edges: The most edges drawn (default 100).

    Returns:
        A :class:`~interp.outputs.figures.plot.Plot`: the figure and its caption.

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
    fig = new_figure(max(5.6, 1.1 * width + 2.0), max(3.4, 0.55 * (n_layers + 2) + 1.0))
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
    label_axes(ax, "components (boxes); edges coloured by the input they feed", "layer", title)
    used = sorted({e["receiver_input"] for e in edges}, key=list(INPUT_COLOURS).index)
    handles = [Line2D([0], [0], color=INPUT_COLOURS[k], linewidth=2.5) for k in used]
    ax.legend(handles, [f"into {k}" for k in used], frameon=False, fontsize=7, loc="lower right")
    return Plot(fig, caption)
