"""Per-head activation patching: one head's clean ``hook_z``, spliced into a corrupted run.

Run the model on a clean prompt and on a corrupted one that changes the
answer (for name movers, swap the names). Patching head ``h``'s output from
the clean run into the corrupted run and measuring the metric (usually the
logit difference of the two answers) asks: is this head's output, alone,
enough to move the corrupted run back towards the clean answer?
``normalized = (patched - corrupted) / (clean - corrupted)``: 1 means this
head alone restores the clean metric, 0 no effect. This is TransformerLens's
``get_act_patch_attn_head_out_all_pos`` (tested equal), on the exact engine of
:mod:`interp.analysis._sweep`.

Example:
    >>> import torch
    >>> from interp.models import load_induction_model
    >>> model = load_induction_model()
    >>> clean = torch.tensor([[0, 5, 6, 7, 8, 5, 6, 7]])
    >>> corrupted = torch.tensor([[0, 5, 6, 9, 8, 5, 6, 9]])
    >>> table = patch_heads(model, clean, corrupted_tokens=corrupted,
    ...                     metric=logit_diff_metric(8, 10))
    >>> table.nlargest(1, "normalized")["label"].item()
    'L1H1'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pandas as pd
import torch

from interp.analysis._common import CheckedCache, check_cache, rows_frame
from interp.analysis._sweep import head_edits, sweep
from interp.analysis.metrics import Metric, logit_diff_metric, prepare_metric, scalar
from interp.errors import InterpError
from interp.hooks import hook_name
from interp.protocol import (
    check_model,
    check_tokens,
    eval_no_grad,
    model_name,
    parse_heads,
    position_mask,
    positions_label,
)

__all__ = ["logit_diff_metric", "patch_heads"]


def check_token_pair(model: Any, clean: Any, corrupted: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Clean and corrupted tokens, checked and of one shape (compared position by position).

    Raises:
        InterpError: for bad tokens, or shapes that differ.
    """
    clean = check_tokens(model, clean, name="clean tokens")
    corrupted = check_tokens(model, corrupted, name="corrupted tokens")
    if clean.shape != corrupted.shape:
        raise InterpError(
            f"clean tokens {tuple(clean.shape)} and corrupted tokens "
            f"{tuple(corrupted.shape)} must have the same shape (same length prompts)"
        )
    return clean, corrupted


def clean_run(
    model: Any, tokens: torch.Tensor, metric: Metric, layers: list[int], cache: CheckedCache | None
) -> tuple[float, dict[int, torch.Tensor]]:
    """The clean run's metric and ``hook_z`` of ``layers`` (``[batch, pos, head, d_head]``),
    read from ``cache`` (already checked against ``tokens``) when given; the metric
    still needs one forward pass. Run under :func:`~interp.protocol.eval_no_grad`.

    Raises:
        InterpError: for a metric that returns a non-scalar.
    """
    names = [hook_name("z", l) for l in layers]
    if cache is None:
        logits, zcache = model.run_with_cache(tokens, names_filter=names)
    else:
        logits, zcache = model(tokens), cache.complete(names)
    value = scalar(metric(logits, tokens), metric.name)
    return value, {l: zcache[n] for l, n in zip(layers, names)}


def patch_heads(
    model: Any,
    tokens: torch.Tensor,
    *,
    corrupted_tokens: torch.Tensor,
    metric: Metric | Callable[[torch.Tensor, torch.Tensor], Any],
    heads: Iterable[Any] | None = None,
    positions: Any = None,
    cache: Any = None,
    batch_size: int | None = None,
    memory_budget: int | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """Patch each head's clean ``hook_z`` into the corrupted run (module docstring).

    ``tokens`` are the clean tokens. Columns: ``layer, head, label, clean,
    corrupted, patched, delta`` (``patched - corrupted``) and ``normalized``.
    ``positions`` (ints or a ``[pos]`` bool mask) restricts patching to those
    positions. ``cache`` is the clean run's cache (its ``hook_z`` is read
    instead of re-run). ``df.attrs`` records the metric and engine path.

    Raises:
        InterpError: when clean and corrupted tokens differ in shape, a metric
            needs an LM head the model lacks, ids or positions do not fit, a
            metric returns a non-scalar, or the clean and corrupted metrics are
            equal (``normalized`` would divide by zero).
    """
    check_model(model)
    tokens, corrupted_tokens = check_token_pair(model, tokens, corrupted_tokens)
    if metric is None:
        raise InterpError("patch_heads needs a metric, e.g. logit_diff_metric(correct, incorrect)")
    m = prepare_metric(model, tokens, metric, None)
    pos = position_mask(tokens.shape[1], positions)
    chosen = sorted(parse_heads(model, heads))
    layers = sorted({l for l, _ in chosen})
    with eval_no_grad(model):
        cache = check_cache(model, tokens, cache)
        clean, repl = clean_run(model, tokens, m, layers, cache)
        result = sweep(
            model,
            corrupted_tokens,
            head_edits(chosen, pos),
            m,
            values={hook_name("z", l): z for l, z in repl.items()},
            batch_size=batch_size,
            memory_budget=memory_budget,
            progress=progress,
            desc="patching",
        )
    corrupted = result.clean
    if clean == corrupted:
        raise InterpError("clean and corrupted runs give the same metric; nothing to patch")
    df = rows_frame(
        chosen,
        {
            "clean": [clean] * len(chosen),
            "corrupted": [corrupted] * len(chosen),
            "patched": result.values,
        },
    )
    df["delta"] = df["patched"] - corrupted
    df["normalized"] = df["delta"] / (clean - corrupted)
    df.attrs.update(
        analysis="patch_heads (exact, clean hook_z into the corrupted run)",
        method="patch",
        metric=m.name,
        unit=m.unit,
        model=model_name(model),
        positions=positions_label(pos),
        engine=result.path,
        engine_note=result.note,
        passes=result.passes + 1,
    )
    return df
