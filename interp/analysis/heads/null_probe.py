"""Null-space probes: what a head's query (key, value) map ignores, tested by intervention.

The row space of a head's ``W_Q^T`` holds the residual directions its queries
read; its null space the directions that contribute nothing to the query.
Adding a null-space vector to a token's input therefore leaves the head's
query unchanged and, with the keys held fixed, its attention too, while other
heads, this head's own key and value, and the model output may still change.
:func:`null_space_probe` checks exactly that on a real model, with random
row-space directions as the control.

Where the direction is added. A head reads the *normalised* input when the
model has a pre-attention LayerNorm, and adding a vector before the
normalisation changes the normalised vector non-linearly (centring and
rescaling), so a null direction of ``W_Q^T`` would not stay null. We add the
direction *after* the normalisation, at the input the head's projections
actually read: ``blocks.{l}.ln1.hook_out`` on a TransformerBridge,
``blocks.{l}.ln1.hook_normalized`` on our models, ``blocks.{l}.hook_resid_pre``
on models without LayerNorm. (On such models this input also feeds the layer's
other heads, which is why their queries can change.)

Example:
    >>> from interp.models import load_induction_model
    >>> from interp.analysis.heads.scores import probe_tokens
    >>> model = load_induction_model()
    >>> df = null_space_probe(model, probe_tokens(model, n=4), layer=1, head=1, component="Q")
    >>> worst = df.groupby("space")["d_query"].max()
    >>> bool(worst["null_space"] < 1e-5), bool(worst["row_space"] > 0.5)
    (True, True)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from interp.analysis.heads.subspace import head_subspaces
from interp.core.checks import check_finite, check_int, check_seed, check_tokens, position_mask
from interp.core.errors import InterpError
from interp.core.head_checks import check_layer_head, parse_heads
from interp.core.hooks import head_label, hook_name
from interp.core.precision import worst
from interp.core.protocol import HookedModel, check_model, eval_no_grad
from interp.core.shapes import Tokens
from interp.engine.batching import check_work
from interp.engine.cache import cache_of, cache_work, check_cache
from interp.engine.cost import Flops, cache_pass_work, work_of
from interp.outputs.frames import described, head_frame
from interp.runtime import per_query_heads, runtime_of


def head_input_hook(model: HookedModel, layer: int) -> str:
    """The hook whose value the layer's Q/K/V projections read (see module docstring)."""
    return runtime_of(model).head_input_hook(layer)


AUTO_PROGRESS_PASSES = 100


def _input_vectors(
    model: HookedModel, tokens: Tokens, layers: list[int], cache: Any
) -> tuple[dict[int, torch.Tensor], float]:
    """Each layer's head input ``[batch, pos, d_model]``, from one pass (or the cache), and
    the forward-equivalents it took (:mod:`interp.engine.cost`: a pass stopped at the last
    input read, no unembedding)."""
    names = {l: head_input_hook(model, l) for l in layers}
    pos = tokens.shape[-1]
    with torch.no_grad():
        checked = check_cache(model, tokens, cache, needs=list(names.values()))
        if checked is None:
            work = cache_pass_work(model, pos, list(names.values()))
            acts = cache_of(model, tokens, list(names.values()))
        else:
            work, acts = work_of(model, pos, blocks=cache_work(checked)), checked
    return {l: acts[n].float() for l, n in names.items()}, work


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """``||a - b|| / ||b||`` (0 when both are 0)."""
    denom = float(b.norm())
    return float((a - b).norm()) / denom if denom > 0 else float((a - b).norm())


def _check_component(component: str) -> None:
    if component not in ("Q", "K", "V"):
        raise InterpError(
            "null_space_probe adds directions to a head's input, so component must be Q, K or "
            f"V; got {component!r} (use head_subspaces for O, QK and OV)"
        )


def null_space_probe(
    model: HookedModel,
    tokens: Tokens,
    *,
    layer: int,
    head: int,
    component: str = "Q",
    n_directions: int = 8,
    scale: float = 1.0,
    positions: Any = None,
    seed: int = 0,
    control: bool = True,
    cache: Any = None,
    progress: bool | None = None,
) -> pd.DataFrame:
    """Add random null-space (and row-space control) directions to a head's input; measure.

    Each direction is a random unit vector of the null space of the chosen map
    (``W_Q^T``, ``W_K^T`` or ``W_V^T`` of ``layer``/``head``), scaled to ``scale`` times the
    mean norm of the head's input at ``positions``, and added there in every sequence, at
    the input the head's projections read (after the normalisation: module docstring). A
    null-space direction leaves the head's query (key, value) unchanged; a row-space one is
    the control. Each direction costs two forward passes.

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``).
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence).
        layer: A block index: the head's layer.
        head: A head index within ``layer``.
        component: A named part of the model: the head's map whose null space is probed,
            ``'Q'`` (default), ``'K'`` or ``'V'``.
        n_directions: How many random directions per space (default 8).
        scale: Each direction's length, in units of the mean norm of the head's input at
            ``positions`` (finite, positive; default 1.0).
        positions: Where an intervention *edits*: ints (negative from the end) or a ``[pos]``
            bool mask; ``None`` is the last position.
        seed: Every random draw (the directions); the same seed gives the same numbers.
        control: Also add random row-space directions, the control (default ``True``).
        cache: An ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; hooks it lacks
            are computed by one forward pass. It supplies the clean activations.
        progress: Show a progress bar over the passes; ``None`` (default): when there are
            more than :data:`AUTO_PROGRESS_PASSES`.

    Returns:
        A table with one row per direction: ``layer, head, label, component, space``
        (``null_space`` or ``row_space``), ``direction``, then relative changes ``||new -
        clean|| / ||clean||``: ``d_query``, ``d_key``, ``d_value`` (this head, at the
        positions), ``d_other_queries`` (largest over the layer's other heads),
        ``d_pattern`` (max absolute change of this head's attention rows at the positions,
        keys free to change), ``d_pattern_fixed_keys`` (the same with every key and value
        held at its clean value, so only the query can move the pattern), ``d_output``
        (model output after the first probed position). ``attrs`` follow
        :data:`interp.outputs.frames.SCHEMA`, plus ``hook``, ``rank``, ``nullity`` and
        ``scale``.

    Raises:
        InterpError: for a layer/head out of range, ``component`` not Q/K/V, a
            map with no null space (full rank: nothing is ignored), positions
            out of range, a non-finite or non-positive ``scale``, fewer than one
            direction or more than the work limit allows
            (:func:`interp.engine.batching.check_work`), or bad tokens.
    """
    cfg = check_model(model)
    layer, head = check_layer_head(model, layer, head)
    _check_component(component)
    tokens = check_tokens(model, tokens)
    n = tokens.shape[1]
    scale = check_finite(scale, "scale", positive=True)
    n_directions = check_int(n_directions, "n_directions", minimum=1)
    seed = check_seed(seed)
    mask = position_mask(n, [n - 1] if positions is None else positions)
    positions = [int(p) for p in torch.nonzero(mask).flatten()]
    sub = head_subspaces(model, layer=layer, head=head, component=component)
    if sub.nullity == 0:
        raise InterpError(
            f"W_{component} of L{layer}H{head} has full rank {sub.rank} on d_model="
            f"{sub.shape[1]}: its null space is empty, so there is no ignored direction to probe"
        )
    work = 1 + 2 * n_directions * (2 if control else 1)  # two passes per direction
    check_work(work, what=f"probing {n_directions:,} directions", fix="use fewer n_directions")
    rng = np.random.default_rng(seed)
    spaces = {"null_space": sub.null_space}
    if control:
        spaces["row_space"] = sub.row_space
    in_name = head_input_hook(model, layer)
    names = [hook_name(k, layer) for k in ("q", "k", "v", "pattern")]
    pos_t = torch.tensor(positions, device=tokens.device)
    rows = []
    with eval_no_grad(model):
        checked = check_cache(model, tokens, cache, needs=[in_name, *names])
        if checked is None:
            clean_out, clean = _run_hooked_cache(model, tokens, [in_name, *names], [])
        else:
            clean = {nm: checked[nm] for nm in (in_name, *names)}
            clean_out = runtime_of(model).run(tokens)
        x = clean[in_name]
        size = float(x[:, pos_t].float().norm(dim=-1).mean()) * scale
        passes = 2 * n_directions * len(spaces)  # two forward passes per direction
        show = passes > AUTO_PROGRESS_PASSES if progress is None else bool(progress)
        bar = tqdm(total=passes, disable=not show, desc="null-space probe", unit="pass")
        try:
            for space, basis in spaces.items():
                for i in range(n_directions):
                    coef = rng.standard_normal(basis.shape[0])
                    d = coef @ basis
                    d = torch.as_tensor(
                        d / np.linalg.norm(d) * size, dtype=x.dtype, device=x.device
                    )
                    measured = _measure(
                        model, tokens, clean_out, clean, in_name, names, d, pos_t, head, cfg.n_heads
                    )
                    rows.append({"space": space, "direction": i, **measured})
                    bar.update(2)
        finally:
            bar.close()
    df = pd.DataFrame(rows)
    df.insert(0, "component", component)
    df.insert(0, "label", head_label(layer, head))
    df.insert(0, "head", head)
    df.insert(0, "layer", layer)
    return described(
        df,
        "null_space_probe",
        description="how much moving the input along null-space and row-space directions of a "
        "head's map changes what it computes",
        method="exact",
        unit="norm of the change",
        model=model,
        positions=positions,
        seed=seed,
        forward_equivalents=float(2 * len(rows) + 1),
        hook=in_name,
        nullity=sub.nullity,
        rank=sub.rank,
        scale=scale,
    )


def _measure(model: HookedModel, tokens, clean_out, clean, in_name, names, d, pos_t, head, n_heads):
    q_name, k_name, v_name, p_name = names

    def add(x: torch.Tensor, hook: Any) -> torch.Tensor:
        x = x.clone()
        x[:, pos_t] += d
        return x

    out, cache = _run_hooked_cache(model, tokens, names, [(in_name, add)])

    def keep(name):
        def hook(x, hook):
            return clean[name]

        return hook

    fixed = _run_hooked_cache(
        model, tokens, [p_name], [(in_name, add), (k_name, keep(k_name)), (v_name, keep(v_name))]
    )[1]
    sel = (slice(None), pos_t)
    # Grouped-query attention: view keys and values per query head (copies, not in place).
    cache = {**cache, **{n: per_query_heads(cache[n], n_heads) for n in (k_name, v_name)}}
    clean = {**clean, **{n: per_query_heads(clean[n], n_heads) for n in (k_name, v_name)}}
    others = [h for h in range(n_heads) if h != head]
    first = int(pos_t.min())
    return {
        "d_query": _rel(cache[q_name][sel][:, :, head], clean[q_name][sel][:, :, head]),
        "d_key": _rel(cache[k_name][sel][:, :, head], clean[k_name][sel][:, :, head]),
        "d_value": _rel(cache[v_name][sel][:, :, head], clean[v_name][sel][:, :, head]),
        "d_other_queries": worst(  # NaN where any head's is: never dropped
            _rel(cache[q_name][sel][:, :, h], clean[q_name][sel][:, :, h]) for h in others
        ),
        "d_pattern": float(
            (cache[p_name][:, head, pos_t] - clean[p_name][:, head, pos_t]).abs().max()
        ),
        "d_pattern_fixed_keys": float(
            (fixed[p_name][:, head, pos_t] - clean[p_name][:, head, pos_t]).abs().max()
        ),
        "d_output": _rel(out[:, first:].float(), clean_out[:, first:].float()),
    }


def _run_hooked_cache(model: HookedModel, tokens, names, hooks):
    """Forward with intervention hooks, caching ``names`` (works for any HookedRootModule)."""
    store: dict[str, torch.Tensor] = {}

    def saver(name):
        def hook(x, hook):
            store[name] = x.detach()

        return hook

    out = runtime_of(model).run(tokens, hooks=[*hooks, *[(n, saver(n)) for n in names]])
    return out, store


def read_fraction(
    model: HookedModel,
    tokens: Tokens,
    *,
    heads: Any = None,
    component: str = "Q",
    exclude_bos: bool = True,
    cache: Any = None,
) -> pd.DataFrame:
    """Fraction of the head input's variance that lies in the head's read subspace.

    For each head, ``X`` is the input its projections read (module docstring) over all
    sequences and positions (position 0 dropped with ``exclude_bos``), centred; the read
    fraction is ``||X P||_F^2 / ||X||_F^2`` with ``P`` the orthogonal projector on the row
    space of ``W_component^T``. ``baseline = rank / d_model`` is what isotropic inputs would
    give. One forward pass (stopped after the last layer read), or a read of ``cache``.

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``).
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence).
        heads: An iterable of ``(layer, head)`` pairs or ``'L1H4'`` labels; ``None`` is every
            head; duplicates collapse with a warning.
        component: A named part of the model: the head's map, ``'Q'`` (default), ``'K'`` or
            ``'V'``.
        exclude_bos: Drop position 0 from ``X`` (default ``True``).
        cache: An ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; hooks it lacks
            are computed by one forward pass.

    Returns:
        A table with one row per head of ``heads`` (in layer, head order): ``layer, head,
        label, component, rank, read_fraction, baseline``. ``attrs`` follow
        :data:`interp.outputs.frames.SCHEMA`, plus ``component``.

    Raises:
        InterpError: for a head out of range, ``component`` not Q/K/V, or bad tokens.
    """
    cfg = check_model(model)
    _check_component(component)
    tokens = check_tokens(model, tokens)
    chosen = parse_heads(model, heads)
    by_layer: dict[int, list[int]] = {}
    for l, h in chosen:
        by_layer.setdefault(l, []).append(h)
    frac = torch.full((cfg.n_layers, cfg.n_heads), float("nan"))
    rank = torch.full((cfg.n_layers, cfg.n_heads), float("nan"))
    inputs, work = _input_vectors(model, tokens, sorted(by_layer), cache)
    plain = tokens.reshape(-1, tokens.shape[-1]).shape[0] * Flops.of(model).plain(tokens.shape[-1])
    for l, heads_l in sorted(by_layer.items()):
        X = inputs[l]
        if exclude_bos and X.shape[1] > 1:
            X = X[:, 1:]
        X = X.reshape(-1, X.shape[-1]).double()
        # each head's projection X @ R.T: its FLOPs, over one plain pass of the tokens
        work += sum(2.0 * X.numel() * head_subspaces(model, layer=l, head=h,
                    component=component).rank for h in heads_l) / plain  # fmt: skip
        X = X - X.mean(0, keepdim=True)
        total = float((X**2).sum())
        for h in heads_l:
            sub = head_subspaces(model, layer=l, head=h, component=component)
            R = torch.as_tensor(sub.row_space, dtype=torch.float64, device=X.device)  # [rank, d]
            frac[l, h] = float(((X @ R.T) ** 2).sum()) / total if total > 0 else float("nan")
            rank[l, h] = sub.rank
    df = head_frame({"rank": rank, "read_fraction": frac}, cfg.n_layers, cfg.n_heads)
    df = df.dropna(subset=["read_fraction"]).reset_index(drop=True)
    df["rank"] = df["rank"].astype(int)
    df["baseline"] = df["rank"] / cfg.d_model
    df.insert(3, "component", component)
    return described(
        df,
        "read_fraction",
        description="the share of the inputs' energy in each head's row space",
        method="exact",
        unit="fraction",
        model=model,
        forward_equivalents=work,
        component=component,
    )
