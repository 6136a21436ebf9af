"""Next-token loss per position, and the in-context learning score.

Olsson et al. (2022, "In-context Learning and Induction Heads") define the
in-context learning score as the loss on the 500th token minus the loss on
the 50th, averaged over sequences: negative when the model predicts better
late in a context than early. Our contexts are short, so the positions are
arguments: ``score = mean_b loss[b, late] - mean_b loss[b, early]``, where
``loss[b, t]`` is the cross-entropy of predicting token ``t + 1`` at
position ``t``. Defaults: ``early = max(1, pos // 10)`` and ``late = pos - 2``
(the last prediction).

Example:
    >>> from interp.models import load_induction_model
    >>> from interp.datasets import repeated_random_tokens
    >>> model = load_induction_model()
    >>> tokens = repeated_random_tokens(64, 23, d_vocab=64, seed=1).tokens
    >>> icl = in_context_learning_score(model, tokens)
    >>> int(icl["early_pos"].item()), int(icl["late_pos"].item()), bool(icl["score"].item() < -2)
    (4, 45, True)
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from interp.core.checks import check_int, check_tokens
from interp.core.errors import InterpError
from interp.core.hooks import hook_name
from interp.core.metrics import next_token_nll
from interp.core.protocol import (
    HookedModel,
    check_model,
    eval_no_grad,
    is_causal,
    logits_meaningful,
)
from interp.core.shapes import PerToken, Tokens
from interp.engine.cache import check_cache
from interp.outputs.frames import described
from interp.runtime import runtime_of


def per_token_loss(model: HookedModel, tokens: Tokens, *, cache: Any = None) -> PerToken:
    """``[batch, pos - 1]`` next-token cross-entropy (nats), from the model's logits.

    ``loss[b, t]`` is the cross-entropy of predicting token ``t + 1`` at position ``t``. One
    forward pass, or, with a ``cache`` holding the last block's ``hook_resid_post``, only
    the final normalisation and unembedding.

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``), causal, with a language-model head.
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence), at least 2 long.
        cache: An ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; hooks it lacks
            are computed by one forward pass.

    Returns:
        ``[batch, pos - 1]`` float losses in nats.

    Raises:
        InterpError: for a model whose logits are meaningless (no LM head), an encoder
            (bidirectional attention sees the token it would predict), bad tokens, a
            cache of other tokens, or an output that is not vocabulary logits.
    """
    cfg = check_model(model)
    if not logits_meaningful(model):
        raise InterpError(
            "this model has no language-model head: its next-token loss is meaningless"
        )
    if not is_causal(model):
        raise InterpError(
            "next-token loss has no meaning on an encoder (bidirectional attention sees the "
            "token it would predict)"
        )
    tokens = check_tokens(model, tokens, min_len=2)
    with eval_no_grad(model):
        if cache is None:
            logits = runtime_of(model).run(tokens)
        else:
            last = cfg.n_layers - 1
            name = hook_name("resid_post", last)
            checked = check_cache(model, tokens, cache, needs=[name])
            logits = runtime_of(model).run(tokens, start=last + 1, state=checked[name])
    if logits.shape[-1] != getattr(cfg, "d_vocab", logits.shape[-1]) or logits.ndim != 3:
        raise InterpError("model output is not vocabulary logits; it has no next-token loss")
    return next_token_nll(logits, tokens)


def _has_last_resid(model: HookedModel, cache: Any) -> bool:
    name = hook_name("resid_post", model.cfg.n_layers - 1)
    return cache is not None and name in cache


def in_context_learning_score(
    model: HookedModel,
    tokens: Tokens,
    *,
    early: int | None = None,
    late: int | None = None,
    cache: Any = None,
) -> pd.DataFrame:
    """Loss late in the sequence minus loss early, as a one-row table.

    Olsson et al. (2022) take the loss on the 500th token minus the loss on the 50th; our
    contexts are short, so the positions are arguments: ``score = mean_b loss[b, late] -
    mean_b loss[b, early]`` (:func:`per_token_loss`), negative when the model predicts
    better late in a context than early.

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``), causal, with a language-model head.
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence), at least 3 long.
        early: The early prediction's position, in ``[0, pos - 2]``; ``None`` is
            ``max(1, pos // 10)``.
        late: The late prediction's position, after ``early``; ``None`` is ``pos - 2`` (the
            last prediction).
        cache: An ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; hooks it lacks
            are computed by one forward pass.

    Returns:
        A one-row table: ``early_pos, late_pos, early_loss, late_loss, score`` (losses in
        nats). ``attrs`` follow :data:`interp.outputs.frames.SCHEMA`.

    Raises:
        InterpError: for positions outside ``[0, pos - 2]``, ``early >= late``,
            or as :func:`per_token_loss`.
    """
    check_model(model)
    tokens = check_tokens(model, tokens, min_len=3)
    n = tokens.shape[1]
    early = max(1, n // 10) if early is None else check_int(early, "early")
    late = n - 2 if late is None else check_int(late, "late")
    for name, p in (("early", early), ("late", late)):
        if not 0 <= p <= n - 2:
            raise InterpError(f"{name} position {p} outside [0, {n - 2}] for length {n}")
    if early >= late:
        raise InterpError(f"early ({early}) must come before late ({late})")
    nll = per_token_loss(model, tokens, cache=cache)
    e, l = float(nll[:, early].mean()), float(nll[:, late].mean())
    return described(
        pd.DataFrame(
            [
                {
                    "early_pos": early,
                    "late_pos": late,
                    "early_loss": e,
                    "late_loss": l,
                    "score": l - e,
                }
            ]
        ),
        "in_context_learning_score",
        description="the next-token loss late in the context minus early (Olsson et al. 2022)",
        method="exact",
        metric="loss",
        unit="nats",
        model=model,
        # a cache holding the last residual stream leaves only the unembedding to run
        forward_equivalents=0.0 if _has_last_resid(model, cache) else 1.0,
    )
