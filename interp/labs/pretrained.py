"""The pretrained-heads lab: the article's "watch real heads", on SmolLM2-135M and MiniLM-L6.

Two parts, each run on any model :func:`interp.models.load_model` gives:

1. :func:`induction_in`: induction heads on BOS + random ordinary word
   tokens (:func:`interp.analysis.words.ordinary_word_ids`), repeated twice.
   Stripe scores for every head; the top ``k`` heads by induction score;
   first-half vs repeated-half loss; the top ``k`` ablated together
   against ``n_random`` seeded draws of ``k`` other heads; OV copying scores
   of the top heads; the strongest K-composition pairs (does an earlier head's
   output feed the later head's keys, as a previous-token head feeds an
   induction head?). On an encoder (MiniLM: bidirectional, no language-model
   head) only the scores are meaningful, with bidirectional stripes; loss,
   ablation and copying (which reads the unembedding) are skipped and say why.
2. :func:`sense_in`: the bank-sense question on real sentences
   (:func:`interp.datasets.ambiguous_words`). Per stage, the cosine between
   an ambiguous word's vectors in its two senses (and the same-sense
   control); a nearest-neighbour probe of the sense with a train/test split;
   the heads that attend from the word to its clue (on sentences where the
   clue is not the adjacent token, so previous-token heads do not win by
   adjacency); and an intervention: zero-ablating those clue heads against
   random heads, measured on how well the final stage separates the senses.

Attention scores name candidates; the ablations test them.

Example:
    >>> from interp.models import load_model                  # doctest: +SKIP
    >>> model = load_model("smollm2-135m")                     # doctest: +SKIP
    >>> induction_in(model).top                                # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd
import torch

from interp.analysis._common import bos_token_id, is_causal
from interp.analysis.ablation import ablate_head_groups, loss_metric, zero_head_hooks
from interp.analysis.circuits import copying_scores
from interp.analysis.clue_attention import clue_attention
from interp.analysis.composition import composition_scores
from interp.analysis.icl import half_losses
from interp.analysis.induction import head_scores
from interp.analysis.sense_probe import nearest_neighbour_probe
from interp.analysis.sense_states import sense_similarity, word_states
from interp.analysis.words import WordTokens, encode_word, ordinary_word_ids
from interp.datasets import RepeatedTokens, ambiguous_words, repeated_random_tokens


def random_head_groups(
    model: Any, exclude: list[str], k: int, n_draws: int, seed: int
) -> dict[str, list[str]]:
    """``n_draws`` seeded sets of ``k`` heads, none in ``exclude`` (labels ``L{l}H{h}``)."""
    cfg = model.cfg
    pool = [
        f"L{l}H{h}"
        for l in range(cfg.n_layers)
        for h in range(cfg.n_heads)
        if f"L{l}H{h}" not in exclude
    ]
    gen = torch.Generator().manual_seed(seed)
    return {
        f"random {k} (draw {d})": [pool[i] for i in torch.randperm(len(pool), generator=gen)[:k]]
        for d in range(n_draws)
    }


def top_by_kind(scores: pd.DataFrame, n: int = 3) -> pd.DataFrame:
    """The ``n`` best heads for each score column: ``kind, rank, layer, head, label, score``."""
    rows = []
    for kind in [c for c in scores.columns if c not in ("layer", "head", "label")]:
        best = scores.nlargest(n, kind)
        for rank, r in enumerate(best.itertuples(), 1):
            rows.append(
                {
                    "kind": kind,
                    "rank": rank,
                    "layer": r.layer,
                    "head": r.head,
                    "label": r.label,
                    "score": getattr(r, kind),
                }
            )
    return pd.DataFrame(rows)


def strong_heads(scores: pd.DataFrame, labels: list[str], threshold: float = 0.5) -> str:
    """Which of ``labels`` score at least ``threshold`` on some stripe, with that stripe's score.

    E.g. ``"L16H0 previous_token 0.88"``. A random draw whose ablation hurts
    often holds such a head (the previous-token half of the induction circuit).
    """
    kinds = [c for c in scores.columns if c not in ("layer", "head", "label")]
    table = scores.set_index("label")
    found = []
    for label in labels:
        row = table.loc[label, kinds]
        if float(row.max()) >= threshold:
            found.append(f"{label} {row.idxmax()} {float(row.max()):.2f}")
    return ", ".join(found)


@dataclasses.dataclass
class InductionInModel:
    """What :func:`induction_in` found (``None`` where the model has no meaningful logits)."""

    data: RepeatedTokens
    scores: pd.DataFrame
    top: pd.DataFrame
    causal: bool
    losses: dict[str, float] | None = None
    group_ablation: pd.DataFrame | None = None
    copying: pd.DataFrame | None = None
    skipped: str | None = None
    composition: pd.DataFrame | None = None


def induction_in(
    model: Any,
    *,
    n: int = 8,
    half_len: int = 50,
    k: int = 6,
    n_random: int = 5,
    seed: int = 0,
) -> InductionInModel:
    """Induction heads in ``model`` on ``n`` sequences of BOS + ``half_len`` tokens twice.

    Raises:
        InterpError: for a probe longer than the model's context.
    """
    cfg = model.cfg
    ids = ordinary_word_ids(model) if getattr(model, "tokenizer", None) is not None else None
    data = repeated_random_tokens(
        n, half_len, d_vocab=int(cfg.d_vocab), bos=bos_token_id(model), seed=seed, token_ids=ids
    )
    scores = head_scores(model, data.tokens)
    top = scores.nlargest(k, "induction").reset_index(drop=True)
    found = InductionInModel(data=data, scores=scores, top=top, causal=is_causal(model))
    # weights only: meaningful with or without a language-model head
    found.composition = composition_scores(model, "K").nlargest(10, "score").reset_index(drop=True)
    if not getattr(model, "interp_logits_meaningful", True):
        found.skipped = (
            "this model has no language-model head, so loss, ablation-by-loss and "
            "copying scores (which read the unembedding) are meaningless and skipped"
        )
        return found
    found.losses = half_losses(model, data)
    labels = top["label"].tolist()
    groups = {f"top {k} induction": labels, **random_head_groups(model, labels, k, n_random, seed)}
    ablation = ablate_head_groups(model, data.tokens, groups, metric=loss_metric(data.loss_mask))
    ablation.insert(1, "kind", ["top induction"] + ["random"] * n_random)
    ablation["strong_heads"] = [strong_heads(scores, hs.split(",")) for hs in ablation["heads"]]
    found.group_ablation = ablation
    found.copying = copying_scores(model, heads=labels, top1=False).dropna().reset_index(drop=True)
    return found


@dataclasses.dataclass
class SenseInModel:
    """What :func:`sense_in` found. ``sentences`` has one row per sentence."""

    sentences: pd.DataFrame
    items: list[WordTokens]
    similarity: pd.DataFrame
    similarity_by_word: pd.DataFrame
    probe: pd.DataFrame
    clue_heads: pd.DataFrame
    clue_ablation: pd.DataFrame
    causal: bool

    def stage_row(self, table: str, layer: int) -> pd.Series:
        df = getattr(self, table)
        return df[df["layer"] == layer].iloc[0]


def _separation(states: torch.Tensor, words, senses, seed: int) -> dict[str, float]:
    """How well the final stage separates the senses (the intervention's metric)."""
    last = states.shape[1] - 1
    sim = sense_similarity(states, words, senses).iloc[last]
    acc = nearest_neighbour_probe(states, words, senses, seed=seed).iloc[last]
    return {
        "gap_centred": float(sim["gap_centred"]),
        "cross_sense": float(sim["cross_sense"]),
        "probe_accuracy": float(acc["accuracy"]),
    }


def sense_in(
    model: Any,
    data: pd.DataFrame | None = None,
    *,
    k: int = 6,
    n_random: int = 5,
    seed: int = 0,
) -> SenseInModel:
    """The bank-sense analyses of the module docstring, on ``data`` (default: the shipped set).

    Raises:
        InterpError: for a sentence where the word or the clue is missing, a clue
            after the word in a causal model, or text longer than the context.
    """
    data = ambiguous_words() if data is None else data.reset_index(drop=True)
    items = [encode_word(model, r.sentence, r.word, clue=r.clue) for r in data.itertuples()]
    words, senses = data["word"].tolist(), data["sense"].tolist()
    sentences = data.assign(
        n_tokens=[it.n_tokens for it in items],
        word_token=[it.str_tokens[it.word_pos] for it in items],
        word_n_tokens=[len(it.word_positions) for it in items],
        clue_distance=[it.word_positions[0] - it.clue_pos[-1] for it in items],
    )
    states = word_states(model, items)
    similarity = sense_similarity(states, words, senses)
    by_word = sense_similarity(states, words, senses, by_word=True)
    probe = nearest_neighbour_probe(states, words, senses, seed=seed)
    distant = [it for it, d in zip(items, sentences["clue_distance"]) if d > 1]
    heads = clue_attention(model, distant or items)
    heads.attrs["sentences"] = "clue not adjacent" if distant else "all"
    top = heads.nlargest(k, "clue_attention")["label"].tolist()
    groups = {"none (clean)": [], f"top {k} clue heads": top}
    groups.update(random_head_groups(model, top, k, n_random, seed))
    rows = []
    for name, hs in groups.items():
        edited = word_states(model, items, fwd_hooks=zero_head_hooks(model, hs)) if hs else states
        rows.append(
            {
                "group": name,
                "kind": "clean" if not hs else ("top clue" if name.startswith("top") else "random"),
                "heads": ",".join(hs),
                **_separation(edited, words, senses, seed),
            }
        )
    ablation = pd.DataFrame(rows)
    clean = ablation.iloc[0]
    for col in ("gap_centred", "probe_accuracy"):
        ablation[f"delta_{col}"] = ablation[col] - clean[col]
    return SenseInModel(
        sentences=sentences,
        items=items,
        similarity=similarity,
        similarity_by_word=by_word,
        probe=probe,
        clue_heads=heads,
        clue_ablation=ablation,
        causal=is_causal(model),
    )
