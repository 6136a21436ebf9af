"""A head's top (query feature, key feature) pairs where it attends: the features page's table.

For each sequence the head's query is taken at the last position and its key where the head
puts most of that query's attention, past the first ``skip_columns`` positions (a BOS
column draws the attention of many heads whatever the text: a sink, not a reason).
:func:`interp.analysis.qk_attribution` with the dictionary splits each sequence's score
there into (query piece, key piece) pairs, exactly; the pairs of two features are averaged
over the sequences (a pair absent from a sequence counts 0) and ranked. What the feature
pairs leave to the dictionary's error and decoder bias, and to components written after its
hook, is said in ``attrs``, so the table never hides how much of the score it explains.

Example:
    >>> import torch
    >>> from interp.dictionaries import Dictionary
    >>> from interp.models import load_model
    >>> model = load_model("induction-2l")
    >>> D = Dictionary.random(d_in=128, d_sae=32, architecture="topk", k=4,
    ...                       hook_name="blocks.1.hook_resid_pre", seed=0)
    >>> tokens = torch.randint(1, 64, (4, 12), generator=torch.Generator().manual_seed(0))
    >>> pairs = head_feature_pairs(model, tokens, layer=1, head=1, dictionary=D)
    >>> list(pairs.columns[:4]), pairs.attrs["sequences"]
    (['query_feature', 'key_feature', 'value', 'share'], 4)
"""

from __future__ import annotations

import pandas as pd
import torch

from interp.analysis.heads.patterns import attention_patterns
from interp.analysis.heads.qk.attribution import qk_attribution
from interp.core.checks import check_int, check_tokens
from interp.core.errors import InterpError
from interp.core.protocol import HookedModel
from interp.dictionaries import Dictionary


def head_feature_pairs(
    model: HookedModel,
    tokens: torch.Tensor,
    *,
    layer: int,
    head: int,
    dictionary: Dictionary,
    skip_columns: int = 1,
    top: int = 20,
    memory_budget: int | None = None,
) -> pd.DataFrame:
    """``head``'s top (query feature, key feature) pairs where it attends (module docstring).

    Args:
        model: A hooked model.
        tokens: ``[batch, pos]`` ids (at least ``skip_columns + 1`` positions).
        layer: The head's layer.
        head: The head's index in its layer.
        dictionary: A dictionary on the residual stream at or before the head's input (or a
            writer's, as :func:`interp.analysis.qk_attribution` takes it).
        skip_columns: Leading key positions never taken as the attended key.
        top: Pairs kept.
        memory_budget: As :func:`interp.analysis.qk_attribution`.

    Returns:
        One row per pair, the largest first: ``query_feature, key_feature, value`` (the
        pair's mean contribution to the score, in score units), ``share`` (of the mean
        score) and ``top_in`` (the share of sequences where it is the largest feature pair).
        ``attrs``: ``layer, head, label, sequences, score`` (the mean score),
        ``feature_share`` (what every feature pair carries), ``other_share`` (the error, the
        decoder bias and the components: the rest), ``score_gap`` (the attribution's check).

    Raises:
        InterpError: bad tokens or options, or as :func:`interp.analysis.qk_attribution`.
    """
    tokens = check_tokens(model, tokens, chunked=True)
    skip = check_int(skip_columns, "skip_columns", minimum=0)
    top = check_int(top, "top", minimum=1)
    b, n = tokens.shape
    if n <= skip + 1:
        raise InterpError(
            f"tokens of {n} positions leave no key after skip_columns={skip} before the last "
            "position: pass longer sequences or a smaller skip_columns"
        )
    pattern = attention_patterns(model, tokens, heads=[(layer, head)])[:, 0, -1]  # [b, key]
    keys = (pattern[:, skip : n - 1].argmax(-1) + skip).tolist()
    df = qk_attribution(
        model, tokens, layer=layer, head=head, query_positions=[[n - 1]] * b,
        key_positions=[[k] for k in keys], dictionary=dictionary, memory_budget=memory_budget,
    )  # fmt: skip
    q, k = _feature(df["query_piece"]), _feature(df["key_piece"])
    both = df[q.notna() & k.notna()].assign(query_feature=q, key_feature=k)
    score = float(df["value"].sum()) / b
    summed = both.groupby(["query_feature", "key_feature"])["value"].sum() / b
    best = both.loc[both.groupby("sequence")["value"].idxmax()]
    top_in = best.groupby(["query_feature", "key_feature"]).size() / b
    out = pd.DataFrame({"value": summed, "top_in": top_in}).fillna({"top_in": 0.0})
    out = out.sort_values("value", ascending=False).head(top).reset_index()
    out["query_feature"] = out["query_feature"].astype(int)
    out["key_feature"] = out["key_feature"].astype(int)
    out.insert(3, "share", out["value"] / score if score else float("nan"))
    feature_share = float(summed.sum()) / score if score else float("nan")
    out = out[["query_feature", "key_feature", "value", "share", "top_in"]]
    out.attrs.update(
        layer=layer, head=head, label=f"L{layer}H{head}", sequences=b, score=score,
        feature_share=feature_share, other_share=1.0 - feature_share,
        score_gap=df.attrs.get("score_gap"), skip_columns=skip,
    )  # fmt: skip
    return out


def feature_of(piece: str) -> int | None:
    """The feature index of a QK attribution piece named ``F123`` (or ``<hook>:F123``, one
    of several dictionaries'); ``None`` for any other piece (``error``, ``embed:37``, ...).

    Example:
        >>> feature_of("blocks.0.hook_attn_out:F12"), feature_of("error")
        (12, None)

    Args:
        piece: A piece's name.

    Returns:
        The index, or ``None``.
    """
    name = str(piece).rsplit(":", 1)[-1]
    return int(name[1:]) if name[:1] == "F" and name[1:].isdigit() else None


def _feature(pieces: pd.Series) -> pd.Series:
    """Each piece's feature index (:func:`feature_of`), NaN where it is none."""
    return pd.to_numeric(pieces.map(feature_of), errors="coerce")


def pair_title(pairs: pd.DataFrame) -> str:
    """The features page's heading for ``pairs``: the head, what ``value`` is, and the share
    of the score the feature pairs carry."""
    a = pairs.attrs
    return (
        f"{a['label']}: its top (query feature, key feature) pairs where it attends most "
        f"({a['sequences']} sequences, query at the last position; mean score "
        f"{a['score']:.3f}); feature pairs carry {a['feature_share']:.0%} of it, the "
        f"dictionary's error, decoder bias and later components {a['other_share']:.0%}"
    )
