"""Helpers shared by the analysis modules (private to :mod:`interp.analysis`).

Input validation lives one layer down, in :mod:`interp.protocol`; here are
the table builder, cache reads and per-query-head weight views.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from interp.errors import InterpError
from interp.hooks import head_label, hook_name


def head_frame(values: dict[str, Any], n_layers: int, n_heads: int) -> pd.DataFrame:
    """A tidy table with one row per head: ``layer, head, label``, then the value columns.

    Each value is an array ``[n_layers, n_heads]``.
    """
    layers, heads = np.meshgrid(np.arange(n_layers), np.arange(n_heads), indexing="ij")
    columns: dict[str, Any] = {"layer": layers.ravel(), "head": heads.ravel()}
    columns["label"] = [head_label(l, h) for l, h in zip(columns["layer"], columns["head"])]
    for name, v in values.items():
        arr = v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
        columns[name] = arr.reshape(-1)
    return pd.DataFrame(columns)  # built in one go: per-column inserts cost ms on small tables


def rows_frame(rows: Sequence[tuple[int, int]], values: dict[str, Sequence[Any]]) -> pd.DataFrame:
    """A tidy table for the listed heads only: ``layer, head, label``, then ``values``."""
    columns: dict[str, Any] = {
        "layer": [l for l, _ in rows],
        "head": [h for _, h in rows],
        "label": [head_label(l, h) for l, h in rows],
    }
    columns.update({k: list(v) for k, v in values.items()})
    return pd.DataFrame(columns)


# Hooks whose values do not depend on the token ids (only on positions): a cache that
# holds only these cannot show which tokens it was built on.
_TOKEN_FREE = ("hook_pos_embed", "pos_embed.", "rotary_emb.", "hook_cos", "hook_sin")


class _StopAt(Exception):
    """Raised from a hook to end a forward pass once what it was run for is known."""


def activation_of(model: Any, tokens: torch.Tensor, name: str) -> torch.Tensor:
    """The activation ``name`` on ``tokens``, from a forward pass stopped as soon as it fires.

    Costs the part of a forward pass before the hook (nothing for ``hook_embed``).

    Raises:
        InterpError: if the hook never fires.
    """
    got = cache_of(model, tokens, [name])
    if name not in got:
        raise InterpError(f"the model's hook {name} never fired on these tokens")
    return got[name]


def run_until(model: Any, tokens: torch.Tensor, fwd_hooks: Sequence[tuple], last: str) -> None:
    """``model.run_with_hooks(tokens, fwd_hooks=fwd_hooks)`` for the hooks' side effects,
    stopped right after the hooks on ``last`` have run (no later block, no unembedding).

    Raises:
        InterpError: if ``last`` never fires.
    """

    def stop(x: torch.Tensor, hook: Any) -> None:
        raise _StopAt

    try:
        model.run_with_hooks(tokens, fwd_hooks=[*fwd_hooks, (last, stop)])
    except _StopAt:
        return
    raise InterpError(f"the model's hook {last} never fired on these tokens")


def cache_of(model: Any, tokens: torch.Tensor, names: Sequence[str]) -> dict[str, torch.Tensor]:
    """``{name: activation}`` for the hooks ``names`` on ``tokens``: one forward pass,
    stopped as soon as the last of them has fired (no later block, no unembedding).

    Equal to ``model.run_with_cache(tokens, names_filter=names)[1]`` for those names;
    a name the model never fires is simply absent (the caller names the problem).

    Example:
        >>> from interp.models import load_induction_model
        >>> acts = cache_of(load_induction_model(), torch.tensor([[0, 1, 2]]),
        ...                 ["blocks.0.attn.hook_pattern"])
        >>> list(acts), tuple(acts["blocks.0.attn.hook_pattern"].shape)
        (['blocks.0.attn.hook_pattern'], (1, 2, 3, 3))
    """
    wanted = list(dict.fromkeys(names))
    acts: dict[str, torch.Tensor] = {}

    def keeper(name: str) -> Callable:  # keyed by the name asked for (bridges alias hooks)
        def keep(x: torch.Tensor, hook: Any) -> None:
            acts[name] = x.detach()
            if len(acts) == len(wanted):
                raise _StopAt

        return keep

    try:
        with torch.no_grad():
            model.run_with_hooks(tokens, fwd_hooks=[(n, keeper(n)) for n in wanted])
    except _StopAt:
        pass
    return {n: acts[n] for n in names if n in acts}


def _stage(name: str) -> tuple[int, int, int]:
    """Sort key: how much of a forward pass runs before ``name`` fires (roughly)."""
    parts = name.split(".")
    if parts[0] == "blocks" and len(parts) > 1 and parts[1].isdigit():
        first = 0 if parts[-1] in ("hook_resid_pre", "hook_in") and len(parts) == 3 else 1
        return (1, int(parts[1]), first)
    if parts[0] in ("hook_embed", "embed", "hook_tokens"):
        return (0, 0, 0 if name == "hook_embed" else 1)
    return (2, 0, 0)


def _with_batch(x: Any, tokens: torch.Tensor) -> Any:
    """A cached activation with its batch dimension (caches built with remove_batch_dim lack it)."""
    if isinstance(x, torch.Tensor) and tokens.shape[0] == 1 and x.ndim >= 1 and x.shape[0] != 1:
        return x[None]
    return x


def _seq_dim(name: str) -> int:
    return 2 if "hook_pattern" in name or "hook_attn_scores" in name else 1


class CheckedCache:
    """A cache checked against its tokens (:func:`check_cache`); read it like a dict.

    ``cache[name]`` is the activation with its batch dimension. Hooks the
    source cache lacks are computed on the checked tokens by one forward pass
    for all of them (:meth:`complete`), never taken from another run.
    """

    def __init__(self, model: Any, tokens: torch.Tensor, source: Any, evidence: str):
        self.model = model
        self.tokens = tokens
        self.source = source
        self.evidence = evidence
        self.added: dict[str, torch.Tensor] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.added or name in self.source

    def complete(self, names: Sequence[str]) -> CheckedCache:
        """Compute the hooks of ``names`` the cache lacks, in one forward pass."""
        missing = [n for n in names if n not in self]
        if missing:
            extra = cache_of(self.model, self.tokens, missing)
            lacking = [n for n in missing if n not in extra]
            if lacking:
                raise InterpError(f"this model has no hook {lacking[0]}")
            self.added.update({n: extra[n] for n in missing})
        return self

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self:
            self.complete([name])
        x = self.added[name] if name in self.added else self.source[name]
        x = _with_batch(x, self.tokens)
        batch, pos = self.tokens.shape
        if not isinstance(x, torch.Tensor) or x.shape[0] != batch or x.shape[_seq_dim(name)] != pos:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise InterpError(
                f"cache {name} has shape {shape}, which does not match tokens "
                f"{tuple(self.tokens.shape)}; pass the cache of these tokens"
            )
        return x.to(self.tokens.device)


def check_cache(
    model: Any, tokens: torch.Tensor, cache: Any, *, needs: Sequence[str] = ()
) -> CheckedCache | None:
    """``cache`` checked against ``tokens``, with the hooks in ``needs`` completed.

    The one rule for every ``cache=`` in :mod:`interp.analysis`: a cache is
    only read after its earliest token-dependent activation (``hook_embed``
    when it holds it: a table lookup) has been recomputed on ``tokens`` by a
    forward pass stopped right there, and found equal. A cache of other
    tokens, of other shapes, of another model, or an empty one is refused; a
    cache that lacks hooks the function reads is completed by one forward pass
    on ``tokens`` (the caller's cache object is not changed). ``None`` stays
    ``None`` (the function runs the model itself).

    Raises:
        InterpError: for something that is not a cache, an empty cache, a cache
            holding none of the model's hooks, or one built on other tokens.
    """
    if cache is None:
        return None
    if isinstance(cache, CheckedCache):
        if cache.model is not model or not torch.equal(cache.tokens, tokens):
            raise InterpError("this cache was checked against other tokens or another model")
        return cache.complete(needs)
    if not (hasattr(cache, "keys") and hasattr(cache, "__getitem__")):
        raise InterpError(
            f"cache must be an ActivationCache (or a dict of hook name to tensor), got "
            f"{type(cache).__name__}; build it with model.run_with_cache(tokens)"
        )
    keys = [str(k) for k in cache.keys()]
    if not keys:
        raise InterpError(
            "the cache is empty; build it with model.run_with_cache(tokens), or pass cache=None"
        )
    known = hook_names(model)
    usable = [k for k in keys if k in known and not any(t in k for t in _TOKEN_FREE)]
    if not usable:
        raise InterpError(
            f"the cache holds no activation of this model that depends on the tokens (its keys "
            f"start {keys[:3]}); pass the cache of this model on these tokens"
        )
    evidence = min(usable, key=_stage)
    given = _with_batch(cache[evidence], tokens)
    fresh = activation_of(model, tokens, evidence)
    if not isinstance(given, torch.Tensor) or tuple(given.shape) != tuple(fresh.shape):
        shape = tuple(given.shape) if isinstance(given, torch.Tensor) else type(given).__name__
        raise InterpError(
            f"the cache does not belong to these tokens: its {evidence} has shape {shape}, "
            f"these tokens {tuple(tokens.shape)} give {tuple(fresh.shape)}; pass the cache of "
            "these tokens"
        )
    g, f = given.detach().to(fresh.device).float(), fresh.float()
    tol = 1e-4 * max(1.0, float(f.abs().max())) if f.numel() else 0.0
    gap = float((g - f).abs().max()) if f.numel() else 0.0
    if not gap <= tol:  # NaN counts as a mismatch
        raise InterpError(
            f"the cache does not belong to these tokens: its {evidence} differs from a fresh run "
            f"on them by {gap:.3g}; build it with model.run_with_cache(tokens) on the same tokens"
        )
    return CheckedCache(model, tokens, cache, evidence).complete(needs)


def patterns(
    model: Any, tokens: torch.Tensor, *, cache: Any = None, layers: Sequence[int] | None = None
) -> list[torch.Tensor]:
    """Attention patterns ``[batch, head, query_pos, key_pos]`` per layer (float32).

    Reads them from ``cache`` when given (checked against ``tokens``:
    :func:`check_cache`), else runs the model once caching only ``hook_pattern``.

    Raises:
        InterpError: if the model (or cache) has no attention patterns.
    """
    cfg = model.cfg
    layers = list(range(cfg.n_layers)) if layers is None else list(layers)
    names = [hook_name("pattern", l) for l in layers]
    missing = [n for n in names if n not in hook_names(model)]
    if missing:
        raise InterpError(f"no attention patterns at {missing[0]}: the model lacks hook_pattern")
    checked = check_cache(model, tokens, cache, needs=names)
    if checked is None:
        checked = cache_of(model, tokens, names)
    return [_with_batch(checked[n], tokens).float() for n in names]


def head_weight(model: Any, name: str) -> torch.Tensor:
    """``model.<name>`` with one entry per *query* head: ``[n_layers, n_heads, ...]``.

    Grouped-query attention models (e.g. SmolLM2: 9 query heads, 3 key/value
    heads) store ``W_K``/``W_V`` per key/value head; query head ``h`` uses
    key/value head ``h // (n_heads // n_kv_heads)``, so those are repeated.
    """
    W = getattr(model, name).detach()
    n_heads = int(model.cfg.n_heads)
    if W.shape[1] != n_heads:
        if n_heads % W.shape[1]:
            raise InterpError(f"{name} has {W.shape[1]} heads, not a divisor of {n_heads}")
        W = W.repeat_interleave(n_heads // W.shape[1], dim=1)
    return W


def per_query_heads(x: torch.Tensor, n_heads: int, dim: int = 2) -> torch.Tensor:
    """Repeat grouped key/value heads along ``dim`` so there is one per query head."""
    if x.shape[dim] == n_heads:
        return x
    return x.repeat_interleave(n_heads // x.shape[dim], dim=dim)


def hook_names(model: Any) -> set[str]:
    """Every hook name the model exposes."""
    names = set(getattr(model, "hook_dict", {}) or {})
    if not names and hasattr(model, "hook_points"):
        names = {h.name for h in model.hook_points()}
    return names


class FrozenParams:
    """Parameters stop requiring grad for the duration (only activation gradients are taken)."""

    def __init__(self, model: Any):
        self.params = (
            [p for p in model.parameters() if p.requires_grad]
            if hasattr(model, "parameters")
            else []
        )

    def __enter__(self) -> None:
        for p in self.params:
            p.requires_grad_(False)

    def __exit__(self, *exc: Any) -> None:
        for p in self.params:
            p.requires_grad_(True)
