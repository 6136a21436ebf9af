"""Self-contained, offline HTML reports: tables, figures and circuitsvis attention widgets.

``circuitsvis``'s own ``local_src`` inlines its 1.3 MB JavaScript bundle into
*every* widget, and its ``str()`` loads the bundle from a CDN (blank offline).
A report here carries the bundle exactly once, in the page head, and each
widget is a ``<div>`` plus a one-line ``CircuitsVis.render`` call, so pages
with many widgets stay small and render with the network unreachable.
Figures (:class:`interp.outputs.figures.Plot`) are inline SVG with a caption.

Example:
    >>> report = Report("Bank sense")
    >>> _ = report.heading("Attention").attention(["a", "b"], [[1.0, 0.0], [0.5, 0.5]])
    >>> report.n_widgets, report.to_html().count("CircuitsVis.render(")
    (1, 1)
"""

from __future__ import annotations

import html
import os
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from interp.core.errors import InterpError
from interp.outputs.files import write_text

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pandas as pd


@cache
def circuitsvis_bundle() -> str:
    """The JavaScript bundle shipped inside the circuitsvis package (no network).

    Read once and cached; a literal ``</script>`` inside it is escaped so that it can be
    inlined in a page's ``<script>``.

    Returns:
        The bundle's JavaScript text.

    Raises:
        InterpError: if circuitsvis is not installed or its bundle is missing.
    """
    try:
        import circuitsvis
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise InterpError("circuitsvis is not installed: pip install circuitsvis") from exc
    path = Path(circuitsvis.__file__).parent / "dist" / "cdn" / "iife.js"
    if not path.is_file():
        raise InterpError(f"circuitsvis bundle missing at {path}; reinstall circuitsvis")
    # A literal closing tag inside the bundle would end the inline script early.
    return path.read_text(encoding="utf-8").replace("</script>", "<\\/script>")


def _to_list(attention: Any) -> list:
    try:
        import torch

        if isinstance(attention, torch.Tensor):
            attention = attention.detach().cpu().float().numpy()
    except ImportError:  # pragma: no cover
        pass
    return np.asarray(attention, dtype=float).tolist()


def _shown(piece: str) -> str:
    """A token as HTML that shows its spaces and line breaks (an empty token stays visible)."""
    text = html.escape(piece).replace("\n", "&#8629;")  # spaces kept: white-space pre-wrap
    return text or "&#8203;"


class Report:
    """An HTML page assembled from headings, text, pandas tables and attention widgets.

    Each adding method returns the report, so calls chain; :meth:`to_html` gives the page,
    self-contained and offline (the circuitsvis bundle once, in the head, when there is a
    widget), and :meth:`write` writes it atomically.

    Args:
        title: The page's title (its ``<title>`` and ``<h1>``).

    Attributes:
        title: The page's title.
        n_widgets: How many attention widgets the page holds.
    """

    def __init__(self, title: str):
        self.title = title
        self._parts: list[str] = []
        self._n_widgets = 0

    @property
    def n_widgets(self) -> int:
        return self._n_widgets

    def figure(self, plot: Any, name: str) -> Report:
        """Add a :class:`interp.outputs.figures.Plot` as inline SVG with its caption.

        Args:
            plot: The :class:`~interp.outputs.figures.plot.Plot`.
            name: The figure's name, kept as its ``data-name`` attribute.

        Returns:
            The report, for chaining.
        """
        self._parts.append(plot.html(name))
        return self

    def heading(self, text: str, level: int = 2) -> Report:
        """Add a heading.

        Args:
            text: The heading's text (escaped).
            level: Its HTML level, ``<h{level}>`` (default 2; the title is the only ``<h1>``).

        Returns:
            The report, for chaining.
        """
        self._parts.append(f"<h{level}>{html.escape(text)}</h{level}>")
        return self

    def text(self, text: str) -> Report:
        """Add a paragraph of plain text.

        Args:
            text: The paragraph (escaped: markup shows as written).

        Returns:
            The report, for chaining.
        """
        self._parts.append(f"<p>{html.escape(text)}</p>")
        return self

    def cautions(self, lines: list[str]) -> Report:
        """A highlighted box of cautions: what the numbers on this page do not show.

        Args:
            lines: One caution per list item (escaped).

        Returns:
            The report, for chaining.
        """
        items = "".join(f"<li>{html.escape(t)}</li>" for t in lines)
        self._parts.append(
            f'<div class="caution"><b>Read before quoting a number</b><ul>{items}</ul></div>'
        )
        return self

    def table(
        self, df: pd.DataFrame, caption: str | None = None, float_format: str = "{:.4f}"
    ) -> Report:
        """Add a pandas DataFrame as an HTML table (floats rounded for reading).

        Args:
            df: The table.
            caption: A caption above it (``None``: none).
            float_format: The format of its float columns (default ``"{:.4f}"``).

        Returns:
            The report, for chaining.
        """
        from interp.outputs.tables import styler

        s = styler(df, decimals=None, caption_text=caption)
        s = s.format(float_format, subset=df.select_dtypes("floating").columns)
        self._parts.append(s.to_html())
        return self

    def heatmap(self, pivot: Any, caption: str | None = None, decimals: int = 3) -> Report:
        """Add a pivoted DataFrame (e.g. layer x head) as a colour-scaled table.

        Cells are coloured on a diverging scale from the table's minimum to its maximum.

        Args:
            pivot: The pivoted table (e.g. ``df.pivot(index="layer", columns="head",
                values=...)``); its index becomes the first column.
            caption: A caption above it (``None``: none).
            decimals: Digits shown after the point (default 3).

        Returns:
            The report, for chaining.
        """
        from interp.outputs.tables import diverging_colour, styler

        values = pivot.to_numpy(dtype=float)
        lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
        s = styler(pivot.reset_index(), decimals=decimals, caption_text=caption)
        s = s.map(lambda v: diverging_colour(v, lo, hi), subset=list(pivot.columns))
        self._parts.append(s.to_html())
        return self

    def attention(
        self,
        tokens: list[str],
        pattern: Any,
        *,
        head_names: list[str] | None = None,
        causal: bool = True,
    ) -> Report:
        """Add a circuitsvis ``AttentionHeads`` widget.

        The widget is a ``<div>`` and one ``CircuitsVis.render`` call; the bundle itself is
        inlined once per page (:meth:`to_html`).

        Args:
            tokens: One string per position.
            pattern: ``[head, query_pos, key_pos]`` (or ``[query_pos, key_pos]``) attention, a
                tensor or an array.
            head_names: One name per head (``None``: circuitsvis numbers them).
            causal: Grey out the (masked) upper triangle (default ``True``); pass ``False``
                for bidirectional heads.

        Returns:
            The report, for chaining.

        Raises:
            InterpError: if the pattern's shape does not match the tokens, or the head
                names do not match its heads.
        """
        from circuitsvis.utils.convert_props import convert_props

        att = np.asarray(_to_list(pattern), dtype=float)
        if att.ndim == 2:
            att = att[None]
        n = len(tokens)
        if att.ndim != 3 or att.shape[1:] != (n, n):
            raise InterpError(
                f"attention pattern has shape {att.shape}; expected [head, {n}, {n}] for {n} tokens"
            )
        if head_names is not None and len(head_names) != att.shape[0]:
            raise InterpError(f"{len(head_names)} head names for {att.shape[0]} heads")
        props = convert_props(
            {
                "attention": att.tolist(),
                "tokens": [str(t) for t in tokens],
                "attentionHeadNames": head_names,
                "maskUpperTri": causal,
            }
        )
        div = f"cv-widget-{self._n_widgets}"
        self._n_widgets += 1
        self._parts.append(
            f'<div class="cv-widget" id="{div}"></div>\n'
            f'<script>CircuitsVis.render("{div}", CircuitsVis.AttentionHeads, {props});</script>'
        )
        return self

    def continuations(
        self,
        prompt: str,
        columns: dict[str, list[str]],
        *,
        logprobs: dict[str, list[float]],
        first: int | None,
    ) -> Report:
        """Add continuations of one prompt side by side, the first difference marked.

        Each token's log-probability is in its tooltip and its shade. Plain HTML and CSS:
        it renders offline.

        Args:
            prompt: The prompt's text, shown above them.
            columns: The continuations by name (e.g. ``{"clean": [...], "edited": [...]}``),
                one string per token.
            logprobs: Each token's log-probability, by the same names.
            first: The step where they first differ, marked in every column (None: never).

        Returns:
            This report (calls chain).

        Raises:
            InterpError: for columns and log-probabilities of different lengths.
        """
        cells = []
        for name, pieces in columns.items():
            lps = logprobs.get(name, [])
            if len(lps) != len(pieces):
                raise InterpError(f"{len(pieces)} {name} tokens but {len(lps)} log-probabilities")
            spans = []
            for step, (piece, lp) in enumerate(zip(pieces, lps)):
                mark = (
                    " first-diff"
                    if step == first
                    else (" after" if first is not None and step > first else "")
                )
                shade = 0.0 if lp != lp else min(1.0, max(0.0, -float(lp) / 8.0))
                tip = f"step {step}: log p = {lp:.3f}" if lp == lp else f"step {step}"
                spans.append(
                    f'<span class="tok{mark}" data-step="{step}" title="{html.escape(tip)}" '
                    f'style="background: rgba(214, 39, 40, {shade:.2f})">'
                    f"{_shown(piece)}</span>"
                )
            cells.append(
                f'<td class="continuation" data-name="{html.escape(name)}">{"".join(spans)}</td>'
            )
        head = "".join(f"<th>{html.escape(n)}</th>" for n in columns)
        note = (
            "They never differ."
            if first is None
            else f"They first differ at new token {first} (outlined); later tokens are greyed."
        )
        self._parts.append(
            '<div class="continuations">'
            f'<p class="prompt"><b>Prompt:</b> {html.escape(prompt)}</p>'
            f'<table class="side-by-side"><tr>{head}</tr><tr>{"".join(cells)}</tr></table>'
            f'<p class="first-note">{html.escape(note)} Shade: the token\'s log-probability under '
            "the model that wrote it (darker: less likely; hover for the number).</p></div>"
        )
        return self

    def raw(self, fragment: str) -> Report:
        """Add an HTML fragment as it is (not escaped).

        Args:
            fragment: The HTML.

        Returns:
            The report, for chaining.
        """
        self._parts.append(fragment)
        return self

    def to_html(self) -> str:
        """The whole page: a standalone HTML document that renders offline.

        Returns:
            The HTML text, with the circuitsvis bundle inlined once when the page has a widget.

        Raises:
            InterpError: (with a widget) if circuitsvis's bundle cannot be found
                (:func:`circuitsvis_bundle`).
        """
        bundle = f"<script>{circuitsvis_bundle()}</script>" if self._n_widgets else ""
        body = "\n".join(self._parts)
        return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{html.escape(self.title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}
th, td {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; }}
caption {{ font-weight: bold; text-align: left; padding: 4px 0; }}
.cv-widget {{ margin: 15px 0; }}
figure.interp-figure {{ margin: 1em 0; }}
figure.interp-figure svg {{ max-width: 100%; height: auto; }}
figcaption {{ font-size: 0.85em; color: #444; max-width: 720px; }}
.caution {{ background: #fff8e6; border-left: 4px solid #e0a800; padding: 0.4em 0.8em; }}
table.side-by-side {{ width: 100%; table-layout: fixed; }}
table.side-by-side th {{ text-align: left; }}
td.continuation {{ text-align: left; vertical-align: top; font-family: monospace;
  white-space: pre-wrap; overflow-wrap: anywhere; line-height: 1.6; }}
.tok {{ padding: 1px 0; }}
.tok.first-diff {{ outline: 2px solid #d62728; font-weight: bold; }}
.tok.after {{ color: #888; }}
</style>
{bundle}
</head><body>
<h1>{html.escape(self.title)}</h1>
{body}
</body></html>
"""

    def _repr_html_(self) -> str:
        """Jupyter display: the whole page in an iframe (its own document; renders offline)."""
        doc = html.escape(self.to_html(), quote=True)
        style = "width:100%;height:720px;border:1px solid #ccc"
        return f'<iframe srcdoc="{doc}" style="{style}"></iframe>'

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write the page atomically.

        Args:
            path: The ``.html`` file to write (its folder must exist).

        Returns:
            The path written.

        Raises:
            InterpError: if the target's folder does not exist or is not writable.
        """
        return write_text(path, self.to_html())
