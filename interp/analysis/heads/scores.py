"""Induction, previous-token and duplicate-token scores for every head, in three conventions.

A head's score is the attention it puts on a *stripe* of key positions
defined by the tokens themselves (Elhage et al. 2021; Olsson et al. 2022):

* **previous-token**: key ``q - 1``;
* **duplicate-token**: keys ``k < q`` holding the same token as ``q``;
* **induction**: keys ``k <= q`` whose *previous* token equals the token at
  ``q`` (the token that followed an earlier occurrence of the current one).

Three conventions for turning a pattern into a number (``convention=``):

``"interp"`` (default). With ``S(b, q)`` the stripe of query ``q`` in
sequence ``b`` and ``V`` the ``(b, q)`` with a non-empty stripe (inside
``loss_mask`` when given), ``score = mean_{(b,q) in V} sum_{k in S(b,q)} A[b,q,k]``.
``exclude_bos=True`` (default) removes key 0 from every stripe without
renormalising, so attention parked on BOS never counts. A perfect head scores 1.

``"transformer_lens"``: exactly TransformerLens's ``detect_head`` (4.3).
Per sequence, ``"mul"`` divides the stripe mass by the attention of *all*
rows (so a perfect induction head on BOS + 4 tokens twice scores 4/9);
``exclude_bos`` zeroes key 0 of the pattern and divides by what is left,
``exclude_current_token`` zeroes the diagonal; ``"abs"`` is
``1 - round(mean |A - D| * pos, 3)``. Sequences are scored one by one and averaged.

``"arena"``: ARENA chapter 1.2's fixed diagonals on the repeated probe
(BOS, ``L`` tokens, the same ``L`` tokens): previous-token
``A.diagonal(-1).mean()``, induction ``A.diagonal(1 - L).mean()`` (which also
counts first-half entries). ARENA has no duplicate-token detector; the same
rule on the duplicate stripe, ``A.diagonal(-L).mean()``, is used. Averaged over the batch.

The three differ on the same pattern; the stripe scores section of ``docs/heads.md``
works one 9-token example through all of them. Because stripes come from token
ids, every convention works on any hooked model and any tensor of ids.

For a **bidirectional** model (``cfg.attention_dir == "bidirectional"``) the
``"interp"`` stripes make no causal assumption: duplicate-token keys are every
other position holding the same token, and induction keys every ``k`` whose
previous token is the query's token except ``k = q + 1``. ``causal=``
overrides the model's setting. The other two conventions use their own
(causal) definitions unchanged.

Example:
    >>> from interp.models import load_induction_model
    >>> from interp.datasets import repeated_random_tokens
    >>> model = load_induction_model()
    >>> tokens = repeated_random_tokens(8, 20, d_vocab=64, seed=0).tokens
    >>> scores = induction_scores(model, tokens)
    >>> scores.nlargest(1, "induction")["label"].item()
    'L1H1'
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, Literal

import pandas as pd
import torch

from interp.analysis.heads.patterns import patterns
from interp.analysis.heads.stripes import (
    STRIPES,
    Convention,
    Reducer,
    Stripe,
    chunk_reducers,
    reducers_for,
)
from interp.core.checks import check_int, check_seed, check_tokens
from interp.core.errors import InterpError
from interp.core.hooks import hook_name
from interp.core.memory import check_ids
from interp.core.protocol import (
    HookedModel,
    bos_token_id,
    check_model,
    eval_no_grad,
    is_causal,
    model_device,
)
from interp.core.shapes import Mask, Tokens
from interp.datasets import repeated_random_tokens
from interp.engine.cache import run_until
from interp.engine.chunks import Estimate
from interp.engine.cost import cache_pass_work
from interp.engine.footprints import scores_footprint
from interp.engine.runner import Chunk, Task, run
from interp.outputs.frames import head_frame, table_attrs


def probe_tokens(
    model: HookedModel, *, n: int = 16, half_len: int | None = None, seed: int = 0
) -> torch.Tensor:
    """The standard probe for ``model``: BOS then ``half_len`` random tokens repeated twice.

    The BOS id is the tokenizer's BOS (or CLS for encoders) when there is one, else 0.

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``). Only its config and tokenizer are read.
        n: How many probe sequences (at least 1).
        half_len: The length of the random segment that repeats (at least 2); ``None`` is 50,
            or less if the context is shorter.
        seed: Every random draw; the same seed gives the same numbers.

    Returns:
        ``[n, 1 + 2 * half_len]`` integer ids: BOS, the segment, the segment again.

    Raises:
        InterpError: for ``n < 1``, ``half_len < 2``, a probe longer than the
            context, or more probes than their ids fit in memory
            (:func:`interp.core.memory.check_ids`; the analyses that read a probe run it in
            chunks).
    """
    cfg = check_model(model)
    n = check_int(n, "n", minimum=1)
    n_ctx = getattr(cfg, "n_ctx", None) or 101
    half_len = min(50, (n_ctx - 1) // 2) if half_len is None else check_int(half_len, "half_len")
    if 1 + 2 * half_len > n_ctx:
        raise InterpError(f"a probe of 1 + 2 x {half_len} tokens exceeds n_ctx={n_ctx}")
    check_ids(model_device(model), n, 1 + 2 * half_len, what="probes",
              fix="use fewer or shorter probes (a smaller n, or a smaller --batch)")  # fmt: skip
    return repeated_random_tokens(
        n, half_len, d_vocab=int(cfg.d_vocab), bos=bos_token_id(model), seed=check_seed(seed)
    ).tokens


def pattern_scores(
    patterns: Sequence[torch.Tensor],
    tokens: Tokens,
    *,
    stripes: Sequence[Stripe] = STRIPES,
    convention: Convention = "interp",
    exclude_bos: bool | None = None,
    exclude_current_token: bool = False,
    error_measure: Literal["mul", "abs"] = "mul",
    loss_mask: Mask | None = None,
    causal: bool = True,
) -> pd.DataFrame:
    """Stripe scores of given patterns, one per layer: ``[batch, head, query_pos, key_pos]``.

    The scoring half of :func:`head_scores`, for patterns that come from
    anywhere (hand-built ones, another library's): no model runs. The stripes and the
    three conventions are the module's (:mod:`interp.analysis.heads.scores`).

    Args:
        patterns: One ``[batch, head, query_pos, key_pos]`` tensor per layer, every layer with
            the same number of heads.
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence): the tokens the
            patterns were computed on (they define the stripes).
        stripes: Which stripes to score: ``'induction'``, ``'previous_token'``,
            ``'duplicate_token'`` (default: all three).
        convention: How a stripe becomes a score: ``'interp'`` (default),
            ``'transformer_lens'``, ``'arena'`` (docs/heads.md: stripe scores).
        exclude_bos: Leave key 0 out; ``None`` is the convention's default (True for
            ``'interp'``, False for ``'transformer_lens'``; ``'arena'`` has none).
        exclude_current_token: Zero the diagonal (``'transformer_lens'`` only).
        error_measure: ``'mul'`` (default) or ``'abs'`` (``'transformer_lens'`` only).
        loss_mask: ``[batch, pos]`` bool: which positions count (here, the query rows a score
            averages; ``'interp'`` only); ``None`` counts every row with a stripe.
        causal: ``True`` (default) for causal patterns; ``False`` gives the bidirectional
            stripes of ``'interp'``, and must be given for bidirectional patterns.

    Returns:
        A table with one row per head (``layer, head, label``), then one column per stripe:
        its score. ``attrs`` follow :data:`interp.outputs.frames.SCHEMA` (``model`` is
        ``None``), plus ``convention``.

    Example:
        >>> tokens = torch.tensor([[0, 5, 6, 5, 6]])
        >>> prev = torch.zeros(1, 1, 5, 5)
        >>> prev[0, 0, torch.arange(5), (torch.arange(5) - 1).clamp(min=0)] = 1.0
        >>> pattern_scores([prev], tokens)["previous_token"].item()
        1.0

    Raises:
        InterpError: as :func:`head_scores`, for patterns that are not
            ``[batch, head, pos, pos]`` tensors of these tokens, or layers with
            different numbers of heads.
    """
    if not isinstance(tokens, torch.Tensor) or tokens.ndim not in (1, 2):
        raise InterpError("tokens must be a [batch, pos] tensor of ids")
    tokens = tokens[None] if tokens.ndim == 1 else tokens
    pats = list(patterns)
    if not pats:
        raise InterpError("no patterns given: pass one [batch, head, pos, pos] tensor per layer")
    b, n = tokens.shape
    for i, p in enumerate(pats):
        if not isinstance(p, torch.Tensor) or p.ndim != 4 or tuple(p.shape[::2]) != (b, n):
            shape = tuple(p.shape) if isinstance(p, torch.Tensor) else type(p).__name__
            raise InterpError(
                f"pattern {i} has shape {shape}; patterns are [batch, head, pos, pos] of the "
                f"tokens ({b} x {n})"
            )
        if p.shape[-1] != n or p.shape[1] != pats[0].shape[1]:
            raise InterpError(f"pattern {i} has shape {tuple(p.shape)}, unlike pattern 0")
    reducers = reducers_for(tokens, stripes, convention, exclude_bos, exclude_current_token,
                            error_measure, loss_mask, bool(causal))  # fmt: skip
    n_heads = pats[0].shape[1]
    out = {s: torch.zeros(len(pats), n_heads) for s in reducers}
    for layer, p in enumerate(pats):
        for s, r in reducers.items():
            out[s][layer] = r(p.float()).cpu()
    df = head_frame(out, len(pats), n_heads)
    df.attrs.update(_attrs("pattern_scores", convention, None, 0.0))
    return df


def head_scores(
    model: HookedModel,
    tokens: Tokens | None = None,
    *,
    stripes: Sequence[Stripe] = STRIPES,
    convention: Convention = "interp",
    exclude_bos: bool | None = None,
    exclude_current_token: bool = False,
    error_measure: Literal["mul", "abs"] = "mul",
    loss_mask: Mask | None = None,
    causal: bool | None = None,
    cache: Any = None,
    memory_budget: int | None = None,
    progress: bool = False,
    estimate: bool = False,
) -> pd.DataFrame | Estimate:
    """Stripe scores from one forward pass: one row per head, one column per stripe.

    Runs the model once with reducing hooks on ``hook_pattern`` only (no
    activations are kept), or reads the patterns from ``cache`` (patterns it lacks are
    computed). The stripes and the three conventions are the module's
    (:mod:`interp.analysis.heads.scores`); :func:`pattern_scores` scores patterns you have.
    The prompts run in chunks under ``memory_budget`` (:mod:`interp.engine.chunks`; every
    score is a mean over query rows or sequences, so chunks give the scores of one batch).

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``).
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence); ``None`` is
            :func:`probe_tokens` of the model.
        stripes: Which stripes to score: ``'induction'``, ``'previous_token'``,
            ``'duplicate_token'`` (default: all three).
        convention: How a stripe becomes a score: ``'interp'`` (default),
            ``'transformer_lens'``, ``'arena'`` (docs/heads.md: stripe scores).
        exclude_bos: Leave key 0 out; ``None`` is the convention's default (True for
            ``'interp'``, False for ``'transformer_lens'``; ``'arena'`` has none).
        exclude_current_token: Zero the diagonal (``'transformer_lens'`` only).
        error_measure: ``'mul'`` (default) or ``'abs'`` (``'transformer_lens'`` only).
        loss_mask: ``[batch, pos]`` bool: which positions count (here, the query rows a score
            averages; ``'interp'`` only); ``None`` counts every row with a stripe.
        causal: Whether the stripes are causal (``'interp'`` only); ``None`` is the model's
            own ``cfg.attention_dir``.
        cache: An ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; hooks it lacks
            are computed by one forward pass.
        memory_budget: The bytes an analysis may hold beyond the model's weights: its prompts
            run in chunks to stay under it; ``None`` is a quarter of the memory free on the
            model's device.
        progress: Show a progress bar over chunks and passes, with an ETA.
        estimate: ``True``: return an ``Estimate`` (chunks, peak bytes over the weights,
            forward-equivalents) instead of running; work that cannot fit is refused with it.

    Returns:
        A table with one row per head (``layer, head, label``), then one column per stripe:
        its score, the share of a query row's attention on the stripe. ``attrs`` follow
        :data:`interp.outputs.frames.SCHEMA`, plus ``convention`` and ``chunks``. With
        ``estimate=True``, the run's :class:`~interp.engine.chunks.Estimate` instead.

    Raises:
        InterpError: for an unknown stripe or convention, an option the
            convention does not have, bad tokens, a ``loss_mask`` of the wrong
            shape, no query with a non-empty stripe, tokens that are not the
            repeated probe under ``"arena"``, a cache of other tokens, or a
            model without attention patterns.
    """
    cfg = check_model(model)
    tokens = (
        probe_tokens(model)
        if tokens is None
        else check_tokens(model, tokens, min_len=2, chunked=True)
    )
    if convention != "interp" and (loss_mask is not None or causal is not None):
        raise InterpError("loss_mask and causal belong to convention='interp'")
    causal = is_causal(model) if causal is None else bool(causal)
    reducers = reducers_for(tokens, stripes, convention, exclude_bos, exclude_current_token,
                            error_measure, loss_mask, causal)  # fmt: skip
    b, n = tokens.shape
    options = (stripes, convention, exclude_bos, exclude_current_token, error_measure)

    def chunk(c: Chunk) -> dict[str, Any]:
        sl = c.rows
        if c.split:
            pairs = chunk_reducers(tokens, sl, *options, loss_mask, causal)
        else:
            pairs = {s: (r, 1.0) for s, r in reducers.items()}
        part = {s: r for s, (r, _) in pairs.items()}
        out = {s: torch.zeros(cfg.n_layers, cfg.n_heads) for s in part}
        if cache is not None:
            with eval_no_grad(model):
                for layer, p in enumerate(patterns(model, tokens, cache=cache)):
                    for s, r in part.items():
                        out[s][layer] = r(p[sl]).cpu()
        elif part:
            _scores_by_hooks(model, tokens[sl], part, out)
        return _weighted(reducers, out, pairs)

    # a pass stopped after the last layer's pattern: every block, no unembedding
    last = hook_name("pattern", cfg.n_layers - 1)
    work = 0.0 if cache is not None else round(cache_pass_work(model, n, [last]), 3)
    task = Task(
        "head_scores", scores_footprint(model, n, cached=cache is not None), work=work, chunk=chunk,
        combine={k: "sum" for s in reducers for k in (f"total:{s}", f"weight:{s}")},
        fix="use shorter prompts", desc="head scores", inputs=(tokens, options, loss_mask, causal),
    )  # fmt: skip
    run_ = run(model, (b, n), task, memory_budget=memory_budget, estimate=estimate,
               progress=progress)  # fmt: skip
    if isinstance(run_, Estimate):
        return run_
    sums = run_.values
    out = {s: sums[f"total:{s}"] / sums[f"weight:{s}"] for s in reducers}
    df = head_frame(out, cfg.n_layers, cfg.n_heads)
    df.attrs.update(_attrs("head_scores", convention, model, work))
    df.attrs["chunks"] = run_.chunks
    return df


def _weighted(reducers: dict[str, Reducer], out: dict[str, torch.Tensor], pairs: dict) -> dict:
    """A chunk's partials: each stripe's scores times its weight in the chunk (the query rows
    or sequences it counts) and the weight, summed over the chunks (the weights differ by
    stripe); a stripe the chunk has no row of adds 0 to both."""
    weights = {s: pairs[s][1] if s in pairs and pairs[s][1] > 0 else 0.0 for s in reducers}
    part: dict[str, Any] = {f"weight:{s}": w for s, w in weights.items()}
    part.update({f"total:{s}": out[s] * w if w > 0 else 0.0 for s, w in weights.items()})
    return part


def _attrs(analysis: str, convention: str, model: HookedModel, cost: float) -> dict[str, Any]:
    return table_attrs(
        analysis,
        description=f"the attention each head puts on each stripe ({convention} convention)",
        method="exact",
        unit="share of a query row's attention",
        model=model,
        forward_equivalents=cost,
        convention=convention,
    )


def _scores_by_hooks(
    model: HookedModel,
    tokens: Tokens,
    reducers: dict[str, Reducer],
    out: dict[str, torch.Tensor],
) -> None:
    seen: set[int] = set()

    def make_hook(layer: int) -> Callable:
        def hook(pattern: torch.Tensor, hook: Any) -> None:
            seen.add(layer)
            for s, r in reducers.items():
                out[s][layer] = r(pattern.detach()).cpu()

        return hook

    n_layers = model.cfg.n_layers
    hooks = [(hook_name("pattern", l), make_hook(l)) for l in range(n_layers)]
    try:
        with eval_no_grad(model):
            run_until(model, tokens, hooks, hooks[-1][0])  # nothing after the last pattern
    except (KeyError, AttributeError) as exc:
        if "hook_pattern" in str(exc):
            raise InterpError("this model has no hook_pattern attention hooks") from exc
        raise
    if len(seen) != n_layers:
        raise InterpError(
            "this model did not produce attention patterns at every layer's hook_pattern"
        )


def _one_stripe(stripe: Stripe, label: str) -> Any:
    """``head_scores`` for one stripe: one column ``stripe`` (TransformerLens's patching
    module builds its grids the same way, from one function). Its docstring is
    :func:`head_scores`'s ``Args:``, ``Returns:`` and ``Raises:``, ``stripes`` fixed."""
    fn = functools.partial(head_scores, stripes=(stripe,))
    doc = inspect.cleandoc(head_scores.__doc__ or "")
    if "Args:\n" in doc:  # docstrings are absent under python -OO
        args = doc[doc.index("Args:\n") : doc.index("\nReturns:\n")].rstrip()
        start = args.index("\n    stripes: ")
        end = args.index("\n    convention: ")
        fixed = f"\n    stripes: Fixed to ``('{stripe}',)``: one stripe, one score column."
        fn.__doc__ = (
            f"{label} score per head: :func:`head_scores` with ``stripes=('{stripe}',)``.\n\n"
            f"{args[:start]}{fixed}{args[end:]}\n\n"
            f"Returns:\n    A table with one row per head: ``layer, head, label, {stripe}``;\n"
            "    ``attrs`` as :func:`head_scores`. With ``estimate=True``, the run's\n"
            "    :class:`~interp.engine.chunks.Estimate` instead.\n\n"
            + doc[doc.index("Raises:\n") :]
        )
    fn.__name__ = fn.__qualname__ = f"{stripe}_scores"
    fn.__module__ = __name__
    return fn


induction_scores = _one_stripe("induction", "Induction")
previous_token_scores = _one_stripe("previous_token", "Previous-token")
duplicate_token_scores = _one_stripe("duplicate_token", "Duplicate-token")
