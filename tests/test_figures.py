"""Figures: deterministic SVG, labelled axes, captions, and clear errors for misshapen data."""

import numpy as np
import pytest

from interp import InterpError
from interp.outputs.figures import (
    bars,
    grouped_bars,
    heatmap,
    line_panels,
    lines,
    scatter,
    trace_2d,
)


def all_plots():
    return {
        "heatmap": heatmap(
            np.arange(6.0).reshape(2, 3),
            row_labels=[0, 1],
            col_labels=[0, 1, 2],
            xlabel="head",
            ylabel="layer",
            colorbar="score",
            caption="c",
        ),
        "lines": lines(
            [0, 1, 2],
            {"a": [1, 2, 3], "b": [3, 2, 1]},
            xlabel="x",
            ylabel="y",
            caption="c",
            shade=(0.5, 1.5),
            shade_label="s",
        ),
        "panels": line_panels(
            [{"title": "t", "ylabel": "y", "series": {"a": ([0, 1], [1, 2])}}],
            xlabel="x",
            caption="c",
        ),
        "bars": bars(
            ["a", "b"], [1.0, -1.0], points={"b": [0.5, -2.0]}, xlabel="x", ylabel="y", caption="c"
        ),
        "grouped": grouped_bars(
            ["p", "q"],
            {"a": [1e-8, 1.0], "b": [2.0, 3.0]},
            xlabel="x",
            ylabel="y",
            caption="c",
            logy=True,
        ),
        "scatter": scatter(
            [0.0, 1.0, 2.0],
            [0.1, 0.9, 2.2],
            labels=["u", "v", "w"],
            xlabel="x",
            ylabel="y",
            caption="c",
        ),
        "trace": trace_2d(
            {"a": np.zeros((3, 2)), "b": np.ones((3, 2))}, xlabel="x", ylabel="y", caption="c"
        ),
    }


def test_svg_is_deterministic_and_labelled():
    first, second = all_plots(), all_plots()
    for name in first:
        a, b = first[name].svg(), second[name].svg()
        assert a == b, name  # byte-identical: no dates, fixed ids
        assert first[name].svg() is a, name  # drawn once: report, file and notebook agree
        assert a.startswith("<svg") and "</svg>" in a
    svg = first["heatmap"].svg()
    assert "head" in svg and "layer" in svg and "score" in svg  # text kept as text
    html = first["lines"].html("lines")
    assert '<figure class="interp-figure" data-name="lines">' in html and "<figcaption>c<" in html


def test_bad_shapes():
    with pytest.raises(InterpError, match="non-empty 2-D"):
        heatmap(
            np.zeros(3), row_labels=[], col_labels=[], xlabel="", ylabel="", colorbar="", caption=""
        )
    with pytest.raises(InterpError, match="row and 3 column labels"):
        heatmap(
            np.zeros((2, 3)),
            row_labels=[0],
            col_labels=[0, 1, 2],
            xlabel="",
            ylabel="",
            colorbar="",
            caption="",
        )
    with pytest.raises(InterpError, match="has 2 values for 3"):
        lines([0, 1, 2], {"a": [1, 2]}, xlabel="", ylabel="", caption="")
    with pytest.raises(InterpError, match="2 labels for 1 values"):
        bars(["a", "b"], [1.0], xlabel="", ylabel="", caption="")
    with pytest.raises(InterpError, match=r"must be \[steps, 2\]"):
        trace_2d({"a": np.zeros((3, 3))}, xlabel="", ylabel="", caption="")
    with pytest.raises(InterpError, match="3 labels for 2 points"):
        scatter([1.0, 2.0], [1.0, 2.0], xlabel="", ylabel="", caption="", labels=["a", "b", "c"])


def test_scatter_of_unverified_rows_draws_no_diagonal():
    """Exact values exist only for verified rows: no finite pair means no y = x line, no error."""
    plot = scatter([np.nan, np.nan], [0.1, 0.2], xlabel="exact", ylabel="estimate", caption="c")
    assert "y = x" not in plot.svg()


def test_an_edited_figure_is_drawn_again_when_asked():
    """The SVG is drawn once and reused; ``fresh=True`` draws the edited figure."""
    plot = lines([0, 1], {"a": [1.0, 2.0]}, xlabel="x", ylabel="y", caption="c")
    before = plot.svg()
    plot.figure.axes[0].set_title("edited")
    assert plot.svg() is before and "edited" in plot.svg(fresh=True)
