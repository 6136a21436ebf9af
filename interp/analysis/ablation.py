"""Head ablations: what happens to a metric when one head (or a group) is knocked out.

An ablation replaces a head's output *before* the output projection, at
``blocks.{l}.attn.hook_z`` (``[batch, pos, head, d_head]``), so nothing of the
head reaches the residual stream through ``W_O`` (the output bias ``b_O`` is
shared by the layer's heads and stays). Methods:

* ``zero``: ``z = 0``;
* ``mean``: ``z`` replaced by its mean over a reference batch, per position
  (reference sequences must have the same length as ``tokens``);
* ``resample``: ``z`` of each sequence replaced by the head's ``z`` on a
  different, randomly matched (seeded) sequence of the reference batch.

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
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal

import pandas as pd
import torch
import torch.nn.functional as F

from interp.analysis._common import check_model, check_tokens, head_frame, parse_heads
from interp.errors import InterpError
from interp.hooks import hook_name

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


@contextlib.contextmanager
def eval_no_grad(model: Any) -> Iterator[None]:
    """Eval mode and no gradients for the duration; the previous mode is restored."""
    was_training = bool(getattr(model, "training", False))
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


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


def _run_ablated(
    model: Any,
    tokens: torch.Tensor,
    heads: list[tuple[int, int]],
    repl: Mapping[int, torch.Tensor],
    metric: Metric,
    name: str,
) -> float:
    by_layer: dict[int, list[int]] = {}
    for l, h in heads:
        by_layer.setdefault(l, []).append(h)

    def make_hook(layer: int, hs: list[int]):
        def hook(z: torch.Tensor, hook: Any) -> torch.Tensor:
            z = z.clone()
            if layer in repl:
                z[:, :, hs] = repl[layer][:, :, hs].to(z.dtype)
            else:
                z[:, :, hs] = 0.0
            return z

        return hook

    hooks = [(hook_name("z", l), make_hook(l, hs)) for l, hs in by_layer.items()]
    logits = model.run_with_hooks(tokens, fwd_hooks=hooks)
    return _scalar(metric(logits, tokens), name)


def _prepare(model, tokens, method, metric, positions, reference_tokens):
    cfg = check_model(model)
    if method not in METHODS:
        raise InterpError(f"unknown ablation method {method!r}; choose one of {', '.join(METHODS)}")
    tokens = check_tokens(model, tokens, min_len=2)
    _check_positions(tokens, positions)
    if reference_tokens is not None:
        reference_tokens = check_tokens(model, reference_tokens, min_len=2)
    if metric is None:
        metric = loss_metric(positions)
    elif not callable(metric):
        raise InterpError(f"metric must be a callable metric(logits, tokens), got {metric!r}")
    return cfg, tokens, metric, reference_tokens


def ablate_heads(
    model: Any,
    tokens: torch.Tensor,
    *,
    method: Method = "zero",
    metric: Metric | None = None,
    heads: Iterable[Any] | None = None,
    reference_tokens: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
    seed: int = 0,
    progress: bool = False,
) -> pd.DataFrame:
    """Ablate each head alone: columns ``layer, head, label, clean, ablated, delta``.

    ``delta = ablated - clean``. Heads not in ``heads`` are left out of the
    table. ``df.attrs`` records the method and the metric's name.

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
    from tqdm.auto import tqdm

    with eval_no_grad(model):
        clean = _scalar(metric(model(tokens), tokens), name)
        repl = _replacements(model, tokens, method, {l for l, _ in chosen}, reference_tokens, seed)
        ablated = torch.full((cfg.n_layers, cfg.n_heads), float("nan"))
        for l, h in tqdm(chosen, disable=not progress, desc=f"{method} ablation", unit="head"):
            ablated[l, h] = _run_ablated(model, tokens, [(l, h)], repl, metric, name)
    df = head_frame(
        {"clean": torch.full_like(ablated, clean), "ablated": ablated}, cfg.n_layers, cfg.n_heads
    )
    df = df.dropna(subset=["ablated"]).reset_index(drop=True)
    df["delta"] = df["ablated"] - df["clean"]
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
    seed: int = 0,
) -> pd.DataFrame:
    """Ablate named sets of heads together.

    Columns: ``group, heads, n_heads, clean, ablated, delta``.

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
    rows = []
    with eval_no_grad(model):
        clean = _scalar(metric(model(tokens), tokens), name)
        repl = _replacements(model, tokens, method, layers, reference_tokens, seed)
        for g, hs in parsed.items():
            value = _run_ablated(model, tokens, hs, repl, metric, name)
            rows.append(
                {
                    "group": g,
                    "heads": ",".join(f"L{l}H{h}" for l, h in hs),
                    "n_heads": len(hs),
                    "clean": clean,
                    "ablated": value,
                    "delta": value - clean,
                }
            )
    df = pd.DataFrame(rows)
    df.attrs.update(method=method, metric=name)
    return df
