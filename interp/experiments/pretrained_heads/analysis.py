"""The pretrained-heads lab: the article's "watch real heads", on SmolLM2-135M and MiniLM-L6.

Two parts, each run on any model :func:`interp.models.load_model` gives:

1. :func:`induction_in`: induction heads on BOS + random ordinary word
   tokens (:func:`interp.analysis.senses.words.ordinary_word_ids`), repeated twice.
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
:func:`analyse` runs both parts on each model and keeps the attention
patterns the report draws; the report computes nothing.

Example:
    >>> from interp.models import load_model
    >>> found = induction_in(load_model("induction-2l"), half_len=20, k=2, n_random=1)
    >>> found.top["label"].tolist(), found.group_ablation["kind"].tolist()
    (['L1H1', 'L1H0'], ['top induction', 'random'])
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import pandas as pd
import torch

from interp.analysis.components.ablation import ablate_head_groups, zero_head_hooks
from interp.analysis.heads.composition import composition_scores
from interp.analysis.heads.patterns import attention_patterns
from interp.analysis.heads.scores import head_scores
from interp.analysis.heads.weight_circuits import copying_scores
from interp.analysis.senses.clue import clue_attention
from interp.analysis.senses.probe import nearest_neighbour_probe
from interp.analysis.senses.states import sense_similarity, word_states
from interp.analysis.senses.words import WordTokens, encode_word, ordinary_word_ids
from interp.core.checks import check_int, check_seed
from interp.core.errors import InterpError
from interp.core.metrics import loss_metric
from interp.core.protocol import HookedModel, ModelSource, bos_token_id, is_causal
from interp.datasets import RepeatedTokens, ambiguous_words, repeated_random_tokens
from interp.experiments import LABS
from interp.experiments.common import half_losses, load, progress_bar, random_head_groups
from interp.models.loader import check_model_name

NAME = "pretrained"
TITLE = "Real heads: induction and word sense in pretrained transformers"
DEFAULT_MODELS = LABS[NAME][2]


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


@dataclasses.dataclass(frozen=True)
class InductionInModel:
    """What :func:`induction_in` found (``None`` where the model has no meaningful logits)."""

    data: RepeatedTokens
    scores: pd.DataFrame
    top: pd.DataFrame
    causal: bool
    composition: pd.DataFrame
    str_tokens: list[str]  # the first sequence, for the attention widgets
    leader_patterns: torch.Tensor  # [head, q, k]: the best head of each stripe, first sequence
    leader_labels: list[str]
    top_patterns: torch.Tensor | None  # [k, q, k]: the top induction heads, first sequence
    losses: dict[str, float] | None = None
    group_ablation: pd.DataFrame | None = None
    copying: pd.DataFrame | None = None
    skipped: str | None = None


def induction_in(
    model: HookedModel,
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
    if 1 + 2 * half_len > (getattr(cfg, "n_ctx", None) or 1 + 2 * half_len):
        raise InterpError(f"a probe of 1 + 2 x {half_len} tokens exceeds n_ctx={cfg.n_ctx}")
    ids = ordinary_word_ids(model) if getattr(model, "tokenizer", None) is not None else None
    data = repeated_random_tokens(
        n, half_len, d_vocab=int(cfg.d_vocab), bos=bos_token_id(model), seed=seed, token_ids=ids
    )
    scores = head_scores(model, data.tokens)
    top = scores.nlargest(k, "induction").reset_index(drop=True)
    labels = top["label"].tolist()
    # weights only: meaningful with or without a language-model head
    composition = (
        composition_scores(model, component="K").nlargest(10, "score").reset_index(drop=True)
    )
    leaders = top_by_kind(scores)
    best = list(dict.fromkeys(leaders[leaders["rank"] == 1]["label"]))
    first = data.tokens[:1]
    common = dict(
        data=data,
        scores=scores,
        top=top,
        causal=is_causal(model),
        composition=composition,
        str_tokens=list(model.to_str_tokens(first[0])),
        leader_patterns=attention_patterns(model, first, heads=best)[0].cpu(),
        leader_labels=best,
    )
    if not getattr(model, "interp_logits_meaningful", True):
        return InductionInModel(
            **common,
            top_patterns=None,
            skipped="this model has no language-model head, so loss, ablation-by-loss and "
            "copying scores (which read the unembedding) are meaningless and skipped",
        )
    groups = {f"top {k} induction": labels, **random_head_groups(model, labels, k, n_random, seed)}
    ablation = ablate_head_groups(
        model, data.tokens, groups=groups, metric=loss_metric(data.loss_mask)
    )
    ablation.insert(1, "kind", ["top induction"] + ["random"] * n_random)
    ablation["strong_heads"] = [strong_heads(scores, hs.split(",")) for hs in ablation["heads"]]
    return InductionInModel(
        **common,
        top_patterns=attention_patterns(model, first, heads=labels)[0].cpu(),
        losses=half_losses(model, data),
        group_ablation=ablation,
        copying=copying_scores(model, heads=labels, top1=False).reset_index(drop=True),
    )


@dataclasses.dataclass(frozen=True)
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
    example_patterns: dict[int, torch.Tensor]  # sentence index -> [k, q, k] top clue heads
    top_clue_heads: list[str]


def _separation(states: torch.Tensor, words, senses, seed: int) -> dict[str, float]:
    """How well the final stage separates the senses (the intervention's metric)."""
    last = states.shape[1] - 1
    sim = sense_similarity(states, words=words, senses=senses).iloc[last]
    acc = nearest_neighbour_probe(states, words=words, senses=senses, seed=seed).iloc[last]
    return {
        "gap_centred": float(sim["gap_centred"]),
        "cross_sense": float(sim["cross_sense"]),
        "probe_accuracy": float(acc["accuracy"]),
    }


def sense_steps(n_random: int = 5) -> int:
    """Progress steps of :func:`sense_in`: states, probe, clue heads, then each ablation group."""
    return 3 + 2 + n_random


def sense_in(
    model: HookedModel,
    data: pd.DataFrame | None = None,
    *,
    k: int = 6,
    n_random: int = 5,
    seed: int = 0,
    bar: Any = None,
) -> SenseInModel:
    """The bank-sense analyses of the module docstring, on ``data`` (default: the shipped set).

    ``bar`` (a tqdm bar) advances by one at each of :func:`sense_steps` steps.

    Raises:
        InterpError: for a sentence where the word or the clue is missing, a clue
            after the word in a causal model, or text longer than the context.
    """
    data = ambiguous_words() if data is None else data.reset_index(drop=True)
    items = [encode_word(model, r.sentence, word=r.word, clue=r.clue) for r in data.itertuples()]
    words, senses = data["word"].tolist(), data["sense"].tolist()
    sentences = data.assign(
        n_tokens=[it.n_tokens for it in items],
        word_token=[it.str_tokens[it.word_pos] for it in items],
        word_n_tokens=[len(it.word_positions) for it in items],
        clue_distance=[it.word_positions[0] - it.clue_pos[-1] for it in items],
    )

    def step(what: str) -> None:
        if bar is not None:
            bar.set_postfix_str(what)
            bar.update()

    states = word_states(model, items)
    step("word sense: states")
    similarity = sense_similarity(states, words=words, senses=senses)
    by_word = sense_similarity(states, words=words, senses=senses, by_word=True)
    probe = nearest_neighbour_probe(states, words=words, senses=senses, seed=seed)
    step("word sense: probe")
    distant = [it for it, d in zip(items, sentences["clue_distance"]) if d > 1]
    heads = clue_attention(model, distant or items)
    step("word sense: clue heads")
    heads.attrs["sentences"] = "clue not adjacent" if distant else "all"
    top = heads.nlargest(k, "clue_attention")["label"].tolist()
    groups = {"none (clean)": [], f"top {k} clue heads": top}
    groups.update(random_head_groups(model, top, k, n_random, seed))
    rows = []
    for name, hs in groups.items():
        edited = (
            word_states(model, items, fwd_hooks=zero_head_hooks(model, heads=hs)) if hs else states
        )
        rows.append(
            {
                "group": name,
                "kind": "clean" if not hs else ("top clue" if name.startswith("top") else "random"),
                "heads": ",".join(hs),
                **_separation(edited, words, senses, seed),
            }
        )
        step(f"word sense: ablate {name}")
    ablation = pd.DataFrame(rows)
    clean = ablation.iloc[0]
    for col in ("gap_centred", "probe_accuracy"):
        ablation[f"delta_{col}"] = ablation[col] - clean[col]
    examples = [int(i) for i in sentences.index[sentences["word"] == "bank"][::2][:2]]
    patterns = {i: attention_patterns(model, items[i].tokens, heads=top)[0].cpu() for i in examples}
    return SenseInModel(
        sentences=sentences,
        items=items,
        similarity=similarity,
        similarity_by_word=by_word,
        probe=probe,
        clue_heads=heads,
        clue_ablation=ablation,
        causal=is_causal(model),
        example_patterns=patterns,
        top_clue_heads=top,
    )


@dataclasses.dataclass(frozen=True)
class ModelFindings:
    """One model's part of the lab."""

    name: str
    n_layers: int
    n_heads: int
    induction: InductionInModel
    sense: SenseInModel


@dataclasses.dataclass(frozen=True)
class PretrainedFindings:
    """The lab's findings: one :class:`ModelFindings` per model, in order."""

    seed: int
    k: int
    models: dict[str, ModelFindings]


def analyse(
    models: Sequence[ModelSource] = DEFAULT_MODELS,
    *,
    k: int = 6,
    seed: int = 0,
    progress: bool = False,
) -> PretrainedFindings:
    """Both parts of the lab for each model (aliases, folders or loaded models).

    Every name is checked before any model loads. Shows a progress bar
    (per model: load, induction, and each step of the word-sense part).

    Raises:
        InterpError: for no models, an unknown name, or a model without a fast
            Hugging Face tokenizer (the sense part reads real text).
    """

    seed, k = check_seed(seed), check_int(k, "k", minimum=1)
    models = list(models)
    if not models:
        raise InterpError("no models given; name at least one of " + ", ".join(DEFAULT_MODELS))
    for m in models:  # every name, before any slow work
        if isinstance(m, (str, os.PathLike)):
            check_model_name(m)
    out: dict[str, ModelFindings] = {}
    bar = progress_bar((2 + sense_steps()) * len(models), progress, "pretrained lab")
    for m in models:
        bar.set_postfix_str(
            f"{os.fspath(m) if isinstance(m, (str, os.PathLike)) else 'model'}: loading"
        )
        model, name = load(m)
        if not getattr(getattr(model, "tokenizer", None), "is_fast", False):
            raise InterpError(
                f"{name} has no Hugging Face tokenizer; the pretrained lab needs real text "
                f"models ({', '.join(DEFAULT_MODELS)} or a local Hugging Face folder)"
            )
        bar.update()
        bar.set_postfix_str(f"{name}: induction")
        ind = induction_in(model, k=k, seed=seed)
        bar.update()
        sense = sense_in(model, k=k, seed=seed, bar=bar)
        out[name] = ModelFindings(
            name=name,
            n_layers=model.cfg.n_layers,
            n_heads=model.cfg.n_heads,
            induction=ind,
            sense=sense,
        )
    bar.close()
    return PretrainedFindings(seed=seed, k=k, models=out)


def tables(f: PretrainedFindings) -> dict[str, pd.DataFrame]:
    """Every table, named ``<model>_<table>``."""
    out = {}
    for name, mf in f.models.items():
        stem = name.replace("/", "_")
        ind, sense = mf.induction, mf.sense
        parts = {
            "induction_scores": ind.scores,
            "induction_top": ind.top,
            "head_leaders": top_by_kind(ind.scores),
            "induction_composition_k": ind.composition,
            "sense_sentences": sense.sentences,
            "sense_similarity": sense.similarity,
            "sense_similarity_by_word": sense.similarity_by_word,
            "sense_probe": sense.probe,
            "clue_heads": sense.clue_heads,
            "clue_ablation": sense.clue_ablation,
        }
        if ind.losses is not None:
            parts["induction_losses"] = pd.DataFrame([ind.losses])
        if ind.group_ablation is not None:
            parts["induction_ablation"] = ind.group_ablation
        if ind.copying is not None:
            parts["induction_copying"] = ind.copying
        out.update({f"{stem}_{k}": v for k, v in parts.items()})
    return out
