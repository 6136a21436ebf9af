"""Why a pretrained model's induction head attends, in features: its score on repeated text
split over a residual dictionary at its query and writer dictionaries at its key.

The induction lab in features (:mod:`interp.experiments.induction.features`) answers the
question on the shipped two-layer model. Here the same split runs on a real model (SmolLM2's
L18H6, ``benchmarks/smollm2_features.py``): held-out text of the offline corpus
(:func:`interp.datasets.python_text`, test split) repeated twice after BOS, the head's score
on each prompt's induction target
(:func:`~interp.experiments.induction.why_attend.induction_targets`) split by
:func:`interp.analysis.qk_attribution` with a residual dictionary on the query side and writer
dictionaries (the previous-token head's layer output) on the key side. The rows of
a prompt sum to the model's own score, so every share is exact and what the dictionaries miss
is said: the rows whose query or key piece is a dictionary's ``error`` (and apart, ``b_dec``,
and the rest: token embeddings, components without a dictionary, the head's bias).

Each top feature's meaning is read from its own activations on the held-out corpus, never
assumed: its top contexts (:func:`interp.dictionaries.read_features`) and the current and
previous tokens that take the largest share of its activation. The top feature of each side
of a few prompts' top feature pair is then removed from that side's input alone
(:func:`interp.analysis.qk_interventions`, norms recomputed), the measured change beside the
attribution. Text repeats inside a segment (indentation, names), so a target's token may also
occur earlier: the target is the position, as the induction probe defines it.

Example:
    >>> from interp.models import load_model
    >>> m = load_model("induction-2l")
    >>> data = repeated_text(m, prompts=2, half=8)
    >>> data.tokens.shape, bool((data.tokens[:, 1:9] == data.tokens[:, 9:]).all())
    (torch.Size([2, 17]), True)
    >>> from interp.core.paths import data_dir
    >>> from interp.dictionaries import load_dictionary
    >>> W = load_dictionary(data_dir() / "induction-2l-attn0")  # layer 0's writer
    >>> R = Dictionary.random(d_in=128, d_sae=64, architecture="topk", k=4,
    ...                       hook_name="blocks.1.hook_resid_pre", seed=0)
    >>> w = head_in_features(m, data, layer=1, head=1, query_dictionary=R,
    ...                      key_dictionaries=[W], reading_tokens=data.tokens, checks=1)
    >>> w.label, round(sum(w.shares.values()), 6), list(w.interventions["side"])
    ('L1H1', 1.0, ['query', 'key'])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pandas as pd
import torch

from interp.analysis.heads.qk.attribution import qk_attribution
from interp.analysis.heads.qk.interventions import UNREMOVABLE, qk_interventions
from interp.analysis.heads.qk.pairs import feature_of
from interp.core.checks import check_int
from interp.core.errors import InterpError
from interp.core.protocol import HookedModel
from interp.datasets import RepeatedTokens, python_text
from interp.dictionaries import Dictionary, read_features
from interp.dictionaries.activations import hook_activations
from interp.dictionaries.logit_effects import token_strings
from interp.experiments.induction.why_attend import induction_targets

TENTH = 0.1  # a removal agrees when it moves the score within this share of the attribution
CELL = ["sequence", "query_position", "key_position"]


@dataclasses.dataclass(frozen=True)
class HeadInFeatures:
    """A head's score on its induction targets, over its inputs' dictionary features.

    Attributes:
        label: the head (``L18H6``).
        score: the mean score over prompts (the model's own, pre-softmax).
        per_prompt: one row per prompt: its cell, ``score``, the top (query piece, key piece)
            row and the top (query feature, key feature) row; ``attrs``: the attribution's
            (``score_gap``, ``forward_equivalents``, ...).
        pairs: the top (query feature, key feature) pairs by mean value over prompts (a pair
            absent from a prompt counts 0): ``query_piece, key_piece, value, share, active``.
        shares: parts of the summed score: ``top_pairs``, ``other_feature_pairs``,
            ``error`` (a row with a dictionary's error on either side), ``b_dec`` (a decoder
            bias on either side, no error), ``rest`` (embeddings, components, biases, a
            feature beside them); they add up to 1.
        sides: each side's parts (summed over the other side) as shares of the summed
            score: ``<hook> features``, ``<hook> error``, ``<hook> b_dec``, ``embed`` (the
            token embeddings), each component without a dictionary (``L17.attn``).
        meanings: one row per top feature: side, piece, hook, its top current and previous
            tokens with their shares of its activation, and its top contexts.
        interventions: per checked prompt and side, the top feature pair's feature removed
            from that side's input: ``rank`` (its place among the side's pieces by size),
            ``attribution``, ``measured`` (NaN past ``reach``), ``within_a_tenth``.
    """

    label: str
    score: float
    per_prompt: pd.DataFrame
    pairs: pd.DataFrame
    shares: dict[str, float]
    sides: pd.DataFrame
    meanings: pd.DataFrame
    interventions: pd.DataFrame

    @property
    def agreeing(self) -> float:
        """Removals measured whose change is within a tenth of the attribution."""
        done = self.interventions.dropna(subset=["measured"])
        return float(done["within_a_tenth"].mean()) if len(done) else float("nan")


def repeated_text(
    model: HookedModel, *, prompts: int, half: int, stride: int = 1
) -> RepeatedTokens:
    """Held-out text of the offline corpus repeated: BOS, ``half`` tokens, the same again.

    Args:
        model: The hooked model (its tokenizer, or characters without one).
        prompts: How many prompts.
        half: Tokens that repeat (at least 2).
        stride: Every ``stride``-th of the corpus's consecutive sequences, so the prompts
            spread over more of its files.

    Returns:
        A :class:`~interp.datasets.RepeatedTokens` of ``[prompts, 1 + 2 * half]`` tokens.

    Raises:
        InterpError: for a count or length out of range (or past the model's context).
    """
    n, L = check_int(prompts, "prompts", minimum=1), check_int(half, "half", minimum=2)
    n_ctx = getattr(model.cfg, "n_ctx", None)
    if n_ctx is not None and 1 + 2 * L > n_ctx:
        raise InterpError(f"1 + 2 x {L} tokens are past the model's context of {n_ctx}")
    step = check_int(stride, "stride", minimum=1)
    body = python_text(model, n_sequences=n * step, seq_len=L + 1, split="test").tokens[::step]
    tokens = torch.cat([body, body[:, 1:]], dim=1)
    predictable = torch.zeros_like(tokens, dtype=torch.bool)
    predictable[:, L + 2 :] = True
    return RepeatedTokens(tokens=tokens, predictable=predictable, segment_len=torch.full((n,), L),
                          first_start=torch.ones(n, dtype=torch.long),
                          second_start=torch.full((n,), 1 + L))  # fmt: skip


def _kind(piece: str) -> str:
    """A piece's kind: ``feature``, ``error``, ``b_dec`` or ``other``."""
    name = str(piece).rsplit(":", 1)[-1]
    return "feature" if feature_of(piece) is not None else name if name in ("error", "b_dec") \
        else "other"  # fmt: skip


def _feature_pairs(df: pd.DataFrame) -> pd.Series:
    """The rows whose query and key pieces are both features."""
    return (df["query_piece"].map(_kind) == "feature") & (df["key_piece"].map(_kind) == "feature")


def _hook(piece: str, dictionaries: Sequence[Dictionary]) -> str:
    """The hook of the dictionary a feature piece belongs to."""
    return str(piece).rsplit(":", 1)[0] if ":" in str(piece) else dictionaries[0].hook_name


def _score_shares(df: pd.DataFrame, top: int) -> tuple[pd.DataFrame, dict[str, float]]:
    """The top ``top`` feature pairs of a per-prompt ``qk_attribution`` table and the parts
    of the summed score (:attr:`HeadInFeatures.shares`); refuses a score summing to 0."""
    total, n = float(df["value"].sum()), int(df["sequence"].nunique())
    if not n or total == 0.0:
        raise InterpError("no score to split: the table is empty or its scores sum to 0")
    q, k = df["query_piece"].map(_kind), df["key_piece"].map(_kind)
    feat = df[(q == "feature") & (k == "feature")]
    g = feat.groupby(["query_piece", "key_piece"])["value"]
    pairs = pd.DataFrame({"value": g.sum() / n, "active": g.size()})
    pairs = pairs.sort_values("value", ascending=False).head(top).reset_index()
    pairs.insert(3, "share", pairs["value"] * n / total)
    error = (q == "error") | (k == "error")
    b_dec = ~error & ((q == "b_dec") | (k == "b_dec"))
    top_sum = float(pairs["value"].sum()) * n
    shares = {
        "top_pairs": top_sum / total,
        "other_feature_pairs": (float(feat["value"].sum()) - top_sum) / total,
        "error": float(df.loc[error, "value"].sum()) / total,
        "b_dec": float(df.loc[b_dec, "value"].sum()) / total,
    }
    shares["rest"] = float(df.loc[~error & ~b_dec & ~((q == "feature") & (k == "feature")),
                                  "value"].sum()) / total  # fmt: skip
    return pairs, shares


def feature_meanings(
    model: HookedModel, D: Dictionary, tokens: torch.Tensor, pieces: Sequence[str], side: str,
    *, contexts: int = 5,
) -> pd.DataFrame:  # fmt: skip
    """What each of ``pieces`` (features of ``D``) reads, from its own activations on
    ``tokens`` (BOS column left out): the current and previous tokens that take the largest
    share of its activation, and its top contexts (:func:`read_features`).

    Args:
        model: The hooked model.
        D: The dictionary the pieces belong to.
        tokens: ``[batch, pos]`` held-out ids.
        pieces: Feature pieces (``F123`` or ``<hook>:F123``).
        side: ``query`` or ``key``, copied into the rows.
        contexts: Top contexts kept per feature.

    Returns:
        One row per piece: ``side, piece, hook, feature, active, token, token_share,
        previous_token, previous_share, contexts`` (the contexts joined by `` | ``).

    Raises:
        InterpError: for a dictionary the model cannot hold.
    """
    ids = [int(feature_of(p)) for p in pieces]  # type: ignore[arg-type]
    if not ids:
        return pd.DataFrame()
    r = read_features(model, tokens, dictionary=D, features=ids, top=contexts, skip_columns=1,
                      logits=0)  # fmt: skip
    with torch.no_grad():
        x = hook_activations(model, tokens, D.hook_name).to(D.device)
        acts = D.encode(x)[:, 1:, ids].float().cpu().clamp_min(0).reshape(-1, len(ids))
    cur, prev = tokens[:, 1:].reshape(-1).cpu(), tokens[:, :-1].reshape(-1).cpu()
    rows = []
    for j, (piece, f) in enumerate(zip(pieces, ids, strict=True)):
        a, total = acts[:, j], float(acts[:, j].sum())
        read = {}
        for name, share, t in (("token", "token_share", cur),
                               ("previous_token", "previous_share", prev)):  # fmt: skip
            mass = torch.zeros(int(model.cfg.d_vocab)).index_add_(0, t, a)
            best = int(mass.argmax())
            read[name] = token_strings(model, [best])[0]
            read[share] = float(mass[best]) / total if total else 0.0
        ctx = [c.replace("\n", "\\n") for c in r.contexts[r.contexts["feature"] == f]["context"]]
        rows.append({"side": side, "piece": piece, "hook": D.hook_name, "feature": f,
                     "active": int((a > 0).sum()), **read,
                     "contexts": " | ".join(ctx)})  # fmt: skip
    return pd.DataFrame(rows)


def _sides(df: pd.DataFrame, dictionaries: dict[str, Sequence[Dictionary]]) -> pd.DataFrame:
    """Each side's parts as shares of the summed score (:attr:`HeadInFeatures.shares`)."""
    out = []
    for side, ds in dictionaries.items():
        pieces = df[f"{side}_piece"].astype(str)
        kind = pieces.map(_kind)
        hooks = pd.Series([_hook(p, ds) for p in pieces], index=pieces.index)
        part = (hooks + " " + kind.str.replace("feature", "features")).where(kind != "other",
                pieces.str.replace(r"(?s)^embed:.*", "embed", regex=True))  # fmt: skip
        shares = df.groupby(part)["value"].sum() / float(df["value"].sum())
        out.append(pd.DataFrame({"side": side, "part": shares.index, "share": shares.values}))
    return pd.concat(out).sort_values(["side", "share"], ascending=[False, False],
                                      ignore_index=True)  # fmt: skip


def _rank(cell: pd.DataFrame, side: str, piece: str) -> int:
    """``piece``'s rank (0: first) among one prompt's removable ``side`` pieces by the size of
    their share, the order :func:`qk_interventions` removes them in."""
    shares = cell.groupby(f"{side}_piece")["value"].sum()
    shares = shares.drop([x for x in UNREMOVABLE if x in shares.index])
    return int(shares.abs().sort_values(ascending=False).index.get_loc(piece))


def head_in_features(
    model: HookedModel, data: RepeatedTokens, *, layer: int, head: int,
    query_dictionary: Dictionary, key_dictionaries: Sequence[Dictionary],
    reading_tokens: torch.Tensor, top: int = 10, checks: int = 8, removed: int = 3,
    reach: int = 24, contexts: int = 5,
) -> HeadInFeatures:  # fmt: skip
    """Split ``head``'s score on each prompt's induction target over its inputs' features,
    read the top features' meanings and remove the top pair's features (module docstring).

    Args:
        model: The hooked model.
        data: The held-out repeated prompts (:func:`repeated_text`).
        layer: The head's layer.
        head: The head within ``layer``.
        query_dictionary: A residual-stream dictionary at or before the head's input.
        key_dictionaries: Writer dictionaries upstream of the head (``hook_attn_out``, ...).
        reading_tokens: ``[batch, pos]`` held-out text the features' meanings are read on.
        top: Feature pairs kept.
        checks: Prompts whose top feature pair is removed, the first ones.
        removed: ``qk_interventions``' ``top``, pieces per side it removes (one pass each):
            at least this many, and as many as reach the pair's features (their ``rank`` on
            their side), up to ``reach``; a feature ranked past it is not measured (NaN).
        reach: The most pieces per side removed on one prompt.
        contexts: Top contexts per feature.

    Returns:
        A :class:`HeadInFeatures`.

    Raises:
        InterpError: for no prompts, no key dictionary, a query dictionary off the residual
            stream, or what :func:`qk_attribution` refuses (a dictionary after the head).
    """
    if len(data) == 0:
        raise InterpError("no prompts: pass at least one repeated sequence")
    keys = list(key_dictionaries)
    if not keys:
        raise InterpError("key_dictionaries is empty: pass the previous-token layer's writer")
    if "hook_resid" not in query_dictionary.hook_name:
        raise InterpError(f"the query side takes a residual-stream dictionary, not one at "
                          f"{query_dictionary.hook_name}")  # fmt: skip
    q, k = induction_targets(data)
    df = qk_attribution(model, data.tokens, layer=layer, head=head, query_positions=q,
                        key_positions=k, query_dictionary=[query_dictionary],
                        key_dictionary=keys)  # fmt: skip
    score = df.groupby(CELL)["value"].sum().rename("score")
    best = df.loc[df.groupby(CELL)["value"].idxmax()].set_index(CELL)
    both = df[_feature_pairs(df)]
    fbest = both.loc[both.groupby(CELL)["value"].idxmax()].set_index(CELL)
    per = pd.concat([score, best[["query_piece", "key_piece", "value"]].add_prefix("top_"),
                     fbest[["query_piece", "key_piece", "value"]].add_prefix("feature_")],
                    axis=1).reset_index()  # fmt: skip
    per.attrs.update(df.attrs)  # the check against the model's scores, the pass's cost
    pairs, shares = _score_shares(df, top)
    meanings = pd.concat([
        feature_meanings(model, query_dictionary, reading_tokens,
                         list(dict.fromkeys(pairs["query_piece"])), "query", contexts=contexts),
        *(feature_meanings(model, D, reading_tokens, [p for p in dict.fromkeys(pairs["key_piece"])
                                                      if _hook(p, keys) == D.hook_name],
                           "key", contexts=contexts) for D in keys),
    ], ignore_index=True)  # fmt: skip
    rows = []
    for i in per.index[per["feature_query_piece"].notna()][:checks]:
        s = int(per.at[i, "sequence"])
        pieces = {side: per.at[i, f"feature_{side}_piece"] for side in ("query", "key")}
        rank = {side: _rank(df[df["sequence"] == s], side, p) for side, p in pieces.items()}
        n = min(reach, max(removed, *(r + 1 for r in rank.values())))
        out = qk_interventions(model, data.tokens[s : s + 1], layer=layer, head=head,
                               query_positions=[q[s]], key_positions=[k[s]], by="component",
                               query_dictionary=query_dictionary, key_dictionary=keys,
                               top=n)  # fmt: skip
        for side, piece in pieces.items():
            hit = out[(out["side"] == side) & (out["component"] == piece)]
            a = float(hit["attribution"].iloc[0]) if len(hit) else float("nan")
            m = float(hit["measured"].iloc[0]) if len(hit) else float("nan")
            rows.append({"sequence": s, "side": side, "piece": piece, "rank": rank[side],
                         "attribution": a, "measured": m,
                         "within_a_tenth": abs(m - a) <= TENTH * abs(a)})  # fmt: skip
    label = f"L{layer}H{head}"
    sides = _sides(df, {"query": [query_dictionary], "key": keys})
    return HeadInFeatures(label, float(score.mean()), per, pairs, shares, sides, meanings,
                          pd.DataFrame(rows))  # fmt: skip
