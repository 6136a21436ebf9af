"""Head ablations and activation patching: what a metric does when heads are edited.

An ablation replaces a head's output *before* the output projection, at
``blocks.{l}.attn.hook_z`` (``[batch, pos, head, d_head]``), so nothing of the
head reaches the residual stream through ``W_O`` (the output bias ``b_O`` is
shared by the layer's heads and stays). Methods:

* ``zero``: ``z = 0``;
* ``mean``: ``z`` replaced by its mean over a reference batch, per position
  (reference sequences must have the same length as ``tokens``);
* ``resample``: ``z`` of each sequence replaced by the head's ``z`` on a
  different, randomly matched (seeded) sequence of the reference batch.

:func:`patch_heads` is the converse: each head's clean ``hook_z`` is spliced
into a corrupted run. All sweeps run on the batched engine in
:mod:`interp.analysis._sweep` and equal one ``run_with_hooks`` per edit.

The model runs in eval mode under ``torch.no_grad()`` (its previous mode is
restored). The default metric is the mean next-token loss over ``positions``
(a ``[batch, pos]`` bool mask of predicting positions, all by default).

Example:
    >>> table = ablate_heads(model, data.tokens, positions=data.loss_mask)  # doctest: +SKIP
    >>> table.nlargest(3, "delta")                                           # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

import pandas as pd
import torch
import torch.nn.functional as F

from interp.analysis._common import check_model, check_tokens, head_frame, parse_heads
from interp.analysis._sweep import sweep
from interp.errors import InterpError
from interp.hooks import head_label, hook_name

Method = Literal["zero", "mean", "resample"]
METHODS: tuple[str, ...] = ("zero", "mean", "resample")
Metric = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def loss_metric(positions: torch.Tensor | None = None) -> Metric:
    """Mean next-token cross-entropy over ``positions`` (``[batch, pos]`` bool, predicting side)."""

    def metric(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        logp = F.log_softmax(logits[:, :-1].float(), dim=-1)
        nll = -logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)  # [batch, pos - 1]
        if positions is None:
            return nll.mean()
        m = positions[:, :-1].to(nll.dtype)
        return (nll * m).sum() / m.sum()

    metric.__name__ = "loss"
    return metric


def logit_diff_metric(correct: int, incorrect: int, *, position: int = -1) -> Metric:
    """Mean over the batch of ``logit[correct] - logit[incorrect]`` at ``position``."""

    def metric(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        at = logits[:, position].float()
        return (at[:, correct] - at[:, incorrect]).mean()

    metric.__name__ = "logit_diff"
    return metric


def zero_head_hooks(model: Any, heads: Iterable[Any]) -> list[tuple[str, Callable]]:
    """``fwd_hooks`` for ``run_with_hooks`` that zero the given heads' ``hook_z``.

    Example:
        >>> hooks = zero_head_hooks(model, ["L1H1"])             # doctest: +SKIP
        >>> model.run_with_hooks(tokens, fwd_hooks=hooks)       # doctest: +SKIP

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


@contextlib.contextmanager
def eval_no_grad(model: Any) -> Iterator[None]:
    """Eval mode and no gradients for the duration; the previous mode is restored."""
    modules = list(model.modules()) if hasattr(model, "modules") else []
    training = [m for m in modules if m.training]
    if training:  # eval() sets every submodule; skip it when all are in eval mode already
        model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for m in training:  # restore exactly the modules that were training
            m.training = True


def _scalar(value: Any, name: str) -> float:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise InterpError(
                f"metric {name!r} must return a scalar, got shape {tuple(value.shape)}"
            )
        value = value.item()
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise InterpError(
            f"metric {name!r} must return a number, got {type(value).__name__}"
        ) from None
    if not math.isfinite(out):
        raise InterpError(f"metric {name!r} returned {out}; check the positions and the model")
    return out


def _check_positions(tokens: torch.Tensor, positions: torch.Tensor | None) -> None:
    if positions is None:
        return
    if tuple(positions.shape) != tuple(tokens.shape):
        raise InterpError(
            f"positions mask has shape {tuple(positions.shape)} "
            f"but tokens are {tuple(tokens.shape)}"
        )
    if not positions[:, :-1].any():
        raise InterpError("positions mask selects no predicting position")


def _replacements(
    model: Any,
    tokens: torch.Tensor,
    method: str,
    layers: set[int],
    reference: torch.Tensor | None,
    seed: int,
) -> dict[int, torch.Tensor]:
    """Per layer, the ``hook_z`` value to splice in: ``[batch, pos, head, d_head]``."""
    if method == "zero":
        return {}
    ref = tokens if reference is None else reference
    if ref.shape[1] != tokens.shape[1]:
        raise InterpError(
            f"reference tokens have length {ref.shape[1]} but tokens have {tokens.shape[1]}; "
            "mean and resample ablation need equal lengths"
        )
    names = [hook_name("z", l) for l in sorted(layers)]
    _, cache = model.run_with_cache(ref, names_filter=names)
    out = {}
    if method == "mean":
        for l in layers:
            out[l] = (
                cache[hook_name("z", l)].mean(0, keepdim=True).expand(tokens.shape[0], -1, -1, -1)
            )
    else:
        if ref.shape[0] < 2 and reference is None:
            raise InterpError("resample ablation needs at least two sequences to draw from")
        gen = torch.Generator().manual_seed(seed)
        n_ref = ref.shape[0]
        idx = torch.randint(n_ref - 1, (tokens.shape[0],), generator=gen)
        if reference is None:  # draw a *different* sequence of the same batch
            idx = idx + (idx >= torch.arange(tokens.shape[0])).long()
        for l in layers:
            out[l] = cache[hook_name("z", l)][idx]
    return out


def _prepare(model, tokens, method, metric, positions, reference_tokens):
    cfg = check_model(model)
    if method not in METHODS:
        raise InterpError(f"unknown ablation method {method!r}; choose one of {', '.join(METHODS)}")
    tokens = check_tokens(model, tokens, min_len=2)
    _check_positions(tokens, positions)
    if reference_tokens is not None:
        reference_tokens = check_tokens(model, reference_tokens, min_len=2)
    if metric is None or getattr(metric, "__name__", "") == "loss":
        if not getattr(model, "interp_logits_meaningful", True):
            raise InterpError(
                "this model's logits are meaningless (the checkpoint has no language-model "
                "head), so loss metrics are refused; pass a metric on activations instead"
            )
    if metric is None:
        metric = loss_metric(positions)
    elif not callable(metric):
        raise InterpError(f"metric must be a callable metric(logits, tokens), got {metric!r}")
    return cfg, tokens, metric, reference_tokens


def _metric_values(values: list[Any], name: str) -> list[float]:
    return [_scalar(v, name) for v in values]


def ablate_heads(
    model: Any,
    tokens: torch.Tensor,
    *,
    method: Method = "zero",
    metric: Metric | None = None,
    heads: Iterable[Any] | None = None,
    reference_tokens: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
    batch_size: int | None = None,
    memory_budget: int | None = None,
    seed: int = 0,
    progress: bool = False,
) -> pd.DataFrame:
    """Ablate each head alone: columns ``layer, head, label, clean, ablated, delta``.

    ``delta = ablated - clean``. Heads not in ``heads`` are left out of the
    table. ``df.attrs`` records the method and the metric's name. The sweep
    is batched (see :mod:`interp.analysis._sweep`): ``batch_size`` ablations
    per forward pass, or as many as fit ``memory_budget`` bytes (default a
    quarter of free RAM); results equal one ``run_with_hooks`` per head.

    Raises:
        InterpError: for an unknown method, heads out of range, a positions
            mask or reference batch that does not fit the tokens, or a metric
            that returns a non-scalar or non-finite value.
    """
    cfg, tokens, metric, reference_tokens = _prepare(
        model, tokens, method, metric, positions, reference_tokens
    )
    chosen = parse_heads(model, heads)
    name = getattr(metric, "__name__", "metric")
    with eval_no_grad(model):
        repl = _replacements(model, tokens, method, {l for l, _ in chosen}, reference_tokens, seed)
        raw, clean = sweep(
            model,
            tokens,
            [[lh] for lh in chosen],
            metric,
            replacement=repl or None,
            batch_size=batch_size,
            memory_budget=memory_budget,
            progress=progress,
            desc=f"{method} ablation",
            return_clean=True,
        )
        values, clean = _metric_values(raw, name), _scalar(clean, name)
    rows = sorted(dict(zip(chosen, values)).items())  # one row per head, layer-major
    ablated = [v for _, v in rows]
    df = pd.DataFrame(
        {
            "layer": [l for (l, _), _ in rows],
            "head": [h for (_, h), _ in rows],
            "label": [head_label(l, h) for (l, h), _ in rows],
            "clean": clean,
            "ablated": ablated,
            "delta": [v - clean for v in ablated],
        }
    )
    df.attrs.update(method=method, metric=name)
    return df


def ablate_head_groups(
    model: Any,
    tokens: torch.Tensor,
    groups: Mapping[str, Iterable[Any]],
    *,
    method: Method = "zero",
    metric: Metric | None = None,
    reference_tokens: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
    batch_size: int | None = None,
    memory_budget: int | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """Ablate named sets of heads together.

    Columns: ``group, heads, n_heads, clean, ablated, delta`` (one row per group),
    e.g. "top-6 induction heads" against several sets of 6 random heads.

    Raises:
        InterpError: as :func:`ablate_heads`, or for an empty group.
    """
    cfg, tokens, metric, reference_tokens = _prepare(
        model, tokens, method, metric, positions, reference_tokens
    )
    if not groups:
        raise InterpError("no groups given: pass {name: [heads]}")
    parsed = {g: parse_heads(model, hs) for g, hs in groups.items()}
    name = getattr(metric, "__name__", "metric")
    layers = {l for hs in parsed.values() for l, _ in hs}
    with eval_no_grad(model):
        repl = _replacements(model, tokens, method, layers, reference_tokens, seed)
        raw, clean = sweep(
            model,
            tokens,
            list(parsed.values()),
            metric,
            replacement=repl or None,
            batch_size=batch_size,
            memory_budget=memory_budget,
            return_clean=True,
        )
        values, clean = _metric_values(raw, name), _scalar(clean, name)
    rows = [
        {
            "group": g,
            "heads": ",".join(f"L{l}H{h}" for l, h in hs),
            "n_heads": len(hs),
            "clean": clean,
            "ablated": v,
            "delta": v - clean,
        }
        for (g, hs), v in zip(parsed.items(), values)
    ]
    df = pd.DataFrame(rows)
    df.attrs.update(method=method, metric=name)
    return df


def patch_heads(
    model: Any,
    clean_tokens: torch.Tensor,
    corrupted_tokens: torch.Tensor,
    *,
    metric: Metric,
    heads: Iterable[Any] | None = None,
    positions: Sequence[int] | torch.Tensor | None = None,
    batch_size: int | None = None,
    memory_budget: int | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """Per-head activation patching: the clean run's ``hook_z`` of one head into the corrupted run.

    Columns: ``layer, head, label, clean, corrupted, patched, delta`` (``patched
    - corrupted``) and ``normalized`` (``delta / (clean - corrupted)``: 1 means
    this head alone restores the clean metric, 0 means no effect). ``positions``
    (ints or a ``[pos]`` bool mask) restricts patching to those positions; all by
    default, as TransformerLens's ``get_act_patch_attn_head_out_all_pos``.

    Raises:
        InterpError: when clean and corrupted tokens differ in shape, a metric
            returns a non-scalar, or clean and corrupted metrics are equal
            (nothing to normalise by: ``normalized`` would divide by zero).
    """
    cfg = check_model(model)
    clean_tokens = check_tokens(model, clean_tokens, min_len=1)
    corrupted_tokens = check_tokens(model, corrupted_tokens, min_len=1)
    if clean_tokens.shape != corrupted_tokens.shape:
        raise InterpError(
            f"clean tokens {tuple(clean_tokens.shape)} and corrupted tokens "
            f"{tuple(corrupted_tokens.shape)} must have the same shape (same length prompts)"
        )
    if not callable(metric):
        raise InterpError("patch_heads needs metric(logits, tokens) -> scalar")
    n = clean_tokens.shape[1]
    pos_mask = None
    if positions is not None:
        pos_mask = torch.as_tensor(positions)
        if pos_mask.dtype != torch.bool:
            idx = pos_mask.long()
            if idx.numel() == 0 or int(idx.min()) < -n or int(idx.max()) >= n:
                raise InterpError(f"positions {idx.tolist()} out of range for length {n}")
            pos_mask = torch.zeros(n, dtype=torch.bool)
            pos_mask[idx % n] = True
        elif pos_mask.shape != (n,):
            raise InterpError(f"positions mask must have shape ({n},), got {tuple(pos_mask.shape)}")
    chosen = parse_heads(model, heads)
    name = getattr(metric, "__name__", "metric")
    layers = sorted({l for l, _ in chosen})
    with eval_no_grad(model):
        clean_logits, cache = model.run_with_cache(
            clean_tokens, names_filter=[hook_name("z", l) for l in layers]
        )
        clean = _scalar(metric(clean_logits, clean_tokens), name)
        repl = {l: cache[hook_name("z", l)] for l in layers}
        raw, corrupted = sweep(
            model,
            corrupted_tokens,
            [[lh] for lh in chosen],
            metric,
            replacement=repl,
            positions=pos_mask,
            batch_size=batch_size,
            memory_budget=memory_budget,
            progress=progress,
            desc="patching",
            return_clean=True,
        )
        values, corrupted = _metric_values(raw, name), _scalar(corrupted, name)
    if clean == corrupted:
        raise InterpError("clean and corrupted runs give the same metric; nothing to patch")
    patched = torch.full((cfg.n_layers, cfg.n_heads), float("nan"), dtype=torch.float64)
    for (l, h), v in zip(chosen, values):
        patched[l, h] = v
    df = head_frame({"patched": patched}, cfg.n_layers, cfg.n_heads)
    df = df.dropna(subset=["patched"]).reset_index(drop=True)
    df.insert(3, "clean", clean)
    df.insert(4, "corrupted", corrupted)
    df["delta"] = df["patched"] - corrupted
    df["normalized"] = df["delta"] / (clean - corrupted)
    df.attrs.update(method="patch", metric=name)
    return df
