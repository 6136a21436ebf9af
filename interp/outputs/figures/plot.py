"""A :class:`Plot`: a matplotlib figure and its caption, rendered to deterministic inline SVG.

SVG output is deterministic: no date in the metadata and a fixed hash salt
for element ids, so the same findings give byte-identical figures.

Example:
    >>> plot = Plot(new_figure(), "An empty figure.")
    >>> plot.svg().startswith("<svg")
    True
"""

from __future__ import annotations

import dataclasses
import html
import io
from typing import Any

import numpy as np

from interp.core.errors import InterpError

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2")
_RC = {
    "svg.hashsalt": "interp",
    "svg.fonttype": "none",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
}


def new_figure(width: float = 5.6, height: float = 3.4) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


@dataclasses.dataclass(frozen=True)
class Plot:
    """A matplotlib figure and its caption (what it shows, and what it does not).

    Notebooks display a Plot inline (``_repr_html_``); reports embed its SVG.

    Attributes:
        figure: The matplotlib ``Figure``.
        caption: One line saying what the figure shows and what it does not.
    """

    figure: Any
    caption: str
    _svg: list[str] = dataclasses.field(default_factory=list, init=False, repr=False, compare=False)

    def svg(self, *, fresh: bool = False) -> str:
        """The figure as a standalone ``<svg>`` element (deterministic).

        Rendered once and reused, so a report, its ``figures/`` file and the notebook's
        display show the same drawing (constrained layout moves a redrawn figure by a few
        thousandths of a point).

        Args:
            fresh: Render again instead of reusing the first drawing; pass ``True`` after
                editing ``.figure``.

        Returns:
            The SVG text, from ``<svg`` on (no XML header).
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
        """``<figure>`` with the inline SVG and the caption, for a report.

        Args:
            name: The figure's name, kept as its ``data-name`` attribute (escaped).

        Returns:
            The HTML of one ``<figure class="interp-figure">`` element.
        """
        return (
            f'<figure class="interp-figure" data-name="{html.escape(name)}">{self.svg()}'
            f"<figcaption>{html.escape(self.caption)}</figcaption></figure>"
        )

    def _repr_html_(self) -> str:  # Jupyter
        return self.html()


def label_axes(ax: Any, xlabel: str, ylabel: str, title: str | None) -> None:
    """Axis labels (every figure has both) and an optional title."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)


def check_2d(values: Any, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 2 or arr.size == 0:
        raise InterpError(f"{name} must be a non-empty 2-D array, got shape {arr.shape}")
    return arr
