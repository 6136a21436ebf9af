"""Activation patching beyond a head's output: every component, by layer, head and position.

Run the clean and the corrupted prompt; splice one piece of the clean run's
activation into the corrupted run; read the metric (usually the logit
difference of the two answers). The grids are those of TransformerLens's
``patching`` module (tested equal to its functions, to 1e-5):

==============================  ==================  ================================
``component``                   ``by``              TransformerLens
==============================  ==================  ================================
``resid_pre``, ``resid_mid``,   ``layer_position``  ``get_act_patch_resid_pre`` ...
``attn_out``, ``mlp_out``       ``layer``           (every position of a layer)
``z``, ``q``, ``k``, ``v``      ``head``            ``..._attn_head_out_all_pos`` ...
                                ``head_position``   ``..._attn_head_q_by_pos`` ...
``pattern`` (query rows)        ``head``            ``..._attn_head_pattern_all_pos``
                                ``head_position``   ``..._pattern_by_pos`` (dest pos)
==============================  ==================  ================================

On grouped-query models the ``k`` and ``v`` cells are the key/value heads
(SmolLM2: 3 per layer, not 9 copies of 3 numbers), labelled ``L{l}KV{g}``.
``positions`` restricts a grid's cells (``*_position``) or where each cell
patches (``layer``, ``head``). ``normalized = (patched - corrupted) /
(clean - corrupted)``: 1 restores the clean metric.

Every cell is exact (equal to one ``run_with_hooks`` per cell) and runs on the
engine of :mod:`interp.analysis._sweep`: each cell resumes at its layer, the
cells of a layer share passes, and only the metric's rows are unembedded.

Example:
    >>> from interp.models import load_model
    >>> from interp.analysis.metrics import logit_diff_metric
    >>> model = load_model("induction-2l")
    >>> clean = torch.tensor([[0, 5, 6, 7, 8, 5, 6, 7]])  # ... 7 8 ... 7 -> 8
    >>> corrupted = torch.tensor([[0, 5, 6, 7, 9, 5, 6, 7]])  # ... 7 9 ... 7 -> 9
    >>> grid = patch_components(model, clean, corrupted_tokens=corrupted, component="resid_pre",
    ...                         by="layer_position", metric=logit_diff_metric(8, 9))
    >>> grid[grid["normalized"] > 0.5][["layer", "position"]].values.tolist()  # where 8 was
    [[0, 4], [1, 4]]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import pandas as pd
import torch

from interp.analysis._common import check_cache, hook_names
from interp.analysis._sweep import Site, site, sweep
from interp.analysis.metrics import Metric, prepare_metric
from interp.analysis.patching import check_token_pair
from interp.errors import InterpError
from interp.hooks import hook_name
from interp.protocol import (
    check_model,
    eval_no_grad,
    model_name,
    position_mask,
    positions_label,
)

LAYER_COMPONENTS = ("resid_pre", "resid_mid", "attn_out", "mlp_out")
HEAD_COMPONENTS = ("z", "q", "k", "v", "pattern")
COMPONENTS = LAYER_COMPONENTS + HEAD_COMPONENTS
BYS = ("layer", "layer_position", "head", "head_position")
Component = Literal["resid_pre", "resid_mid", "attn_out", "mlp_out", "z", "q", "k", "v", "pattern"]
By = Literal["layer", "layer_position", "head", "head_position"]


def _check(model: Any, component: str, by: str) -> None:
    if component not in COMPONENTS:
        raise InterpError(f"unknown component {component!r}; choose one of {', '.join(COMPONENTS)}")
    if by not in BYS:
        raise InterpError(f"unknown by {by!r}; choose one of {', '.join(BYS)}")
    if component in LAYER_COMPONENTS and by.startswith("head"):
        raise InterpError(
            f"{component} is one vector per layer and position; use by='layer' or "
            "'layer_position' (heads are z, q, k, v, pattern)"
        )
    if component in HEAD_COMPONENTS and by.startswith("layer"):
        raise InterpError(
            f"{component} is per head; use by='head' or 'head_position' (or component='attn_out' "
            "for a whole layer's attention)"
        )
    if hook_name(component, 0) not in hook_names(model):
        raise InterpError(
            f"this model has no {hook_name(component, 0)}"
            + (" (it is attention-only: no MLPs)" if component in ("mlp_out", "resid_mid") else "")
        )


def patch_components(
    model: Any,
    tokens: torch.Tensor,
    *,
    corrupted_tokens: torch.Tensor,
    component: Component,
    by: By,
    metric: Metric | Callable[[torch.Tensor, torch.Tensor], Any],
    positions: Any = None,
    cache: Any = None,
    batch_size: int | None = None,
    memory_budget: int | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """Patch each cell of ``component`` from the clean run into the corrupted run (module docs).

    ``tokens`` are the clean tokens. Columns ``layer``, then ``head`` (for
    head components) and ``position`` (for ``*_position`` grids), ``label``,
    ``clean, corrupted, patched, delta`` (``patched - corrupted``),
    ``normalized``. ``cache`` is the clean run's (checked against ``tokens``
    and completed). ``df.attrs`` records the grid and engine path.

    Raises:
        InterpError: for an unknown component or by, a pairing of the two that
            does not exist, a component the model lacks, clean and corrupted
            tokens of different shapes, positions out of range, a metric that
            needs an LM head the model lacks or returns a non-scalar, a cache
            of other tokens, or clean and corrupted runs with the same metric.
    """
    cfg = check_model(model)
    _check(model, component, by)
    tokens, corrupted_tokens = check_token_pair(model, tokens, corrupted_tokens)
    if metric is None:
        raise InterpError("patch_components needs a metric, e.g. logit_diff_metric(correct, wrong)")
    m = prepare_metric(model, tokens, metric, None)
    n = tokens.shape[1]
    mask = position_mask(n, positions)
    pos_list = list(range(n)) if mask is None else [int(i) for i in torch.nonzero(mask).flatten()]
    names = [hook_name(component, l) for l in range(cfg.n_layers)]
    with eval_no_grad(model):
        acts = check_cache(model, tokens, cache, needs=names)
        if acts is None:
            logits_clean, acts = model.run_with_cache(tokens, names_filter=names)
        else:
            logits_clean = model(tokens)
        values = {nm: acts[nm] for nm in names}
        clean = float(m(logits_clean, tokens))
        rows, edits = _cells(
            component, by, cfg.n_layers, cfg.n_heads, values, pos_list, mask is not None
        )
        result = sweep(
            model,
            corrupted_tokens,
            edits,
            m,
            values=values,
            batch_size=batch_size,
            memory_budget=memory_budget,
            progress=progress,
            desc=f"patching {component} by {by}",
        )
    corrupted = result.clean
    if clean == corrupted:
        raise InterpError("clean and corrupted runs give the same metric; nothing to patch")
    df = pd.DataFrame(rows)
    df["clean"] = clean
    df["corrupted"] = corrupted
    df["patched"] = result.values
    df["delta"] = df["patched"] - corrupted
    df["normalized"] = df["delta"] / (clean - corrupted)
    grouped = component in ("k", "v") and values[names[0]].shape[2] != cfg.n_heads
    df.attrs.update(
        analysis="patch_components (exact, clean activation into the corrupted run)",
        method=f"patch {component} by {by}",
        component=component,
        by=by,
        metric=m.name,
        unit=m.unit,
        model=model_name(model),
        positions=positions_label(mask),
        heads=(
            f"key/value heads ({values[names[0]].shape[2]} per layer)" if grouped else "query heads"
        )
        if component in HEAD_COMPONENTS
        else "",
        engine=result.path,
        engine_note=result.note,
        passes=result.passes + 1,
    )
    return df


def _cells(
    component: str,
    by: str,
    n_layers: int,
    n_query_heads: int,
    values: dict[str, torch.Tensor],
    positions: list[int],
    restricted: bool,
) -> tuple[list[dict[str, Any]], list[list[Site]]]:
    """The grid's rows and one edit per row (key/value heads labelled ``L{l}KV{g}``)."""
    rows: list[dict[str, Any]] = []
    edits: list[list[Site]] = []
    every = None if not restricted else positions
    for l in range(n_layers):
        if component in LAYER_COMPONENTS:
            if by == "layer":
                rows.append({"layer": l, "label": f"L{l}"})
                edits.append([site(component, l, positions=every)])
            else:
                for p in positions:
                    rows.append({"layer": l, "position": p, "label": f"L{l}"})
                    edits.append([site(component, l, positions=[p])])
            continue
        x = values[hook_name(component, l)]
        n_heads = x.shape[1] if component == "pattern" else x.shape[2]
        kv = component in ("k", "v") and n_heads != n_query_heads
        for h in range(n_heads):
            label = f"L{l}KV{h}" if kv else f"L{l}H{h}"
            if by == "head":
                rows.append({"layer": l, "head": h, "label": label})
                edits.append([site(component, l, head=h, positions=every)])
            else:
                for p in positions:
                    rows.append({"layer": l, "head": h, "position": p, "label": label})
                    edits.append([site(component, l, head=h, positions=[p])])
    return rows, edits
