"""The induction lab: find, and test, the induction circuit of a trained two-layer model.

On held-out repeated sequences (segment lengths never used in training) this
computes, for the shipped checkpoint or any model passed in:

1. per-head previous-token, induction and duplicate-token scores;
2. the previous-token head (best layer-0 previous-token score) and the
   induction head (best layer-1 induction score);
3. K-composition scores between every layer-0 and layer-1 head, against the
   random baseline, and the K-composition circuit through the chosen pair
   (fraction of query tokens whose best key is the one preceded by the same token);
4. each head's OV copying score and how often a token's top output is itself;
5. first-half vs repeated-half loss, and the in-context-learning score;
6. zero-ablation of every head alone, and of the two chosen heads together.

A high attention score names a *hypothesis*; the ablations test it. A head can
attend like an induction head and do nothing (its output projection may be
near zero), which is why the lab reports both.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pandas as pd
import torch

from interp.analysis.ablation import ablate_head_groups, ablate_heads
from interp.analysis.circuits import copying_scores, diagonal_fraction, k_composition_circuit
from interp.analysis.composition import composition_scores
from interp.analysis.icl import half_losses, in_context_learning_score
from interp.analysis.induction import head_scores
from interp.datasets import BOS, HELD_OUT_LENGTHS, RepeatedTokens, repeated_random_tokens
from interp.datasets import repeated_tokens as make_repeated
from interp.errors import InterpError
from interp.hooks import head_label

EVAL_SEED = 20_000  # distinct from the training run's own held-out batch


@dataclasses.dataclass
class InductionFindings:
    """Everything the induction lab computes (tables are tidy DataFrames)."""

    data: RepeatedTokens
    scores: pd.DataFrame
    prev_head: tuple[int, int]
    induction_head: tuple[int, int]
    composition: pd.DataFrame
    composition_q: pd.DataFrame
    composition_v: pd.DataFrame
    kcomp_diagonal_fraction: float
    copying: pd.DataFrame
    losses: dict[str, float]
    icl: dict[str, float]
    ablation: pd.DataFrame
    group_ablation: pd.DataFrame

    @property
    def prev_label(self) -> str:
        return head_label(*self.prev_head)

    @property
    def induction_label(self) -> str:
        return head_label(*self.induction_head)

    def score_of(self, head: tuple[int, int], column: str) -> float:
        row = self.scores[(self.scores["layer"] == head[0]) & (self.scores["head"] == head[1])]
        return float(row[column].iloc[0])

    def summary(self) -> pd.DataFrame:
        """The lab's claims as one table: quantity, value, and what it is compared against."""
        kc = self.composition
        top = kc.loc[kc["score"].idxmax()]
        abl = self.ablation.set_index("label")
        least = abl["delta"].abs().idxmin()
        copy = self.copying.set_index("label").loc[self.induction_label]
        rows = [
            ("previous-token head", self.prev_label, "best layer-0 previous-token score"),
            ("previous-token score", self.score_of(self.prev_head, "previous_token"), "> 0.8"),
            ("induction head", self.induction_label, "best layer-1 induction score"),
            ("induction score", self.score_of(self.induction_head, "induction"), "> 0.8"),
            (
                "top K-composition pair",
                f"{top['src_label']} -> {top['label']}",
                f"{self.prev_label} -> {self.induction_label}",
            ),
            (
                "top K-composition score",
                float(top["score"]),
                f"baseline {float(top['baseline']):.3f}",
            ),
            ("K-circuit diagonal fraction", self.kcomp_diagonal_fraction, "1.0 = perfect"),
            ("induction head copying score", float(copy["copying_score"]), "close to 1"),
            ("induction head top-1 self fraction", float(copy["top1_self_fraction"]), "> 0.5"),
            ("first-half loss", self.losses["first_half"], f"log(63) = {math.log(63):.3f}"),
            ("repeated-half loss", self.losses["repeated"], "near 0"),
            (
                "ablate induction head: delta loss",
                float(abl.loc[self.induction_label, "delta"]),
                "> 1 nat",
            ),
            (
                "ablate previous-token head: delta loss",
                float(abl.loc[self.prev_label, "delta"]),
                "> 1 nat",
            ),
            (
                f"ablate least important head ({least}): delta loss",
                float(abl.loc[least, "delta"]),
                "much less than 1 nat",
            ),
            ("in-context learning score", self.icl["score"], "< 0 (late loss below early)"),
        ]
        return pd.DataFrame(rows, columns=["quantity", "value", "reference"]).astype(
            {"value": object}
        )


def eval_data(
    model: Any, *, n: int = 256, seed: int = EVAL_SEED, lengths: tuple[int, ...] = HELD_OUT_LENGTHS
) -> RepeatedTokens:
    """Held-out repeated sequences for ``model`` (two copies, random filler)."""
    cfg = model.cfg
    if cfg.n_ctx is None:
        raise InterpError("the induction lab needs a model with a fixed context (n_ctx)")
    return make_repeated(
        n, d_vocab=cfg.d_vocab, seq_len=cfg.n_ctx, segment_lengths=lengths, seed=seed
    )


def analyse(model: Any, data: RepeatedTokens | None = None) -> InductionFindings:
    """Run the whole lab on ``model`` (see the module docstring).

    Raises:
        InterpError: for a model with fewer than two layers.
    """
    cfg = model.cfg
    if cfg.n_layers < 2:
        raise InterpError("the induction lab needs a model with at least two layers")
    data = data or eval_data(model)
    scores = head_scores(model, data.tokens, query_mask=data.loss_mask)
    first = scores[scores.layer == 0]
    last = scores[scores.layer == cfg.n_layers - 1]
    p = first.loc[first["previous_token"].idxmax()]
    i = last.loc[last["induction"].idxmax()]
    prev_head = (int(p["layer"]), int(p["head"]))
    ind_head = (int(i["layer"]), int(i["head"]))
    with torch.no_grad():
        kfrac = diagonal_fraction(k_composition_circuit(model, prev_head, ind_head), exclude=[BOS])
    losses = half_losses(model, data)
    probe = repeated_random_tokens(
        data.tokens.shape[0], (cfg.n_ctx - 1) // 2, d_vocab=cfg.d_vocab, seed=EVAL_SEED + 1
    )
    ablation = ablate_heads(model, data.tokens, positions=data.loss_mask)
    groups = {
        "previous-token + induction": [prev_head, ind_head],
        "previous-token head": [prev_head],
        "induction head": [ind_head],
        f"all layer-{cfg.n_layers - 1} heads": [(cfg.n_layers - 1, h) for h in range(cfg.n_heads)],
    }
    group_ablation = ablate_head_groups(model, data.tokens, groups, positions=data.loss_mask)
    return InductionFindings(
        data=data,
        scores=scores,
        prev_head=prev_head,
        induction_head=ind_head,
        composition=composition_scores(model, "K"),
        composition_q=composition_scores(model, "Q"),
        composition_v=composition_scores(model, "V"),
        kcomp_diagonal_fraction=kfrac,
        copying=copying_scores(model),
        losses=losses,
        icl=in_context_learning_score(model, probe.tokens),
        ablation=ablation,
        group_ablation=group_ablation,
    )


def example_sequence(findings: InductionFindings, index: int = 0) -> torch.Tensor:
    """One held-out sequence ``[1, pos]`` to draw attention patterns on."""
    return findings.data.tokens[index : index + 1]
