"""Why the induction head attends, in features: a dictionary at layer 1's input.

The dictionary shipped in ``data/induction-2l-resid1`` (TopK, trained by
``interp train dictionary`` on the model's own training distribution; its ``cfg.json``
records the command) rewrites ``blocks.1.hook_resid_pre``. Each feature's meaning is read
from its own activations over fresh draws of that distribution (:func:`feature_meanings`):
its top current token and its top previous token, with the share of its activation each
holds. On every held-out prompt the induction head's score at its target (the query's
induction target, ``q - L + 1``) is split over (query feature, key feature) pairs
(:func:`interp.analysis.qk_attribution` with ``dictionary=``); the circuit predicts that
the top pair is (query feature "current token is A") x (key feature "previous token is
A"), A being the query's token. Then each prompt's top key feature is removed from the
head's key input alone, the norm recomputed
(:func:`interp.analysis.heads.qk.interventions.score_without`), and the score's change is
set beside the attribution's.

Example:
    >>> from interp.models import load_model
    >>> from interp.training.induction import InductionTrainConfig, held_out_batch
    >>> model = load_model("induction-2l")
    >>> data = held_out_batch(InductionTrainConfig(), n=8, seed=5)
    >>> f = why_attend_in_features(model, data, meaning_sequences=64)
    >>> 0.0 <= f.match_rate <= 1.0
    True
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd
import torch

from interp.analysis.heads.qk.interventions import score_without
from interp.analysis.heads.qk.shares import attribute_scores
from interp.core.hooks import hook_name
from interp.core.paths import data_dir
from interp.core.protocol import HookedModel
from interp.datasets import TRAIN_LENGTHS, RepeatedTokens, repeated_tokens
from interp.dictionaries import Dictionary, load_dictionary
from interp.experiments.induction.why_attend import induction_targets

DICTIONARY = "induction-2l-resid1"  # the folder in data/
MEANING_SEED = 777  # the draws feature meanings are read from (not the held-out prompts')
WITHIN = 0.1  # an intervention agrees with its attribution within this fraction of it


@dataclasses.dataclass(frozen=True)
class FeatureWhy:
    """The induction head's score on its targets, in features, and its check."""

    meanings: pd.DataFrame  # per feature: its top current / previous token and their shares
    per_prompt: pd.DataFrame  # per prompt: token A, the top pair, their meanings, the check
    match_rate: float  # prompts whose top pair is (current A) x (previous A)
    agree_rate: float  # prompts whose key-feature removal is within WITHIN of its attribution
    attrs: dict[str, Any]  # the attribution table's attrs


def shipped_dictionary() -> Dictionary:
    """The dictionary at ``blocks.1.hook_resid_pre`` shipped in ``data/`` (module docstring)."""
    return load_dictionary(data_dir() / DICTIONARY)


def feature_meanings(model: HookedModel, D: Dictionary, tokens: torch.Tensor) -> pd.DataFrame:
    """Each live feature's top current token and top previous token over ``tokens``, read
    from its activations: ``feature, current_token, current_share, previous_token,
    previous_share, density`` (a share: the fraction of the feature's summed activation on
    positions holding that token; density: the fraction of positions it is active on)."""
    _, c = model.run_with_cache(tokens, names_filter=[D.hook_name])
    with torch.no_grad():
        a = D.encode(c[D.hook_name].float()).float()  # [batch, pos, d_sae]
    onehot = torch.nn.functional.one_hot(tokens, int(model.cfg.d_vocab)).float()
    cur = torch.einsum("bpf,bpv->fv", a, onehot)
    prev = torch.einsum("bpf,bpv->fv", a[:, 1:], onehot[:, :-1])
    live = torch.nonzero(a.sum((0, 1)) > 0).flatten()
    rows = {
        "feature": live.tolist(),
        "current_token": cur[live].argmax(1).tolist(),
        "current_share": (cur[live].max(1).values / cur[live].sum(1)).tolist(),
        "previous_token": prev[live].argmax(1).tolist(),
        "previous_share": (prev[live].max(1).values / prev[live].sum(1).clamp(min=1e-12)).tolist(),
        "density": (a[..., live] > 0).float().mean((0, 1)).tolist(),
    }
    return pd.DataFrame(rows)


def why_attend_in_features(
    model: HookedModel,
    data: RepeatedTokens,
    *,
    head: tuple[int, int] = (1, 1),
    dictionary: Dictionary | None = None,
    meaning_sequences: int = 1024,
) -> FeatureWhy:
    """Split ``head``'s score on each prompt's induction target over feature pairs, read the
    top pair's meanings and check the top key feature by removing it (module docstring)."""
    D = dictionary if dictionary is not None else shipped_dictionary()
    layer, h = head
    draws = repeated_tokens(meaning_sequences, d_vocab=int(model.cfg.d_vocab),
                            seq_len=int(data.tokens.shape[1]), segment_lengths=TRAIN_LENGTHS,
                            repeats=None, seed=MEANING_SEED).tokens  # fmt: skip
    meanings = feature_meanings(model, D, draws).set_index("feature")
    q, k = induction_targets(data)
    att = attribute_scores(model, data.tokens, layer=layer, head=h, query_positions=q,
                           key_positions=k, dictionary=D)  # fmt: skip
    df = att.table
    cell = ["sequence", "query_position", "key_position"]
    score = df.groupby(cell)["value"].sum()
    best = df.loc[df.groupby(cell)["value"].idxmax()].set_index(cell)
    names = {"query_piece": "top_query", "key_piece": "top_key", "value": "top_value"}
    per = best.rename(columns=names)[list(names.values())]
    per["score"] = score
    per = per.reset_index()
    per["token"] = [int(data.tokens[s, p]) for s, p in zip(per["sequence"], per["query_position"])]
    per["query_current"] = [_meaning(meanings, f, "current_token") for f in per["top_query"]]
    per["key_previous"] = [_meaning(meanings, f, "previous_token") for f in per["top_key"]]
    per["match"] = (per["query_current"] == per["token"]) & (per["key_previous"] == per["token"])
    # the top key feature of each prompt removed from the head's key input alone
    key_side = att.sides[1]
    pieces, attribution = [], []
    for s, f in zip(per["sequence"], per["top_key"], strict=True):
        rows = df[(df["sequence"] == s) & (df["key_piece"] == f)]
        attribution.append(-float(rows["value"].sum()))
        piece = key_side.feature_piece(f) if f.startswith("F") else None
        pieces.append(torch.zeros_like(att.acts[hook_name("resid_pre", layer)][s].float())
                      if piece is None else piece[s])  # fmt: skip
    after = score_without(model, data.tokens, att.acts, layer=layer, head=h, side="k",
                          piece=torch.stack(pieces))  # fmt: skip
    before = att.acts[hook_name("attn_scores", layer)][:, h].float()
    idx = (torch.tensor(per["sequence"]), torch.tensor(per["query_position"]),
           torch.tensor(per["key_position"]))  # fmt: skip
    per["attribution"] = attribution
    per["measured"] = (after[idx] - before[idx]).tolist()
    per["agrees"] = (per["measured"] - per["attribution"]).abs() <= WITHIN * per[
        "attribution"].abs()  # fmt: skip
    per.loc[~per["top_key"].str.startswith("F"), "agrees"] = False
    return FeatureWhy(
        meanings=meanings.reset_index(),
        per_prompt=per,
        match_rate=float(per["match"].mean()),
        agree_rate=float(per["agrees"].mean()),
        attrs=dict(df.attrs),
    )


def _meaning(meanings: pd.DataFrame, piece: str, column: str) -> int:
    """The token ``column`` of feature ``piece`` (``'F12'``), or -1 for a piece that is no
    feature (``error``, ``b_dec``, ``bias``)."""
    if not piece.startswith("F") or int(piece[1:]) not in meanings.index:
        return -1
    return int(meanings.loc[int(piece[1:]), column])


def feature_lines(f: FeatureWhy, induction: str = "L1H1") -> list[str]:
    """The lab's sentences for the feature-level answer, with its numbers."""
    per = f.per_prompt
    top = per.groupby(["top_query", "top_key"]).size().sort_values(ascending=False)
    share = float((per["top_value"] / per["score"]).mean())
    return [
        f"On {len(per)} held-out prompts, {induction}'s top (query feature, key feature) pair is "
        f"('current token is A') x ('previous token is A') with the same A in "
        f"{f.match_rate:.0%} of them (meanings read from each feature's own activations); "
        f"the top pair carries {share:.0%} of the score on average; most common pair "
        f"{top.index[0][0]} x {top.index[0][1]} ({int(top.iloc[0])} prompts).",
        f"Removing each prompt's top key feature from {induction}'s key input alone changes the "
        f"score by what the attribution says within {WITHIN:.0%} in {f.agree_rate:.0%} of "
        f"prompts (mean attribution {per['attribution'].mean():+.3f}, mean measured "
        f"{per['measured'].mean():+.3f}).",
    ]
