"""Reading activations: forward passes stopped once what they were run for is known, and caches.

Every analysis that reads activations gets them here: :func:`cache_of` keeps
the hooks it is asked for and stops the forward pass as soon as the last one
has fired (no later block, no unembedding); :func:`run_until` runs hooks for
their side effects the same way; :class:`StopForward` is the one signal a hook
raises to end a pass. :func:`check_cache` is the one rule for every ``cache=``:
a cache is read only after its earliest token-dependent activation has been
recomputed on the tokens and found equal.

Example:
    >>> import torch
    >>> from interp.models import load_model
    >>> acts = cache_of(load_model("induction-2l"), torch.tensor([[0, 1, 2]]),
    ...                 ["blocks.0.attn.hook_pattern"])
    >>> list(acts), tuple(acts["blocks.0.attn.hook_pattern"].shape)
    (['blocks.0.attn.hook_pattern'], (1, 2, 3, 3))
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import torch

from interp.core.errors import InterpError
from interp.core.protocol import HookedModel, hook_names
from interp.runtime import Runtime, runtime_of

# Hooks whose values do not depend on the token ids (only on positions): a cache that
# holds only these cannot show which tokens it was built on.
_TOKEN_FREE = ("hook_pos_embed", "pos_embed.", "rotary_emb.", "hook_cos", "hook_sin")


class StopForward(Exception):  # noqa: N818 - a signal, not an error
    """Raised from a hook to end a forward pass once what it was run for is known.

    ``value`` carries what the hook saw (or None)."""

    def __init__(self, value: Any = None):
        super().__init__("forward pass stopped by a hook")
        self.value = value


def activation_of(model: HookedModel, tokens: torch.Tensor, name: str) -> torch.Tensor:
    """The activation ``name`` on ``tokens``, from a forward pass stopped as soon as it fires.

    Costs the part of a forward pass before the hook (nothing for ``hook_embed``).

    Raises:
        InterpError: if the hook never fires.
    """
    return activation_in(runtime_of(model), tokens, name)


def activation_in(rt: Runtime, tokens: torch.Tensor, name: str) -> torch.Tensor:
    """:func:`activation_of` through the model's runtime ``rt`` (an engine that holds it):
    one pass, stopped once hook ``name`` has fired.

    Example:
        >>> import torch
        >>> from interp.models import load_model
        >>> from interp.runtime import runtime_of
        >>> rt = runtime_of(load_model("induction-2l"))
        >>> tuple(activation_in(rt, torch.tensor([[0, 5, 6]]), "blocks.0.hook_resid_pre").shape)
        (1, 3, 128)

    Args:
        rt: The model's runtime (:func:`interp.runtime.runtime_of`).
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence).
        name: The hook whose activation is read.

    Returns:
        The activation, detached.

    Raises:
        InterpError: if the hook never fires.
    """
    got = cache_in(rt, tokens, [name])
    if name not in got:
        raise InterpError(f"the model's hook {name} never fired on these tokens")
    return got[name]


def run_until(
    model: HookedModel, tokens: torch.Tensor, fwd_hooks: Sequence[tuple], last: str
) -> None:
    """One pass of the model's runtime over ``tokens`` with ``fwd_hooks``, for the hooks' side
    effects, stopped right after the hooks on ``last`` have run (no later block, no
    unembedding).

    Raises:
        InterpError: if ``last`` never fires.
    """

    def stop(x: torch.Tensor, hook: Any) -> None:
        raise StopForward

    try:
        runtime_of(model).run(tokens, hooks=[*fwd_hooks, (last, stop)])
    except StopForward:
        return
    raise InterpError(f"the model's hook {last} never fired on these tokens")


def cache_of(
    model: HookedModel, tokens: torch.Tensor, names: Sequence[str]
) -> dict[str, torch.Tensor]:
    """``{name: activation}`` for the hooks ``names`` on ``tokens``: one forward pass,
    stopped as soon as the last of them has fired (no later block, no unembedding).

    Equal to ``model.run_with_cache(tokens, names_filter=names)[1]`` for those names;
    a name the model never fires is simply absent (the caller names the problem).
    """
    return cache_in(runtime_of(model), tokens, names)


def cache_in(rt: Runtime, tokens: torch.Tensor, names: Sequence[str]) -> dict[str, torch.Tensor]:
    """:func:`cache_of` through the model's runtime ``rt`` (an engine that holds it): one
    pass, stopped once every hook in ``names`` has fired.

    Example:
        >>> import torch
        >>> from interp.models import load_model
        >>> from interp.runtime import runtime_of
        >>> rt = runtime_of(load_model("induction-2l"))
        >>> sorted(cache_in(rt, torch.tensor([[0, 5, 6]]), ["blocks.1.attn.hook_z"]))
        ['blocks.1.attn.hook_z']

    Args:
        rt: The model's runtime (:func:`interp.runtime.runtime_of`).
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence).
        names: The hooks whose activations are read.

    Returns:
        ``{name: activation}`` (detached) for each name that fired.
    """
    wanted = list(dict.fromkeys(names))
    acts: dict[str, torch.Tensor] = {}

    def keeper(name: str) -> Callable:  # keyed by the name asked for (bridges alias hooks)
        def keep(x: torch.Tensor, hook: Any) -> None:
            acts[name] = x.detach()
            if len(acts) == len(wanted):
                raise StopForward

        return keep

    try:
        with torch.no_grad():
            rt.run(tokens, hooks=[(n, keeper(n)) for n in wanted])
    except StopForward:
        pass
    return {n: acts[n] for n in names if n in acts}


def blocks_before(n_layers: int, names: Sequence[str]) -> int:
    """How many blocks a :func:`cache_of` pass for ``names`` runs before the last of them
    fires (0 for the embedding, every block for a hook past the last one).

    Example:
        >>> blocks_before(4, ["hook_embed", "blocks.1.attn.hook_z"])
        2
        >>> blocks_before(4, ["ln_final.hook_normalized"]), blocks_before(4, ["hook_embed"])
        (4, 0)
    """
    last = max((_stage(n) for n in names), default=(0, 0, 0))
    if last[0] == 0:
        return 0
    if last[0] == 2:
        return n_layers
    return min(n_layers, last[1] + last[2])


def pass_share(n_layers: int, names: Sequence[str]) -> float:
    """The forward-equivalents of a :func:`cache_of` pass for ``names``: the share of the
    blocks it runs (:func:`blocks_before`).

    Example:
        >>> pass_share(4, ["hook_embed", "blocks.1.attn.hook_z"])
        0.5
    """
    return blocks_before(n_layers, names) / max(1, n_layers)


def _stage(name: str) -> tuple[int, int, int]:
    """Sort key: how much of a forward pass runs before ``name`` fires (roughly)."""
    parts = name.split(".")
    if parts[0] == "blocks" and len(parts) > 1 and parts[1].isdigit():
        first = 0 if parts[-1] in ("hook_resid_pre", "hook_in") and len(parts) == 3 else 1
        return (1, int(parts[1]), first)
    if parts[0] in ("hook_embed", "embed", "hook_tokens", "hook_pos_embed", "pos_embed"):
        return (0, 0, 0 if name == "hook_embed" else 1)  # the embeddings: before every block
    return (2, 0, 0)


def with_batch(x: Any, tokens: torch.Tensor) -> Any:
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

    def __init__(self, model: HookedModel, tokens: torch.Tensor, source: Any, evidence: str):
        self.model = model
        self.tokens = tokens
        self.source = source
        self.evidence = evidence
        self.added: dict[str, torch.Tensor] = {}
        # forward-equivalents run to check and complete it (analyses add them to their cost)
        self.work = pass_share(model.cfg.n_layers, [evidence])

    def __contains__(self, name: str) -> bool:
        return name in self.added or name in self.source

    def complete(self, names: Sequence[str]) -> CheckedCache:
        """Compute the hooks of ``names`` the cache lacks, in one forward pass."""
        missing = [n for n in names if n not in self]
        if missing:
            extra = cache_of(self.model, self.tokens, missing)
            self.work += pass_share(self.model.cfg.n_layers, missing)
            lacking = [n for n in missing if n not in extra]
            if lacking:
                raise InterpError(f"this model has no hook {lacking[0]}")
            self.added.update({n: extra[n] for n in missing})
        return self

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self:
            self.complete([name])
        x = self.added[name] if name in self.added else self.source[name]
        x = with_batch(x, self.tokens)
        batch, pos = self.tokens.shape
        if not isinstance(x, torch.Tensor) or x.shape[0] != batch or x.shape[_seq_dim(name)] != pos:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise InterpError(
                f"cache {name} has shape {shape}, which does not match tokens "
                f"{tuple(self.tokens.shape)}; pass the cache of these tokens"
            )
        return x.to(self.tokens.device)


class _Rows(CheckedCache):
    """The prompts ``rows`` of a checked cache (a chunk of its batch): activations are read
    from the whole cache and sliced, never recomputed."""

    def __init__(self, whole: CheckedCache, rows: slice):
        self.model, self.whole, self.rows_of = whole.model, whole, rows
        self.tokens = whole.tokens[rows]
        self.evidence, self.added, self.work = whole.evidence, {}, 0.0

    def __contains__(self, name: str) -> bool:
        return name in self.whole

    def complete(self, names: Sequence[str]) -> CheckedCache:
        self.whole.complete(names)
        return self

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.whole[name][self.rows_of]


def cache_rows(cache: CheckedCache | None, rows: slice) -> CheckedCache | None:
    """``cache`` restricted to the prompts ``rows`` (a chunk of the batch); ``None`` stays
    ``None``."""
    if cache is None or (rows.start in (0, None) and rows.stop >= cache.tokens.shape[0]):
        return cache
    return _Rows(cache, rows)


def cache_work(cache: CheckedCache | None, names: Sequence[str] = ()) -> float:
    """The forward-equivalents ``cache`` ran to check and complete itself (0 for ``None``),
    and will have run once it also holds ``names`` (the one pass :meth:`CheckedCache.complete`
    runs for those it lacks): what an estimate counts for a run that reads them."""
    if cache is None:
        return 0.0
    missing = [n for n in names if n not in cache]
    extra = pass_share(cache.model.cfg.n_layers, missing) if missing else 0.0
    return round(cache.work + extra, 3)


def check_cache(
    model: HookedModel, tokens: torch.Tensor, cache: Any, *, needs: Sequence[str] = ()
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
    known = set() if isinstance(cache, CheckedCache) else hook_names(model)  # checked once
    return check_cache_in(runtime_of(model), known, tokens, cache, needs=needs)


def check_cache_in(
    rt: Runtime,
    known: Collection[str],
    tokens: torch.Tensor,
    cache: Any,
    *,
    needs: Sequence[str] = (),
) -> CheckedCache | None:
    """:func:`check_cache` for an engine that holds the model's runtime ``rt`` and its hook
    names ``known`` (read once, at the start of its task).

    Args:
        rt: The model's runtime (:func:`interp.runtime.runtime_of`).
        known: Every hook name the model exposes (:func:`interp.core.protocol.hook_names`).
        tokens: The tokens the cache must belong to.
        cache: The cache, a :class:`CheckedCache` or None.
        needs: Hooks to complete.

    Returns:
        The :class:`CheckedCache`, or None for no cache.

    Raises:
        InterpError: as :func:`check_cache`.
    """
    model = rt.model
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
    usable = [k for k in keys if k in known and not any(t in k for t in _TOKEN_FREE)]
    if not usable:
        raise InterpError(
            f"the cache holds no activation of this model that depends on the tokens (its keys "
            f"start {keys[:3]}); pass the cache of this model on these tokens"
        )
    evidence = min(usable, key=_stage)
    given = with_batch(cache[evidence], tokens)
    fresh = activation_in(rt, tokens, evidence)
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
