"""Generic charts: a layer x head heatmap, lines, panels, bars with random draws, scatter, a trace.

Example:
    >>> plot = lines([0, 1, 2], {"loss": [3.0, 1.0, 0.5]}, xlabel="position",
    ...              ylabel="loss (nats)", caption="Loss falls along the sequence.")
    >>> plot.svg().startswith("<svg")
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from interp.core.errors import InterpError
from interp.outputs.figures.plot import PALETTE, Plot, check_2d, label_axes, new_figure


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

    Args:
        values: A non-empty ``[rows, cols]`` array (NaN cells are left blank).
        row_labels: One label per row (e.g. layers).
        col_labels: One label per column (e.g. heads).
        xlabel: The x-axis label.
        ylabel: The y-axis label.
        colorbar: The colour bar's label (what the colour measures, with its unit).
        caption: One line saying what the figure shows and what it does not.
        title: A title above the axes (``None``: none).
        vmin: The value of the colour scale's low end (``None``: the data's minimum).
        vmax: The value of the colour scale's high end (``None``: the data's maximum).
        cmap: A matplotlib colour map name (default ``"viridis"``).
        annotate: Print the values in the cells; ``None`` (default): when there are at
            most 64.

    Returns:
        A :class:`~interp.outputs.figures.plot.Plot`: the figure and its caption.

    Raises:
        InterpError: for a non-2-D array or labels that do not match its shape.
    """
    arr = check_2d(values, "values")
    if len(row_labels) != arr.shape[0] or len(col_labels) != arr.shape[1]:
        raise InterpError(
            f"{len(row_labels)} row and {len(col_labels)} column labels for a {arr.shape} array"
        )
    fig = new_figure(5.6, max(2.4, min(7.5, 0.9 + 0.22 * arr.shape[0])))
    ax = fig.add_subplot()
    im = ax.imshow(arr, aspect="auto", cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
    ax.set_xticks(range(arr.shape[1]), [str(c) for c in col_labels])
    step = max(1, arr.shape[0] // 16)
    ax.set_yticks(range(0, arr.shape[0], step), [str(r) for r in row_labels][::step])
    label_axes(ax, xlabel, ylabel, title)
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

    Args:
        x: The shared x values.
        series: ``{name: y values}``, each as long as ``x``; a legend appears with two or
            more.
        xlabel: The x-axis label.
        ylabel: The y-axis label.
        caption: One line saying what the figure shows and what it does not.
        title: A title above the axes (``None``: none).
        logy: Put the y axis on a log scale (default ``False``).
        logx: Put the x axis on a log scale (default ``False``).
        markers: Mark each point (default ``False``).
        shade: An ``(x0, x1)`` interval to shade (e.g. the repeated half of a sequence).
        shade_label: The shaded interval's legend entry.

    Returns:
        A :class:`~interp.outputs.figures.plot.Plot`: the figure and its caption.

    Raises:
        InterpError: for no series or a series whose length differs from ``x``.
    """
    if not series:
        raise InterpError("lines needs at least one series")
    xs = list(x)
    fig = new_figure()
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
    label_axes(ax, xlabel, ylabel, title)
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

    Args:
        panels: One dict per panel: ``{"title": str, "ylabel": str, "series": {name: (x,
            y)}}``; a series may be ``(x, y, style)`` with ``style = {"colour": int,
            "dashed": bool}`` (the same colour index on several panels marks the same
            model, say).
        xlabel: The x-axis label of every panel.
        caption: One line saying what the figure shows and what it does not.

    Returns:
        A :class:`~interp.outputs.figures.plot.Plot`: the figure and its caption.

    Raises:
        InterpError: for no panels, or a series whose ``x`` and ``y`` differ in length.
    """
    if not panels:
        raise InterpError("line_panels needs at least one panel")
    fig = new_figure(3.0 * len(panels) + 1.0, 3.3)
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
        label_axes(ax, xlabel, panel["ylabel"], panel["title"])
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

    Args:
        labels: One label per bar.
        values: One height per bar.
        xlabel: The x-axis label.
        ylabel: The y-axis label.
        caption: One line saying what the figure shows and what it does not.
        points: ``{label: values}`` drawn as dots over that label's bar (``None``: none).
        title: A title above the axes (``None``: none).
        highlight: Labels whose bars are drawn in the second colour.

    Returns:
        A :class:`~interp.outputs.figures.plot.Plot`: the figure and its caption.

    Raises:
        InterpError: for labels and values of different lengths.
    """
    if len(labels) != len(values):
        raise InterpError(f"{len(labels)} labels for {len(values)} values")
    fig = new_figure(5.6, 3.2)
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
    label_axes(ax, xlabel, ylabel, title)
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

    Args:
        categories: One label per group.
        series: ``{name: values}``, one value per category; the names make the legend.
        xlabel: The x-axis label.
        ylabel: The y-axis label.
        caption: One line saying what the figure shows and what it does not.
        logy: Put the y axis on a log scale (default ``False``).
        title: A title above the axes (``None``: none).

    Returns:
        A :class:`~interp.outputs.figures.plot.Plot`: the figure and its caption.

    Raises:
        InterpError: for no series or a series whose length differs from the categories.
    """
    if not series:
        raise InterpError("grouped_bars needs at least one series")
    fig = new_figure(5.6, 3.2)
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
    label_axes(ax, xlabel, ylabel, title)
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
    """``y`` against ``x`` (e.g. estimate against exact), the points farthest out named.

    Args:
        x: The x values.
        y: The y values, as many as ``x``.
        xlabel: The x-axis label.
        ylabel: The y-axis label.
        caption: One line saying what the figure shows and what it does not.
        labels: One name per point (``None``: no names).
        annotate_top: How many points to name: those farthest out on either axis, so misses
            (large x, small y) are named (default 5; 0 names none).
        diagonal: Draw the line ``y = x`` over the finite points (default ``True``).
        title: A title above the axes (``None``: none).

    Returns:
        A :class:`~interp.outputs.figures.plot.Plot`: the figure and its caption.

    Raises:
        InterpError: for ``x``, ``y`` (and ``labels``) of different lengths.
    """
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.shape != ys.shape:
        raise InterpError(f"x has {xs.size} values but y has {ys.size}")
    if labels is not None and len(labels) != xs.size:
        raise InterpError(f"{len(labels)} labels for {xs.size} points")
    fig = new_figure(4.8, 4.0)
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
    label_axes(ax, xlabel, ylabel, title)
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

    The start is a dot, the end a cross.

    Args:
        paths: ``{name: [steps, 2] array}``, one trajectory each.
        xlabel: The x-axis label.
        ylabel: The y-axis label.
        caption: One line saying what the figure shows and what it does not.
        title: A title above the axes (``None``: none).

    Returns:
        A :class:`~interp.outputs.figures.plot.Plot`: the figure and its caption.

    Raises:
        InterpError: for a path that is not ``[steps, 2]``.
    """
    fig = new_figure(4.8, 4.0)
    ax = fig.add_subplot()
    for i, (name, path) in enumerate(paths.items()):
        p = np.asarray(path, dtype=float)
        if p.ndim != 2 or p.shape[1] != 2:
            raise InterpError(f"path {name!r} must be [steps, 2], got {p.shape}")
        colour = PALETTE[i % len(PALETTE)]
        ax.plot(p[:, 0], p[:, 1], color=colour, linewidth=1.2, label=name)
        ax.scatter(p[:1, 0], p[:1, 1], color=colour, marker="o", s=18)
        ax.scatter(p[-1:, 0], p[-1:, 1], color=colour, marker="x", s=28)
    label_axes(ax, xlabel, ylabel, title)
    ax.legend(frameon=False, fontsize=8)
    return Plot(fig, caption)
