"""In-context learning score (Olsson et al. 2022, "In-context Learning and Induction Heads").

Olsson et al. define it as the loss on the 500th token minus the loss on the
50th, averaged over sequences: negative when the model predicts better late in
a context than early. Our contexts are short, so the positions are arguments:
``score = mean_b loss[b, late] - mean_b loss[b, early]``, where ``loss[b, t]``
is the cross-entropy of predicting token ``t + 1`` at position ``t``.
Defaults: ``early = max(1, pos // 10)`` and ``late = pos - 2`` (the last
prediction).

Example:
    >>> in_context_learning_score(model, tokens)          # doctest: +SKIP
    {'early_pos': 4, 'late_pos': 46, 'early_loss': 4.15, 'late_loss': 0.05, 'score': -4.1}
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from interp.analysis._common import check_model, check_tokens
from interp.errors import InterpError


def per_token_loss(model: Any, tokens: torch.Tensor) -> torch.Tensor:
    """``[batch, pos - 1]`` next-token cross-entropy, from the model's logits.

    Raises:
        InterpError: for a model whose logits are meaningless (no LM head).
    """
    if not getattr(model, "interp_logits_meaningful", True):
        raise InterpError("this model has no language-model head: its loss is meaningless")
    with torch.no_grad():
        logits = model(tokens)
    if logits.shape[-1] != getattr(model.cfg, "d_vocab", logits.shape[-1]):
        raise InterpError("model output is not vocabulary logits; it has no next-token loss")
    logp = F.log_softmax(logits[:, :-1].float(), dim=-1)
    return -logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)


def in_context_learning_score(
    model: Any, tokens: torch.Tensor, *, early: int | None = None, late: int | None = None
) -> dict[str, float]:
    """Loss late in the sequence minus loss early (see module docstring).

    Raises:
        InterpError: for positions outside ``[0, pos - 2]`` or ``early >= late``.
    """
    check_model(model)
    tokens = check_tokens(model, tokens, min_len=3)
    n = tokens.shape[1]
    early = max(1, n // 10) if early is None else early
    late = n - 2 if late is None else late
    for name, p in (("early", early), ("late", late)):
        if not 0 <= p <= n - 2:
            raise InterpError(f"{name} position {p} outside [0, {n - 2}] for length {n}")
    if early >= late:
        raise InterpError(f"early ({early}) must come before late ({late})")
    nll = per_token_loss(model, tokens)
    e, l = float(nll[:, early].mean()), float(nll[:, late].mean())
    return {"early_pos": early, "late_pos": late, "early_loss": e, "late_loss": l, "score": l - e}


def half_losses(model: Any, data: Any) -> dict[str, float]:
    """Mean next-token loss on the first half and on the repeated (predictable) half.

    ``data`` is a :class:`interp.datasets.RepeatedTokens`; keys ``first_half``
    and ``repeated``.

    Raises:
        InterpError: for a model whose logits are meaningless (no LM head).
    """
    nll = per_token_loss(model, data.tokens)  # [batch, pos - 1]
    return {
        "first_half": float(nll[data.first_half_mask[:, :-1]].mean()),
        "repeated": float(nll[data.loss_mask[:, :-1]].mean()),
    }
