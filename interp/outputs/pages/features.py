"""A page of a dictionary's features: each feature's contexts, density and logit effects.

Each feature is a card (``<section class="feature-card" id="{tag}-{feature}">``): its
density and activations, its top and bottom logit effects, and its top-activating contexts,
each token shaded by the feature's activation on it (hover for the number; the context's
own token outlined). Plain HTML and CSS: it renders offline.

A head's top (query feature, key feature) pairs plug in above the cards
(:func:`pair_section`): a table of pairs whose feature cells link to the cards of the
query-side and key-side readings (the same reading when one dictionary serves both sides)
and show each feature's strongest context inline.

Example:
    >>> from interp.models import load_model
    >>> from interp.dictionaries import Dictionary, read_features
    >>> from interp.datasets import repeated_tokens
    >>> model = load_model("induction-2l")
    >>> D = Dictionary.random(d_in=128, d_sae=8, architecture="topk", k=2,
    ...                       hook_name="blocks.1.hook_resid_pre")
    >>> r = read_features(model, repeated_tokens(2, d_vocab=64, seq_len=48, seed=0).tokens,
    ...                   dictionary=D, top=2)
    >>> html = feature_page(r, features=[0, 1]).to_html()
    >>> html.count('class="feature-card"')
    2
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from interp.core.errors import InterpError
from interp.dictionaries.reading import FeatureReading
from interp.outputs.render import Report

STYLE = """<style>
.feature-card { border: 1px solid #ccc; border-radius: 4px; padding: 0.4em 0.8em; margin: 1em 0; }
.feature-card h3 { margin: 0.2em 0; }
.feature-card .stats, .feature-card .logit-row { font-size: 0.9em; color: #333; }
.logit-row .tok-pos { background: #dbeafe; } .logit-row .tok-neg { background: #fee2e2; }
.logit-row span.tok-pos, .logit-row span.tok-neg { font-family: monospace; padding: 0 3px;
  margin: 0 2px; white-space: pre; border-radius: 2px; }
ol.contexts { font-family: monospace; font-size: 0.85em; padding-left: 2.5em; }
ol.contexts li { margin: 2px 0; white-space: pre-wrap; overflow-wrap: anywhere; }
.ctx-tok.centre { outline: 1px solid #c2410c; }
.ctx-act { color: #666; margin-left: 1em; }
table.pairs td { text-align: left; vertical-align: top; }
table.pairs td.num { text-align: right; }
.snippet { font-family: monospace; font-size: 0.85em; white-space: pre-wrap; }
.ids .ctx-tok { margin-right: 0.4em; }
</style>"""


def _text(piece: str) -> str:
    """A token as HTML that shows its spaces and line breaks (an empty one stays visible)."""
    return html.escape(piece).replace("\n", "&#8629;") or "&#8203;"


def _ids_only(reading: FeatureReading) -> str:
    """``' ids'`` when the tokens are bare ids (a model without a tokenizer): spaced apart."""
    bare = all(text == str(i) for i, text in reading.token_text.items())
    return " ids" if bare else ""


def _check_reading(reading: Any, what: str) -> FeatureReading:
    if not isinstance(reading, FeatureReading):
        raise InterpError(
            f"{what} must be a FeatureReading (interp.dictionaries.read_features), got "
            f"{type(reading).__name__}"
        )
    return reading


def context_html(reading: FeatureReading, row: int, tokens: dict[int, str], *, scale: float) -> str:
    """One context as shaded tokens, the context's own token outlined.

    Args:
        reading: the :class:`FeatureReading`.
        row: the context's row in ``reading.contexts``.
        tokens: token id to text, for every id in the window.
        scale: the activation shown at full shade (the feature's largest).

    Returns:
        An HTML fragment (``<span class="ctx-tok">`` per token).
    """
    spans = []
    for offset, tid, act in reading.window(row):
        shade = 0.0 if scale <= 0 else min(1.0, max(0.0, act / scale))
        centre = " centre" if offset == 0 else ""
        spans.append(
            f'<span class="ctx-tok{centre}" title="{act:.3f}" '
            f'style="background: rgba(234, 88, 12, {shade:.2f})">{_text(tokens[tid])}</span>'
        )
    return "".join(spans)


def feature_cards(
    reading: FeatureReading, features: Sequence[int], *, tag: str = "f", logits: int = 8
) -> str:
    """The cards of ``features``: density, logit effects and top contexts of each.

    Args:
        reading: the :class:`FeatureReading` they come from.
        features: feature ids, in the order shown.
        tag: the cards' anchor prefix (``id="{tag}-{feature}"``), one per dictionary.
        logits: tokens shown per side of the logit effects.

    Returns:
        An HTML fragment.

    Raises:
        InterpError: a feature the reading does not hold.
    """
    reading = _check_reading(reading, "reading")
    info = reading.features.set_index("feature")
    unknown = [f for f in features if int(f) not in info.index]
    if unknown:
        raise InterpError(
            f"feature {unknown[0]} was not read: pass it in read_features(features=...)"
        )
    tokens = reading.token_text
    by_feature = reading.contexts.groupby("feature").indices if len(reading.contexts) else {}
    lg = reading.logits
    ids = _ids_only(reading)
    parts = []
    for f in (int(f) for f in features):
        row = info.loc[f]
        stats = (
            f"density {row['density']:.3%} ({int(row['n_active']):,} positions); mean "
            f"activation where active {row['mean_activation']:.3f}; largest "
            f"{row['max_activation']:.3f}"
        )
        logit_html = ""
        if lg is not None:
            mine = lg[(lg["feature"] == f) & (lg["rank"] < logits)]
            for side, cls, label in (("top", "tok-pos", "raises"), ("bottom", "tok-neg", "lowers")):
                one = mine[mine["side"] == side]
                toks = " ".join(
                    f'<span class="{cls}" title="{v:+.3f}">{_text(t)}</span>'
                    for t, v in zip(one["token"], one["value"])
                )
                logit_html += f'<div class="logit-row" data-side="{side}">{label}: {toks}</div>'
        rows = by_feature.get(f, [])
        scale = float(row["max_activation"])
        items = "".join(
            f'<li data-rank="{int(reading.contexts["rank"].iloc[r])}">'
            f"{context_html(reading, int(r), tokens, scale=scale)}"
            f'<span class="ctx-act">{reading.contexts["activation"].iloc[r]:.3f}</span></li>'
            for r in rows
        )
        ctx = (
            f'<ol class="contexts{ids}" start="0">{items}</ol>' if items else "<p>Never active.</p>"
        )
        parts.append(
            f'<section class="feature-card" id="{tag}-{f}" data-feature="{f}">'
            f'<h3>Feature {f}</h3><p class="stats">{stats}</p>{logit_html}{ctx}</section>'
        )
    return "".join(parts)


def _snippet(reading: FeatureReading, f: int, tokens: dict[int, str]) -> str:
    c = reading.contexts
    rows = np.flatnonzero(c["feature"].to_numpy() == f) if len(c) else []
    if not len(rows):
        return "(never active)"
    r = int(rows[0])
    scale = float(c["activation"].iloc[r])
    return context_html(reading, r, tokens, scale=scale)


def pair_section(
    pairs: pd.DataFrame,
    *,
    query: FeatureReading,
    key: FeatureReading,
    title: str,
    query_tag: str = "f",
    key_tag: str = "f",
    top: int = 20,
) -> str:
    """A table of (query feature, key feature) pairs, linked to the cards, with contexts.

    Args:
        pairs: one row per pair: ``query_feature``, ``key_feature``, ``value`` (what the
            pair contributes), in the order shown; other columns are shown too.
        query: the query side's :class:`FeatureReading`.
        key: the key side's (``query`` again when one dictionary serves both).
        title: the section's heading (e.g. the head and what ``value`` is).
        query_tag: the anchor prefix of the query side's cards.
        key_tag: the anchor prefix of the key side's cards.
        top: rows shown.

    Returns:
        An HTML fragment.

    Raises:
        InterpError: a table without the pair columns, or readings that are not readings.
    """
    query, key = _check_reading(query, "query"), _check_reading(key, "key")
    need = {"query_feature", "key_feature", "value"}
    if not isinstance(pairs, pd.DataFrame) or not need <= set(pairs.columns):
        got = list(pairs.columns) if isinstance(pairs, pd.DataFrame) else type(pairs).__name__
        raise InterpError(f"pairs needs columns {sorted(need)}, got {got}")
    qt, kt = query.token_text, key.token_text
    extra = [c for c in pairs.columns if c not in need]
    head = "".join(
        f"<th>{html.escape(c)}</th>"
        for c in ["query feature", "its top context", "key feature", "its top context", "value"]
        + extra
    )
    body = []
    for _, r in pairs.head(top).iterrows():
        q, k = int(r["query_feature"]), int(r["key_feature"])
        cells = [
            f'<td><a href="#{query_tag}-{q}">{q}</a></td>',
            f'<td class="snippet{_ids_only(query)}">{_snippet(query, q, qt)}</td>',
            f'<td><a href="#{key_tag}-{k}">{k}</a></td>',
            f'<td class="snippet{_ids_only(key)}">{_snippet(key, k, kt)}</td>',
            f'<td class="num">{float(r["value"]):.4f}</td>',
        ] + [f'<td class="num">{html.escape(str(r[c]))}</td>' for c in extra]
        body.append(f'<tr class="pair" data-query="{q}" data-key="{k}">{"".join(cells)}</tr>')
    return (
        f'<section class="pairs"><h2>{html.escape(title)}</h2>'
        f'<table class="pairs"><tr>{head}</tr>{"".join(body)}</table></section>'
    )


def feature_page(
    reading: FeatureReading,
    *,
    features: Sequence[int] | None = None,
    title: str = "Dictionary features",
    sections: Sequence[str] = (),
    logits: int = 8,
) -> Report:
    """A page of feature cards, with a summary of the reading, and ``sections`` above them.

    Args:
        reading: the :class:`FeatureReading`.
        features: the features shown (``None``: the 50 densest that were read).
        title: the page's title.
        sections: HTML fragments placed above the cards (:func:`pair_section`).
        logits: tokens shown per side of each feature's logit effects.

    Returns:
        A :class:`~interp.outputs.render.Report` (``.write(path)`` writes it).

    Raises:
        InterpError: a reading that is not one, or a feature it does not hold.
    """
    reading = _check_reading(reading, "reading")
    f = reading.features
    if features is None:
        features = f.sort_values(["density", "feature"], ascending=[False, True])["feature"]
        features = [int(x) for x in features.head(50)]
    a = f.attrs
    dead = int((f["n_active"] == 0).sum())
    report = Report(title)
    report.raw(STYLE)
    report.text(
        f"Dictionary at {a.get('hook')} ({a.get('architecture')}, {a.get('d_sae'):,} features) "
        f"on {a.get('model')}: {len(f):,} features read over {a.get('n_positions'):,} positions "
        f"(the first {a.get('skip_columns')} column(s) of each sequence left out); {dead:,} of "
        f"them never active; median density {float(f['density'].median()):.3%}."
    )
    if reading.logits is None:
        report.text(f"No logit effects: {a.get('logits')}.")
    else:
        report.text(
            "Logit effects: the feature's decoder row through the final norm (its scale taken "
            "as 1) and the unembedding, per unit of activation; they rank a feature's tokens."
        )
    for part in sections:
        report.raw(part)
    report.heading("Features")
    report.raw(feature_cards(reading, features, logits=logits))
    return report
