"""The name-mover lab: which heads move the indirect object's name to the answer, in SmolLM2.

ARENA's indirect-object-identification exercises need GPT-2 from the hub;
this lab runs offline on SmolLM2-135M. Prompts such as "When Mary and John
went to the store, John gave a drink to" are answered with the indirect
object (`` Mary``); the corrupted twin repeats the other name ("..., Mary gave
a drink to") so the answer flips (:func:`interp.datasets.name_mover_prompts`).

1. The model must do the task first: the logit difference IO - S and the
   fraction of prompts it gets right, per template (train and held-out); a
   template the model fails is dropped, and the report says so.
2. Exact activation patching of every head (:func:`interp.analysis.patch_heads`),
   denoising: the clean head output spliced into the corrupted run, as a fraction
   of the clean-minus-corrupted logit difference it restores; and attribution
   patching (:func:`interp.analysis.attribute_heads`, the same direction) beside
   it, with their agreement (Spearman correlation, overlap of the top heads).
3. The top heads' attention from the final position to the names (a name
   mover would attend to the indirect object; the figure says where these heads look).
4. The top heads mean-ablated together on the clean prompts against random
   sets of as many heads.
5. Why the top heads that look at S2 prefer it to IO: ``s[END, S2] - s[END, IO]``
   split exactly by QK attribution into query-side and key-side writers, each
   checked by removing it from the head's query or key input (:mod:`.why_attend`).

Example (on a random model, so the numbers mean nothing; the lab runs SmolLM2):
    >>> from interp.models.hf import random_gpt2
    >>> model = random_gpt2(2, vocab=30)
    >>> p = name_mover_prompts(4, tokenizer=model.tokenizer,
    ...                        templates=["t2 {A} t3 {B} t4 {S} t5"], names=["t10", "t11", "t12"])
    >>> p.texts[0], logit_diffs(model, p).shape
    ('t2 t12 t3 t10 t4 t10 t5', torch.Size([4]))
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import torch

from interp.analysis.components.ablation import ablate_head_groups
from interp.analysis.components.attribution import attribute_heads, estimate_agreement
from interp.analysis.components.dla import direct_logit_attribution
from interp.analysis.components.lens import logit_lens
from interp.analysis.components.patching import patch_heads
from interp.analysis.heads.patterns import attention_patterns
from interp.core.checks import check_int, check_seed
from interp.core.errors import InterpError
from interp.core.metrics import logit_diff_metric
from interp.core.protocol import HookedModel, ModelSource, eval_no_grad
from interp.datasets import NameMoverPrompts, name_mover_prompts, name_mover_templates
from interp.experiments.common import load, progress_bar, random_head_groups
from interp.experiments.name_movers.why_attend import WhyAttend, s2_heads, why_attend

NAME = "name-movers"
TITLE = "Name movers: indirect-object identification in SmolLM2-135M"
MIN_LOGIT_DIFF = 0.5  # a template is kept when the model's mean logit difference exceeds this
MIN_CORRECT = 0.6  # ... and it gets at least this fraction of prompts right
# Patching and attribution splice the clean run's head outputs into the corrupted run:
# "restored" is the share of the clean - corrupted logit difference a head brings back.
DIRECTION = "denoising"


@dataclasses.dataclass(frozen=True)
class NameMoverFindings:
    """Everything the name-mover lab computes and its report shows."""

    model_name: str
    n_layers: int
    n_heads: int
    seed: int
    prompts: NameMoverPrompts
    performance: pd.DataFrame
    dropped: list[str]
    patching: pd.DataFrame
    attribution: pd.DataFrame
    agreement: pd.DataFrame
    top_heads: list[str]
    name_attention: pd.DataFrame
    group_ablation: pd.DataFrame
    example_tokens: list[str]
    example_patterns: torch.Tensor  # [k, q, k] the top heads on prompt 0
    dla: pd.DataFrame  # direct logit attribution of IO - S, every head, clean prompts
    lens_final: pd.DataFrame  # per stage, final position: IO's and S's probability and rank
    lens_example: pd.DataFrame  # the lens over every position of prompt 0, target IO
    why: WhyAttend  # why the top heads that look at S2 prefer it to IO (QK attribution)

    @property
    def clean_logit_diff(self) -> float:
        return float(self.patching["clean"].iloc[0])

    @property
    def corrupted_logit_diff(self) -> float:
        return float(self.patching["corrupted"].iloc[0])

    @property
    def direction(self) -> str:
        """Which run the patching edited (``"denoising"``: the corrupted one)."""
        return str(self.patching.attrs.get("direction", DIRECTION))


def logit_diffs(
    model: HookedModel, prompts: NameMoverPrompts, *, corrupted: bool = False
) -> torch.Tensor:
    """``[n]`` per-prompt logit difference ``logit[io] - logit[s]`` at the last position."""
    tokens = prompts.corrupted if corrupted else prompts.clean
    with eval_no_grad(model):
        last = model(tokens)[:, -1].float()
    rows = torch.arange(len(prompts))
    return (last[rows, prompts.io_ids] - last[rows, prompts.s_ids]).cpu()


def check_performance(
    model: HookedModel, *, n_per_template: int = 8, seed: int = 0
) -> pd.DataFrame:
    """Per template (train and held-out): mean logit difference, fraction right, kept or not."""
    rows = []
    for split in ("train", "held_out"):
        for template in name_mover_templates(split):
            p = name_mover_prompts(
                n_per_template, seed=seed, tokenizer=model.tokenizer, templates=[template]
            )
            ld = logit_diffs(model, p)
            mean, right = float(ld.mean()), float((ld > 0).float().mean())
            kept = mean > MIN_LOGIT_DIFF and right >= MIN_CORRECT
            rows.append(
                {
                    "split": split,
                    "template": template,
                    "prompts": len(p),
                    "mean_logit_diff": mean,
                    "fraction_correct": right,
                    "corrupted_logit_diff": float(logit_diffs(model, p, corrupted=True).mean()),
                    "kept": kept,
                    "reason": ""
                    if kept
                    else f"mean logit difference {mean:.2f} or accuracy {right:.2f} too low",
                }
            )
    return pd.DataFrame(rows)


def _name_attention(
    pats: torch.Tensor, prompts: NameMoverPrompts, heads: list[str]
) -> pd.DataFrame:
    """Mean attention from the final position to IO, S1 and S2, per head. ``pats [b, k, q, k]``."""
    last = pats[:, :, -1]  # [batch, head, key]
    rows = torch.arange(len(prompts))
    out = []
    for i, label in enumerate(heads):
        a = last[:, i]
        out.append(
            {
                "label": label,
                "to_io": float(a[rows, prompts.io_pos].mean()),
                "to_s1": float(a[rows, prompts.s1_pos].mean()),
                "to_s2": float(a[rows, prompts.s2_pos].mean()),
            }
        )
    return pd.DataFrame(out)


def _lens_at_final(model: HookedModel, prompts: NameMoverPrompts) -> pd.DataFrame:
    """The logit lens at the final position, per stage: the mean probability and median
    rank of the indirect object (the answer) and of the subject, over the prompts."""
    per = {}
    for who, ids in (("io", prompts.io_ids), ("s", prompts.s_ids)):
        lens = logit_lens(model, prompts.clean, at=[-1], k=1, target=ids)
        per[who] = lens.groupby("stage", sort=True)
    rows = []
    for (stage, io), (_, sj) in zip(per["io"], per["s"]):
        rows.append(
            {
                "stage": int(stage),
                "stage_name": str(io["stage_name"].iloc[0]),
                "p_io": float(io["target_p"].mean()),
                "p_s": float(sj["target_p"].mean()),
                "rank_io": float(io["target_rank"].astype(float).median()),
                "rank_s": float(sj["target_rank"].astype(float).median()),
                "io_above_s": float((io["target_p"].to_numpy() > sj["target_p"].to_numpy()).mean()),
            }
        )
    return pd.DataFrame(rows)


DIRECT_SHARE = 0.1  # a head "writes the answer directly" when its DLA is this share of the total


def direct_verdicts(f: NameMoverFindings, k: int = 3) -> pd.DataFrame:
    """For the top ``k`` heads by patching: their direct logit attribution, its rank among
    heads, its share of the clean logit difference, and what that says (from the numbers)."""
    heads = f.dla[f.dla["component"] == "head"].set_index("label")["value"]
    order = heads.rank(ascending=False).astype(int)
    total = float(f.dla.attrs["total"])
    rows = []
    for r in f.patching.nlargest(k, "normalized").itertuples():
        value = float(heads[r.label])
        share = value / total if total else float("nan")
        if share >= DIRECT_SHARE:
            says = "writes the answer directly"
        elif share <= -DIRECT_SHARE:
            says = "writes against the answer directly"
        else:
            says = "writes little directly: its effect goes through later components"
        rows.append(
            {
                "label": r.label,
                "patching_restored": float(r.normalized),
                "dla": value,
                "dla_rank": int(order[r.label]),
                "dla_share": share,
                "verdict": says,
            }
        )
    return pd.DataFrame(rows)


def analyse(
    model: ModelSource = "smollm2-135m",
    *,
    n: int = 12,
    k: int = 5,
    n_random: int = 5,
    seed: int = 0,
    progress: bool = False,
) -> NameMoverFindings:
    """Run the lab (module docstring) on ``n`` training prompts.

    Raises:
        InterpError: for a model without a Hugging Face tokenizer, or one that
            fails every template.
    """
    seed, n, k = check_seed(seed), check_int(n, "n", minimum=2), check_int(k, "k", minimum=1)
    model, name = load(model)
    if getattr(model, "tokenizer", None) is None:
        raise InterpError(f"{name} has no tokenizer; the name-mover lab reads real text")
    bar = progress_bar(6, progress, "name-mover lab")
    performance = check_performance(model, seed=seed)
    train = performance[performance["split"] == "train"]
    kept = train[train["kept"]]["template"].tolist()
    dropped = train[~train["kept"]]["template"].tolist()
    if not kept:
        raise InterpError(f"{name} fails every name-mover template; nothing to analyse")
    prompts = name_mover_prompts(n, seed=seed, tokenizer=model.tokenizer, templates=kept)
    metric = logit_diff_metric(prompts.io_ids, prompts.s_ids)
    bar.update()
    patching = patch_heads(
        model, prompts.clean, corrupted_tokens=prompts.corrupted, metric=metric,
        direction=DIRECTION, progress=progress,
    )  # fmt: skip
    bar.update()
    attribution = attribute_heads(
        model, prompts.clean, ablation="patch", direction=DIRECTION,
        corrupted_tokens=prompts.corrupted, metric=metric,
    )  # fmt: skip
    bar.update()
    top = patching.nlargest(k, "normalized")["label"].tolist()
    pats = attention_patterns(model, prompts.clean, heads=top).cpu()
    name_att = _name_attention(pats, prompts, top)
    why = why_attend(model, prompts, s2_heads(patching, name_att))
    bar.update()
    groups = {f"top {k} by patching": top, **random_head_groups(model, top, k, n_random, seed)}
    ablation = ablate_head_groups(
        model, prompts.clean, groups=groups, ablation="mean", metric=metric
    )
    ablation.insert(1, "kind", ["top"] + ["random"] * n_random)
    bar.update()
    tokens = list(model.to_str_tokens(prompts.clean[0]))
    dla = direct_logit_attribution(model, prompts.clean, answer=prompts.io_ids, wrong=prompts.s_ids)
    lens_final = _lens_at_final(model, prompts)
    lens_example = logit_lens(model, prompts.clean[:1], k=1, target=prompts.io_ids[:1])
    bar.update()
    bar.close()
    return NameMoverFindings(
        model_name=name,
        n_layers=model.cfg.n_layers,
        n_heads=model.cfg.n_heads,
        seed=seed,
        prompts=prompts,
        performance=performance,
        dropped=dropped,
        patching=patching,
        attribution=attribution,
        agreement=estimate_agreement(
            patching.set_index("label")["effect"], attribution.set_index("label")["estimate"]
        ),
        top_heads=top,
        name_attention=name_att,
        group_ablation=ablation,
        example_tokens=tokens,
        example_patterns=pats[0],
        dla=dla,
        lens_final=lens_final,
        lens_example=lens_example,
        why=why,
    )


def tables(f: NameMoverFindings) -> dict[str, pd.DataFrame]:
    """The lab's tables by name."""
    merged = f.patching.merge(
        f.attribution[["layer", "head", "estimate"]], on=["layer", "head"], how="left"
    )
    merged["estimate_normalized"] = merged["estimate"] / (
        f.clean_logit_diff - f.corrupted_logit_diff
    )
    merged.attrs.update(f.patching.attrs)  # patch_heads' record (direction included)
    p = f.prompts
    return {
        "performance": f.performance,
        "prompts": pd.DataFrame(
            {
                "template": p.templates,
                "clean": p.texts,
                "corrupted": p.corrupted_texts,
                "io_id": p.io_ids.tolist(),
                "s_id": p.s_ids.tolist(),
            }
        ),
        "patching": merged,
        "attribution": f.attribution,
        "agreement": f.agreement,
        "name_attention": f.name_attention,
        "group_ablation": f.group_ablation,
        "dla": f.dla,
        "direct_verdicts": direct_verdicts(f),
        "logit_lens_final": f.lens_final,
        "qk_contrast": f.why.contrast,
        "qk_pairs": f.why.pairs,
        "qk_sides": f.why.sides,
        "qk_interventions": f.why.interventions,
    }
