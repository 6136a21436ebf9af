"""Helpers the labs share: loading a model argument, progress, half losses, random head draws."""

from __future__ import annotations

import os
from typing import Any

import torch

from interp.hooks import head_label
from interp.protocol import model_name


def load(model: Any) -> tuple[Any, str]:
    """``(model, name)``: a name or folder is loaded with :func:`interp.models.load_model`."""
    if isinstance(model, (str, os.PathLike)):
        from interp.models.loader import load_model

        return load_model(model), os.fspath(model)
    return model, model_name(model)


def progress_bar(total: int, enabled: bool, desc: str) -> Any:
    """A tqdm bar of ``total`` steps (disabled when not ``enabled``)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, desc=desc, unit="step")


def half_losses(model: Any, data: Any) -> dict[str, float]:
    """Mean next-token loss on the first half and on the repeated (predictable) half.

    ``data`` is a :class:`interp.datasets.RepeatedTokens`; keys ``first_half``
    and ``repeated``.

    Raises:
        InterpError: for a model whose logits are meaningless (no LM head).
    """
    from interp.analysis.icl import per_token_loss

    nll = per_token_loss(model, data.tokens).cpu()  # [batch, pos - 1]
    return {
        "first_half": float(nll[data.first_half_mask[:, :-1]].mean()),
        "repeated": float(nll[data.loss_mask[:, :-1]].mean()),
    }


def random_head_groups(
    model: Any, exclude: list[str], k: int, n_draws: int, seed: int
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
