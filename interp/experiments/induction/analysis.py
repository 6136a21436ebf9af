"""The induction lab: find, and test, the induction circuit of a trained two-layer model.

On held-out repeated sequences (segment lengths never used in training) this
computes, for the shipped checkpoint or any model with a fixed context:

1. per-head previous-token, induction and duplicate-token scores, and the key
   heads' scores in all three conventions (interp, TransformerLens, ARENA);
2. the previous-token head (best layer-0 previous-token score) and the
   induction head (best last-layer induction score);
3. K-composition scores between every earlier and later head, against the
   random baseline, and the K-composition circuit through the chosen pair
   (fraction of query tokens whose best key is the one preceded by the same token);
4. each head's OV copying score; the previous-token head's positional circuit
   with LayerNorm folded in and on the raw weights;
5. first-half vs repeated-half loss, loss per position with each key head
   ablated (the induction bump), and the in-context-learning score;
6. zero-ablation of every head alone, and of the key heads together;
7. why the induction head attends: its score on each prompt's induction target
   split exactly into (query piece, key piece) pairs, the top writers of each
   side checked by intervention (:mod:`.why_attend`);
8. what the model writes without the induction head: the repeated half continued
   greedily, clean and ablated (:mod:`.continuation`).

A high attention score names a *hypothesis*; the ablations test it. A head can
attend like an induction head and do nothing (its output projection may be
near zero), which is why the lab reports both.

Example (the held-out data; :func:`analyse` runs the lab):
    >>> from interp.models import load_model
    >>> data = eval_data(load_model("induction-2l"), n=4)
    >>> data.tokens.shape, sorted(set(data.segment_len.tolist())) <= [8, 12, 16]
    (torch.Size([4, 48]), True)
"""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import torch

from interp.analysis.components.ablation import ablate_head_groups, ablate_heads, zero_head_hooks
from interp.analysis.components.lens import logit_lens
from interp.analysis.heads.composition import composition_scores
from interp.analysis.heads.icl import in_context_learning_score, per_token_loss
from interp.analysis.heads.patterns import attention_patterns
from interp.analysis.heads.scores import head_scores
from interp.analysis.heads.stripes import CONVENTIONS
from interp.analysis.heads.weight_circuits import (
    copying_scores,
    diagonal_fraction,
    k_composition_circuit,
    previous_position_attention,
    qk_circuit,
)
from interp.core.errors import InterpError
from interp.core.hooks import head_label
from interp.core.metrics import next_token_nll
from interp.core.protocol import HookedModel, ModelSource
from interp.datasets import BOS, HELD_OUT_LENGTHS, RepeatedTokens, repeated_random_tokens
from interp.datasets import repeated_tokens as make_repeated
from interp.experiments.common import half_losses, load, progress_bar
from interp.experiments.induction.continuation import continuation, summary_row
from interp.experiments.induction.features import (
    WhyInFeatures,
    feature_summary_rows,
    lab_dictionary,
    why_in_features,
)
from interp.experiments.induction.why_attend import WhyAttend, summary_rows, why_attend

NAME = "induction"
TITLE = "Induction heads in a two-layer attention-only model"
EVAL_SEED = 20_000  # distinct from the training run's own held-out batch


@dataclasses.dataclass(frozen=True)
class InductionFindings:
    """Everything the induction lab computes and its report shows."""

    model_name: str
    n_layers: int
    n_heads: int
    d_vocab: int
    seed: int
    data: RepeatedTokens
    scores: pd.DataFrame
    conventions: pd.DataFrame
    prev_head: tuple[int, int]
    induction_head: tuple[int, int]
    composition: pd.DataFrame
    composition_q: pd.DataFrame
    composition_v: pd.DataFrame
    kcomp_diagonal_fraction: float
    positional: pd.DataFrame
    copying: pd.DataFrame
    losses: dict[str, float]
    loss_by_position: pd.DataFrame
    icl: pd.DataFrame
    ablation: pd.DataFrame
    group_ablation: pd.DataFrame
    example_tokens: list[str]
    example_patterns: torch.Tensor  # [layer * head, query_pos, key_pos]
    probe_size: int
    lens: pd.DataFrame  # per stage and half: the next token's probability and rank
    why: WhyAttend  # the induction head's score on its targets, split by QK attribution
    features: WhyInFeatures  # the same score over the previous-token layer's features
    continued: pd.DataFrame  # the repeated half continued, clean and without the induction head

    @property
    def prev_label(self) -> str:
        return head_label(*self.prev_head)

    @property
    def induction_label(self) -> str:
        return head_label(*self.induction_head)

    def score_of(self, head: tuple[int, int], column: str) -> float:
        row = self.scores[(self.scores["layer"] == head[0]) & (self.scores["head"] == head[1])]
        return float(row[column].iloc[0])

    def summary_table(self) -> pd.DataFrame:
        """The lab's claims as one table: quantity, value, and what it is compared against."""
        kc = self.composition
        top = kc.loc[kc["score"].idxmax()]
        abl = self.ablation.set_index("label")
        least = abl["effect"].abs().idxmin()
        copy = self.copying.set_index("label").loc[self.induction_label]
        icl = float(self.icl["score"].iloc[0])
        rows = [
            ("previous-token head", self.prev_label, "best layer-0 previous-token score"),
            ("previous-token score", self.score_of(self.prev_head, "previous_token"), "> 0.8"),
            ("induction head", self.induction_label, "best last-layer induction score"),
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
            (
                "first-half loss",
                self.losses["first_half"],
                f"log({self.d_vocab - 1}) = {math.log(self.d_vocab - 1):.3f} (uniform guess)",
            ),
            ("repeated-half loss", self.losses["repeated"], "near 0"),
            (
                "ablate induction head: effect on the loss",
                float(abl.loc[self.induction_label, "effect"]),
                "> 1 nat",
            ),
            (
                "ablate previous-token head: effect on the loss",
                float(abl.loc[self.prev_label, "effect"]),
                "> 1 nat",
            ),
            (
                f"ablate least important head ({least}): effect on the loss",
                float(abl.loc[least, "effect"]),
                "much less than 1 nat",
            ),
            ("in-context learning score", icl, "< 0 (late loss below early)"),
            summary_row(self.continued, self.induction_label),
            *summary_rows(self.why, self.induction_label, self.prev_label),
            *feature_summary_rows(self.features, self.induction_label, self.prev_label),
        ]
        return pd.DataFrame(rows, columns=["quantity", "value", "reference"]).astype(
            {"value": object}
        )


def eval_data(
    model: HookedModel,
    *,
    n: int = 256,
    seed: int = EVAL_SEED,
    lengths: tuple[int, ...] = HELD_OUT_LENGTHS,
) -> RepeatedTokens:
    """Held-out repeated sequences for ``model`` (two copies, random filler).

    Raises:
        InterpError: for a model without a fixed context.
    """
    cfg = model.cfg
    if cfg.n_ctx is None:
        raise InterpError("the induction lab needs a model with a fixed context (n_ctx)")
    return make_repeated(
        n, d_vocab=cfg.d_vocab, seq_len=cfg.n_ctx, segment_lengths=lengths, seed=seed
    )


def _conventions(
    model: HookedModel, probe: torch.Tensor, heads: dict[str, tuple[int, int]]
) -> pd.DataFrame:
    """The key heads' scores on the classic probe, in every convention (one forward pass)."""
    with torch.no_grad():
        _, cache = model.run_with_cache(probe, names_filter=lambda n: n.endswith("hook_pattern"))
    rows = []
    for convention in CONVENTIONS:
        df = head_scores(model, probe, convention=convention, cache=cache).set_index("label")
        for role, head in heads.items():
            for stripe in ("previous_token", "induction", "duplicate_token"):
                rows.append(
                    {
                        "convention": convention,
                        "role": role,
                        "label": head_label(*head),
                        "stripe": stripe,
                        "score": float(df.loc[head_label(*head), stripe]),
                    }
                )
    return pd.DataFrame(rows)


def _loss_by_position(
    model: HookedModel, probe: RepeatedTokens, heads: dict[str, tuple[int, int]]
) -> pd.DataFrame:
    """Mean loss at each predicting position, clean and with each key head zero-ablated."""
    columns = {"clean": per_token_loss(model, probe.tokens).mean(0)}
    with torch.no_grad():
        for role, head in heads.items():
            logits = model.run_with_hooks(
                probe.tokens, fwd_hooks=zero_head_hooks(model, heads=[head])
            )
            columns[f"{role} {head_label(*head)} ablated"] = next_token_nll(
                logits, probe.tokens
            ).mean(0)
    n = probe.tokens.shape[1] - 1
    df = pd.DataFrame({"position": range(n), **{k: v.cpu().numpy() for k, v in columns.items()}})
    first = probe.first_half_mask[0, :n].tolist()
    repeated = probe.loss_mask[0, :n].tolist()
    df.insert(
        1, "half", ["first" if f else "repeated" if r else "other" for f, r in zip(first, repeated)]
    )
    return df


def analyse(
    model: ModelSource = "induction-2l", *, seed: int = 0, progress: bool = False
) -> InductionFindings:
    """Run the whole lab on ``model`` (alias, folder or loaded model); see the module docstring.

    ``seed`` moves the held-out sequences and the probes (seed 0 gives the
    numbers quoted on the labs page, ``docs/labs/index.md``).

    Raises:
        InterpError: for a model with fewer than two layers or no fixed context.
    """
    model, name = load(model)
    cfg = model.cfg
    if cfg.n_layers < 2:
        raise InterpError("the induction lab needs a model with at least two layers")
    bar = progress_bar(8, progress, "induction lab")
    data = eval_data(model, seed=EVAL_SEED + seed)
    scores = head_scores(model, data.tokens, loss_mask=data.loss_mask)
    first = scores[scores.layer == 0]
    last = scores[scores.layer == cfg.n_layers - 1]
    p = first.loc[first["previous_token"].idxmax()]
    i = last.loc[last["induction"].idxmax()]
    prev_head, ind_head = (int(p["layer"]), int(p["head"])), (int(i["layer"]), int(i["head"]))
    key = {"previous-token": prev_head, "induction": ind_head}
    # The classic probe (BOS, L random tokens, the same L), at a held-out segment length,
    # and aligned sequences (no prefix) for the loss at each position.
    half = min(max(HELD_OUT_LENGTHS), (cfg.n_ctx - 1) // 2)
    probe = repeated_random_tokens(64, half, d_vocab=cfg.d_vocab, seed=EVAL_SEED + 1 + seed)
    aligned = make_repeated(
        64,
        d_vocab=cfg.d_vocab,
        seq_len=cfg.n_ctx,
        segment_lengths=(half,),
        max_prefix=0,
        seed=EVAL_SEED + 2 + seed,
    )
    bar.update()
    conventions = _conventions(model, probe.tokens, key)
    bar.update()
    with torch.no_grad():
        kfrac = diagonal_fraction(
            k_composition_circuit(model, prev=prev_head, induction=ind_head), exclude=[BOS]
        )
        positional = pd.DataFrame(
            [
                {
                    "label": head_label(*prev_head),
                    "ln_folded": fold,
                    "previous_position_attention": previous_position_attention(
                        qk_circuit(
                            model,
                            layer=prev_head[0],
                            head=prev_head[1],
                            embedding="positional",
                            fold_ln=fold,
                        )
                    ),
                }
                for fold in (True, False)
            ]
        )
    comp = {c: composition_scores(model, component=c) for c in ("K", "Q", "V")}
    bar.update()
    copying = copying_scores(model)
    losses = half_losses(model, data)
    icl = in_context_learning_score(model, probe.tokens)
    bar.update()
    curves = _loss_by_position(model, aligned, key)
    bar.update()
    ablation = ablate_heads(model, data.tokens, loss_mask=data.loss_mask)
    bar.update()
    groups = {
        "previous-token + induction": [prev_head, ind_head],
        "previous-token head": [prev_head],
        "induction head": [ind_head],
        f"all layer-{cfg.n_layers - 1} heads": [(cfg.n_layers - 1, h) for h in range(cfg.n_heads)],
    }
    group_ablation = ablate_head_groups(model, data.tokens, groups=groups, loss_mask=data.loss_mask)
    bar.update()
    example = data.tokens[:1]
    labels = ["BOS" if j == 0 else t for j, t in enumerate(model.to_str_tokens(example[0]))]
    pats = attention_patterns(model, example)[0].cpu()  # [layer * head, q, k], layer-major
    lens = lens_by_half(model, data)
    why = why_attend(model, data, ind_head)
    in_features = why_in_features(model, data, ind_head, lab_dictionary(model, name, prev_head[0]))
    continued = continuation(model, ind_head, seed=seed)
    bar.update()
    bar.close()
    return InductionFindings(
        model_name=name,
        n_layers=cfg.n_layers,
        n_heads=cfg.n_heads,
        d_vocab=int(cfg.d_vocab),
        seed=seed,
        data=data,
        scores=scores,
        conventions=conventions,
        prev_head=prev_head,
        induction_head=ind_head,
        composition=comp["K"],
        composition_q=comp["Q"],
        composition_v=comp["V"],
        kcomp_diagonal_fraction=kfrac,
        positional=positional,
        copying=copying,
        losses=losses,
        loss_by_position=curves,
        icl=icl,
        ablation=ablation,
        group_ablation=group_ablation,
        example_tokens=labels,
        example_patterns=pats,
        probe_size=int(probe.tokens.shape[0]),
        lens=lens,
        why=why,
        features=in_features,
        continued=continued,
    )


def lens_by_half(model: HookedModel, data: RepeatedTokens) -> pd.DataFrame:
    """The logit lens over the held-out sequences, summarised per stage for the first half
    (unpredictable) and the repeated half: the next token's mean probability, median rank
    and how often it is the top prediction."""
    lens = logit_lens(model, data.tokens, k=1)
    b, n = data.tokens.shape
    halves = {"repeated": data.loss_mask, "first half": data.first_half_mask}
    rows = []
    for stage, at in lens.groupby("stage", sort=True):
        seq, pos = at["sequence"].to_numpy(), at["position"].to_numpy()
        for half, mask in halves.items():
            pick = mask[:, :-1].cpu().numpy()[seq, pos.clip(max=n - 2)] & (pos < n - 1)
            sel = at[pick]
            rows.append(
                {
                    "stage": int(stage),
                    "stage_name": str(sel["stage_name"].iloc[0]),
                    "half": half,
                    "next_token_p": float(sel["target_p"].mean()),
                    "median_rank": float(sel["target_rank"].astype(float).median()),
                    "top1_fraction": float((sel["target_rank"] == 1).mean()),
                    "predictions": len(sel),
                }
            )
    out = pd.DataFrame(rows)
    out.attrs.update(lens.attrs)
    out.attrs["analysis"] = "logit_lens, summarised per stage and half"
    return out


def tables(f: InductionFindings) -> dict[str, pd.DataFrame]:
    """The lab's tables by name (tidy: one row per head, pair, position or claim)."""
    return {
        "summary": f.summary_table().astype({"value": str}),
        "head_scores": f.scores,
        "score_conventions": f.conventions,
        "composition_k": f.composition,
        "composition_q": f.composition_q,
        "composition_v": f.composition_v,
        "positional_circuit": f.positional,
        "copying": f.copying,
        "ablation": f.ablation,
        "group_ablation": f.group_ablation,
        "loss_by_position": f.loss_by_position,
        "losses": pd.DataFrame([{**f.losses, **{f"icl_{k}": v for k, v in f.icl.iloc[0].items()}}]),
        "logit_lens": f.lens,
        "qk_per_prompt": f.why.per_prompt,
        "qk_pairs": f.why.pairs,
        "qk_sides": f.why.sides,
        "qk_interventions": f.why.interventions,
        "qk_features_per_prompt": f.features.per_prompt,
        "qk_feature_meanings": f.features.meanings,
        "qk_feature_removals": f.features.removals,
        "continuation": f.continued,
    }
