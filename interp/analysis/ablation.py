"""Head ablations: what a metric does when a head's output is removed.

An ablation replaces a head's output *before* the output projection, at
``blocks.{l}.attn.hook_z`` (``[batch, pos, head, d_head]``), so nothing of the
head reaches the residual stream through ``W_O`` (the output bias ``b_O`` is
shared by the layer's heads and stays). Methods:

* ``zero``: ``z = 0``;
* ``mean``: ``z`` replaced by its mean over a reference batch, per position
  (reference sequences must have the same length as ``tokens``; default: the
  tokens themselves);
* ``resample``: each sequence's ``z`` replaced by the head's ``z`` on a
  randomly drawn (seeded) sequence: any row of ``reference_tokens``, or,
  without them, a *different* sequence of ``tokens``.

``positions`` restricts the ablation to some positions (all by default). The
default metric is the mean next-token loss over ``loss_mask``. All sweeps run
on the exact engine in :mod:`interp.analysis._sweep`; ``df.attrs["engine"]``
says which path ran, and every result equals one ``run_with_hooks`` per edit.
The model runs in eval mode under ``torch.no_grad()`` (its mode is restored).

Example:
    >>> from interp.models import load_induction_model
    >>> from interp.datasets import repeated_tokens
    >>> model = load_induction_model()
    >>> data = repeated_tokens(32, d_vocab=64, seq_len=48, segment_lengths=(8, 12), seed=1)
    >>> table = ablate_heads(model, data.tokens, loss_mask=data.loss_mask)
    >>> table.nlargest(2, "delta")["label"].tolist()
    ['L1H1', 'L0H1']
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import pandas as pd
import torch

from interp.analysis._common import CheckedCache, cache_of, check_cache, rows_frame
from interp.analysis._sweep import SweepResult, head_edits, sweep
from interp.analysis.metrics import Metric, prepare_metric
from interp.errors import InterpError
from interp.hooks import hook_name
from interp.protocol import (
    check_model,
    check_seed,
    check_tokens,
    eval_no_grad,
    model_name,
    parse_heads,
    position_mask,
    positions_label,
)

Method = Literal["zero", "mean", "resample"]
METHODS: tuple[str, ...] = ("zero", "mean", "resample")


def zero_head_hooks(model: Any, *, heads: Iterable[Any]) -> list[tuple[str, Callable]]:
    """``fwd_hooks`` for ``run_with_hooks`` that zero the given heads' ``hook_z``.

    Example:
        >>> from interp.models import load_induction_model
        >>> model = load_induction_model()
        >>> [name for name, _ in zero_head_hooks(model, heads=["L1H1", "L0H1"])]
        ['blocks.0.attn.hook_z', 'blocks.1.attn.hook_z']

    Raises:
        InterpError: for a head out of range or a malformed label.
    """
    by_layer: dict[int, list[int]] = {}
    for layer, head in parse_heads(model, heads):
        by_layer.setdefault(layer, []).append(head)

    def make(hs: list[int]) -> Callable:
        def hook(z: torch.Tensor, hook: Any) -> torch.Tensor:
            z = z.clone()  # [batch, pos, head, d_head]
            z[:, :, hs] = 0.0
            return z

        return hook

    return [(hook_name("z", l), make(hs)) for l, hs in sorted(by_layer.items())]


def resample_index(n: int, n_ref: int | None, seed: int, device: Any = None) -> torch.Tensor:
    """``[n]`` seeded draws: a row of a reference batch of ``n_ref`` rows, or (``n_ref=None``)
    a row of the same batch other than the sequence's own.

    Raises:
        InterpError: without a reference batch, for a batch of one sequence.
    """
    gen = torch.Generator().manual_seed(seed)
    if n_ref is not None:
        idx = torch.randint(n_ref, (n,), generator=gen)  # every reference row can be drawn
    else:
        if n < 2:
            raise InterpError(
                "resample ablation without reference_tokens draws another sequence of the batch, "
                "so it needs at least two sequences (or pass reference_tokens)"
            )
        idx = torch.randint(n - 1, (n,), generator=gen)
        idx = idx + (idx >= torch.arange(n)).long()  # skip the sequence itself, uniformly
    return idx.to(device) if device is not None else idx


def replacements(
    model: Any,
    tokens: torch.Tensor,
    method: str,
    names: Sequence[str],
    *,
    reference_tokens: torch.Tensor | None,
    cache: CheckedCache | None,
    seed: int,
) -> dict[str, torch.Tensor] | None:
    """Per hook in ``names``, the activation an ablation splices in (batch first).

    ``None`` for zero ablation; the mean over the batch (or the reference
    batch) for ``"mean"``; a seeded draw of another sequence for
    ``"resample"``. Reads the activations from ``cache`` (the checked cache
    of ``tokens``) when there is no reference batch.
    """
    if method == "zero":
        return None
    names = list(dict.fromkeys(names))
    if reference_tokens is not None:
        ref = reference_tokens
        acts = cache_of(model, ref, names)
    elif cache is not None:
        ref, acts = tokens, cache.complete(names)
    else:
        ref = tokens
        acts = cache_of(model, ref, names)
    got = {n: acts[n] for n in names}
    if method == "mean":
        return {
            n: x.mean(0, keepdim=True).expand(tokens.shape[0], *x.shape[1:]) for n, x in got.items()
        }
    n_ref = None if reference_tokens is None else ref.shape[0]
    idx = resample_index(tokens.shape[0], n_ref, seed, device=tokens.device)
    return {n: x[idx] for n, x in got.items()}


def prepare_ablation(
    model, tokens, method, metric, loss_mask, reference_tokens, positions, seed, cache
):
    """Every input of an ablation checked before any forward pass (the shared first step).

    Returns ``(tokens, metric, reference_tokens, positions mask, seed, checked cache)``.

    Raises:
        InterpError: as :func:`ablate_heads`.
    """
    check_model(model)
    if method not in METHODS:
        raise InterpError(f"unknown ablation method {method!r}; choose one of {', '.join(METHODS)}")
    tokens = check_tokens(model, tokens, min_len=2)
    m = prepare_metric(model, tokens, metric, loss_mask)
    reference_tokens = check_reference(model, tokens, method, reference_tokens)
    pos = position_mask(tokens.shape[1], positions)
    seed = check_seed(seed)
    with eval_no_grad(model):
        checked = check_cache(model, tokens, cache)
    return tokens, m, reference_tokens, pos, seed, checked


def check_reference(
    model: Any, tokens: torch.Tensor, method: str, reference_tokens: Any
) -> torch.Tensor | None:
    """``reference_tokens`` checked for ``method`` (``None`` stays ``None``).

    A mean over one sequence is refused: it is that sequence, so every head's
    effect would be 0. Resampling within the batch needs two sequences.

    Raises:
        InterpError: for reference tokens with zero ablation or patching, of
            another length than ``tokens``, mean ablation of one sequence
            without at least two reference sequences, a single reference
            sequence for a mean, or resampling one sequence without references.
    """
    if reference_tokens is not None:
        if method not in ("mean", "resample"):
            raise InterpError(f"reference_tokens are for mean and resample ablation, not {method}")
        reference_tokens = check_tokens(model, reference_tokens, min_len=2, name="reference_tokens")
        if reference_tokens.shape[1] != tokens.shape[1]:
            raise InterpError(
                f"reference tokens have length {reference_tokens.shape[1]} but tokens have "
                f"{tokens.shape[1]}; mean and resample ablation need equal lengths"
            )
    if method == "resample" and reference_tokens is None and tokens.shape[0] < 2:
        resample_index(tokens.shape[0], None, 0)  # raises the explanation, before any pass
    if method != "mean":
        return reference_tokens
    if reference_tokens is None and tokens.shape[0] < 2:
        raise InterpError(
            "mean ablation of a batch of one sequence replaces each head by its own output (the "
            "mean of one sequence is the sequence), so every effect would be 0; pass at least two "
            "sequences, or reference_tokens (>= 2 sequences of the same length) to average over"
        )
    if reference_tokens is not None and reference_tokens.shape[0] < 2:
        raise InterpError(
            "mean ablation over one reference sequence is patching from that sequence, not a "
            "mean; pass at least two reference sequences (or use method='resample')"
        )
    return reference_tokens


def record_ablation(
    df: pd.DataFrame,
    result: SweepResult,
    method: str,
    metric: Metric,
    model: Any,
    pos: Any,
    seed: int,
    reference: Any,
    analysis: str,
) -> pd.DataFrame:
    """``df`` with how the ablation was computed in ``df.attrs`` (exported with it)."""
    df.attrs.update(
        analysis=analysis,
        method=method,
        metric=metric.name,
        unit=metric.unit,
        model=model_name(model),
        positions=positions_label(pos),
        seed=seed,
        reference="the tokens" if reference is None else f"{reference.shape[0]} sequences",
        engine=result.path,
        engine_note=result.note,
        passes=result.passes,
    )
    return df


def ablate_heads(
    model: Any,
    tokens: torch.Tensor,
    *,
    method: Method = "zero",
    metric: Metric | Callable[[torch.Tensor, torch.Tensor], Any] | None = None,
    heads: Iterable[Any] | None = None,
    loss_mask: torch.Tensor | None = None,
    positions: Any = None,
    reference_tokens: torch.Tensor | None = None,
    cache: Any = None,
    batch_size: int | None = None,
    memory_budget: int | None = None,
    seed: int = 0,
    progress: bool = False,
) -> pd.DataFrame:
    """Ablate each head alone: columns ``layer, head, label, clean, ablated, delta``.

    ``delta = ablated - clean``; rows are layer-major, for ``heads`` (all by
    default). ``loss_mask`` selects the predictions the default loss counts;
    ``positions`` where the ablation applies. ``cache`` (of ``tokens``) supplies
    the activations mean and resample ablation need. ``batch_size`` edits share
    a forward pass (default: one on CPUs, as many as fit ``memory_budget``
    bytes elsewhere). ``df.attrs`` records the method, metric and engine path.

    Raises:
        InterpError: for an unknown method, heads out of range, a ``loss_mask``
            or reference batch that does not fit the tokens, ``loss_mask``
            beside a custom metric, a metric that needs an LM head the model
            lacks, a bad batch size, or a metric that returns a non-scalar or
            non-finite value.
    """
    tokens, m, reference_tokens, pos, seed, cache = prepare_ablation(
        model, tokens, method, metric, loss_mask, reference_tokens, positions, seed, cache
    )
    chosen = sorted(parse_heads(model, heads))
    with eval_no_grad(model):
        repl = replacements(
            model,
            tokens,
            method,
            [hook_name("z", l) for l in sorted({l for l, _ in chosen})],
            reference_tokens=reference_tokens,
            cache=cache,
            seed=seed,
        )
        result = sweep(
            model,
            tokens,
            head_edits(chosen, pos),
            m,
            values=repl,
            batch_size=batch_size,
            memory_budget=memory_budget,
            progress=progress,
            desc=f"{method} ablation",
        )
    df = rows_frame(
        chosen,
        {
            "clean": [result.clean] * len(chosen),
            "ablated": result.values,
            "delta": [v - result.clean for v in result.values],
        },
    )
    return record_ablation(
        df, result, method, m, model, pos, seed, reference_tokens, "ablate_heads (exact, per head)"
    )


def ablate_head_groups(
    model: Any,
    tokens: torch.Tensor,
    *,
    groups: Mapping[str, Iterable[Any]],
    method: Method = "zero",
    metric: Metric | Callable[[torch.Tensor, torch.Tensor], Any] | None = None,
    loss_mask: torch.Tensor | None = None,
    positions: Any = None,
    reference_tokens: torch.Tensor | None = None,
    cache: Any = None,
    batch_size: int | None = None,
    memory_budget: int | None = None,
    seed: int = 0,
    progress: bool = False,
) -> pd.DataFrame:
    """Ablate named sets of heads together: one row per group.

    Columns: ``group, heads, n_heads, clean, ablated, delta``, e.g. "top-6
    induction heads" against several sets of 6 random heads. Options as
    :func:`ablate_heads`.

    Raises:
        InterpError: as :func:`ablate_heads`, for ``groups`` that is not a
            mapping of names to heads, or for an empty group.
    """
    if not isinstance(groups, Mapping):
        raise InterpError(
            f"groups must be a mapping {{name: heads}}, got {type(groups).__name__}; e.g. "
            "{'induction': ['L1H1', 'L1H0'], 'random': [(0, 1)]}"
        )
    if not groups:
        raise InterpError("no groups given: pass {name: [heads]}")
    tokens, m, reference_tokens, pos, seed, cache = prepare_ablation(
        model, tokens, method, metric, loss_mask, reference_tokens, positions, seed, cache
    )
    parsed = {str(g): parse_heads(model, hs) for g, hs in groups.items()}
    layers = {l for hs in parsed.values() for l, _ in hs}
    with eval_no_grad(model):
        repl = replacements(
            model,
            tokens,
            method,
            [hook_name("z", l) for l in sorted(layers)],
            reference_tokens=reference_tokens,
            cache=cache,
            seed=seed,
        )
        result = sweep(
            model,
            tokens,
            [[e[0] for e in head_edits(hs, pos)] for hs in parsed.values()],
            m,
            values=repl,
            batch_size=batch_size,
            memory_budget=memory_budget,
            progress=progress,
            desc=f"{method} ablation (groups)",
        )
    df = pd.DataFrame(
        {
            "group": list(parsed),
            "heads": [",".join(f"L{l}H{h}" for l, h in hs) for hs in parsed.values()],
            "n_heads": [len(hs) for hs in parsed.values()],
            "clean": result.clean,
            "ablated": result.values,
            "delta": [v - result.clean for v in result.values],
        }
    )
    return record_ablation(
        df, result, method, m, model, pos, seed, reference_tokens, "ablate_head_groups (exact)"
    )


def sweep_plan(
    model: Any,
    tokens: torch.Tensor,
    *,
    heads: Iterable[Any] | None = None,
    batch_size: int | None = None,
) -> dict[str, Any]:
    """What a per-head sweep of ``heads`` on ``tokens`` will run, without running it.

    Keys: ``path`` (the engine path, see :mod:`interp.analysis._sweep`),
    ``note`` (why a slower path, if so), ``edits``, ``edits_per_pass`` and
    ``passes`` (forward passes, the clean one included). Choosing the path may
    run its one-time exactness check on a small slice of ``tokens``.

    Raises:
        InterpError: for bad tokens or heads.
    """
    from interp.analysis._sweep import plan

    check_model(model)
    tokens = check_tokens(model, tokens)
    chosen = sorted(parse_heads(model, heads))
    with eval_no_grad(model):
        return plan(model, tokens, head_edits(chosen), batch_size)
