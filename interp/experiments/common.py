"""Helpers the labs share: loading a model argument, progress, half losses, random head draws."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch

from interp.core.hooks import head_label
from interp.core.protocol import HookedModel, ModelSource, model_name
from interp.models.loader import load_model

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pandas as pd


def load(model: ModelSource) -> tuple[Any, str]:
    """``(model, name)``: a name or folder is loaded with :func:`interp.models.load_model`."""
    if isinstance(model, (str, os.PathLike)):
        return load_model(model), os.fspath(model)
    return model, model_name(model)


def progress_bar(total: int, enabled: bool, desc: str) -> Any:
    """A tqdm bar of ``total`` steps (disabled when not ``enabled``)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, desc=desc, unit="step")


def half_losses(model: HookedModel, data: Any) -> dict[str, float]:
    """Mean next-token loss on the first half and on the repeated (predictable) half.

    ``data`` is a :class:`interp.datasets.RepeatedTokens`; keys ``first_half``
    and ``repeated``.

    Raises:
        InterpError: for a model whose logits are meaningless (no LM head).
    """
    from interp.analysis.heads.icl import per_token_loss

    nll = per_token_loss(model, data.tokens).cpu()  # [batch, pos - 1]
    return {
        "first_half": float(nll[data.first_half_mask[:, :-1]].mean()),
        "repeated": float(nll[data.loss_mask[:, :-1]].mean()),
    }


def random_head_groups(
    model: HookedModel, exclude: list[str], k: int, n_draws: int, seed: int
) -> dict[str, list[str]]:
    """``n_draws`` seeded sets of ``k`` heads, none in ``exclude`` (labels ``L{l}H{h}``)."""
    cfg = model.cfg
    pool = [
        head_label(l, h)
        for l in range(cfg.n_layers)
        for h in range(cfg.n_heads)
        if head_label(l, h) not in exclude
    ]
    gen = torch.Generator().manual_seed(seed)
    return {
        f"random {k} (draw {d})": [pool[i] for i in torch.randperm(len(pool), generator=gen)[:k]]
        for d in range(n_draws)
    }


def lens_figure(
    df: pd.DataFrame, *, sequence: int = 0, title: str | None = None, caption: str | None = None
) -> Any:
    """The stage x position grid of one sequence of a :func:`interp.analysis.logit_lens` table."""
    import numpy as np

    from interp.outputs.figures import lens_grid

    one = df[df["sequence"] == sequence]
    stages = sorted(set(one["stage"]))
    pos = sorted(set(one["position"]))
    cell = one.set_index(["stage", "position"])
    tops = [[str(cell.loc[(s, p), "top1"]) for p in pos] for s in stages]
    probs = np.array([[float(cell.loc[(s, p), "p1"]) for p in pos] for s in stages])
    rank = cell["target_rank"].astype("float64")
    ranks = np.array([[rank.loc[(s, p)] for p in pos] for s in stages])
    names = [str(cell.loc[(s, pos[0]), "stage_name"]) for s in stages]
    labels = [f"{p}:{cell.loc[(stages[0], p), 'token']}" for p in pos]
    return lens_grid(
        tops,
        probs,
        ranks,
        stage_labels=names,
        position_labels=labels,
        title=title,
        caption=caption
        or "The logit lens: the top prediction and its probability after each block "
        "(the final norm recomputed on each stage's own residual); colour is the target's "
        "rank there. A prediction readable early is not one the model acts on early: later "
        "blocks can still change it.",
    )
