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

from interp.outputs.figures.charts import (
    bars,
    grouped_bars,
    heatmap,
    line_panels,
    lines,
    scatter,
    trace_2d,
)
from interp.outputs.figures.model_views import INPUT_COLOURS, circuit_figure, dla_heatmap, lens_grid
from interp.outputs.figures.plot import PALETTE, Plot

__all__ = [
    "INPUT_COLOURS",
    "PALETTE",
    "Plot",
    "bars",
    "circuit_figure",
    "dla_heatmap",
    "grouped_bars",
    "heatmap",
    "lens_grid",
    "line_panels",
    "lines",
    "scatter",
    "trace_2d",
]
