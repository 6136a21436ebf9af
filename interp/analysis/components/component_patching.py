"""Activation patching beyond a head's output: every component, by layer, head and position.

Run the clean and the corrupted prompt; splice one piece of one run's
activation into the other (``direction``, :mod:`interp.engine.direction`:
``"noising"``, the default, the corrupted run's into the clean run;
``"denoising"`` the clean run's into the corrupted run); read the metric
(usually the logit difference of the two answers). The grids are those of
TransformerLens's ``patching`` module (denoising: tested equal to its functions,
to 1e-5):

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
patches (``layer``, ``head``). ``effect = patched - base run`` and
``normalized = effect / (source run - base run)``: 1 moves the metric all the
way to the source run's.

Every cell is exact (equal to one ``run_with_hooks`` per cell, to 1e-5) and runs
on :mod:`interp.engine.sweeps.sweep`: each cell resumes at its layer, the cells of a
layer share passes, and only the metric's rows are unembedded.

Example:
    >>> from interp.models import load_model
    >>> from interp.core.metrics import logit_diff_metric
    >>> model = load_model("induction-2l")
    >>> clean = torch.tensor([[0, 5, 6, 7, 8, 5, 6, 7]])  # ... 7 8 ... 7 -> 8
    >>> corrupted = torch.tensor([[0, 5, 6, 7, 9, 5, 6, 7]])  # ... 7 9 ... 7 -> 9
    >>> grid = patch_components(model, clean, corrupted_tokens=corrupted, component="resid_pre",
    ...                         by="layer_position", metric=logit_diff_metric(8, 9),
    ...                         direction="denoising")
    >>> grid[grid["normalized"] > 0.5][["layer", "position"]].values.tolist()  # where 8 was
    [[0, 4], [1, 4]]
"""

from __future__ import annotations

from typing import Any, Literal

import pandas as pd
import torch

from interp.analysis.components._pipeline import check_patching, patch
from interp.analysis.components.ablation import MetricArg
from interp.core.errors import InterpError
from interp.core.glossary import retired_words
from interp.core.hooks import hook_name
from interp.core.protocol import HookedModel, check_model, hook_names
from interp.core.shapes import Tokens
from interp.engine.chunks import Estimate
from interp.engine.direction import Direction
from interp.engine.sweeps.sites import Site, site

LAYER_COMPONENTS = ("resid_pre", "resid_mid", "attn_out", "mlp_out")
HEAD_COMPONENTS = ("z", "q", "k", "v", "pattern")
COMPONENTS = LAYER_COMPONENTS + HEAD_COMPONENTS
BYS = ("layer", "layer_position", "head", "head_position")
Component = Literal["resid_pre", "resid_mid", "attn_out", "mlp_out", "z", "q", "k", "v", "pattern"]
By = Literal["layer", "layer_position", "head", "head_position"]


def _check(model: HookedModel, component: str, by: str) -> None:
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


@retired_words(unit="by")
def patch_components(
    model: HookedModel,
    tokens: Tokens,
    *,
    corrupted_tokens: Tokens,
    component: Component,
    by: By,
    metric: MetricArg,
    direction: Direction = "noising",
    positions: Any = None,
    cache: Any = None,
    batch_size: int | None = None,
    memory_budget: int | None = None,
    progress: bool = False,
    estimate: bool = False,
) -> pd.DataFrame | Estimate:
    """Patch each cell of ``component`` from one run into the other, one cell at a time.

    The grids are TransformerLens's ``patching`` module's (the module docstring's table:
    which ``component`` takes which ``by``). ``effect = m(patched) - m(base run)`` and
    ``normalized = effect / (m(source run) - m(base run))``: 1 moves the metric all the way
    to the source run's. Every cell is exact (equal to one ``run_with_hooks`` per cell, to
    1e-5), on :mod:`interp.engine.sweeps.sweep`; the prompts run in chunks under ``memory_budget``
    (:mod:`interp.engine.chunks`).

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``).
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence); in patching, the
            clean prompt's.
        corrupted_tokens: The other prompt of a patching pair, the same shape as ``tokens``.
        component: A named part of the model: the activation patched, ``'resid_pre'``,
            ``'resid_mid'``, ``'attn_out'``, ``'mlp_out'`` (per layer) or ``'z'``, ``'q'``,
            ``'k'``, ``'v'``, ``'pattern'`` (per head; ``k`` and ``v`` cells are key/value
            heads on grouped-query models, labelled ``L{l}KV{g}``).
        by: What a table's row is: a patching grid's cells, ``'layer'`` or
            ``'layer_position'`` for layer components, ``'head'`` or ``'head_position'`` for
            head components.
        metric: A ``Metric`` (``loss_metric``, ``logit_diff_metric``: they declare what they
            read and check their ids) or any ``metric(logits, tokens) -> scalar``, always
            scored against the clean ``tokens``.
        direction: Which run a patch edits: ``'noising'`` (the default: the corrupted run's
            activations into the clean run; does the metric *need* this?) or
            ``'denoising'`` (the clean run's into the corrupted run; is this *enough*?).
        positions: Where an intervention *edits*: ints (negative from the end) or a ``[pos]``
            bool mask; ``None`` is every position. It restricts a ``*_position`` grid's
            cells, or where each cell of a ``layer`` / ``head`` grid patches.
        cache: An ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; hooks it lacks
            are computed by one forward pass. The clean run's: denoising reads it.
        batch_size: How many edits share a forward pass; ``None`` is as many as
            ``memory_budget`` and the CPU rule of :mod:`interp.engine.batching` allow.
        memory_budget: The bytes an analysis may hold beyond the model's weights: its prompts
            run in chunks, and its edits share passes, to stay under it; ``None`` is a quarter
            of the memory free on the model's device.
        progress: Show a progress bar over chunks and passes, with an ETA.
        estimate: ``True``: return an ``Estimate`` (chunks, peak bytes over the weights,
            forward-equivalents) instead of running; work that cannot fit is refused with it.

    Returns:
        A table with one row per cell: ``layer``, then ``head`` (for head components) and
        ``position`` (for ``*_position`` grids), ``label``, then ``clean, corrupted,
        patched, effect, normalized`` (metric values). ``attrs`` follow
        :data:`interp.outputs.frames.SCHEMA` (``ablation="patch"``, the direction, metric
        and engine path), plus ``component``, ``by``, ``heads`` (query or key/value heads),
        ``engine_note`` and ``chunks``. With ``estimate=True``, the run's
        :class:`~interp.engine.chunks.Estimate` instead.

    Raises:
        InterpError: for an unknown component, by or direction, a pairing of
            component and by that does not exist, a component the model lacks,
            clean and corrupted tokens of different shapes, positions out of range,
            a metric that needs an LM head the model lacks or returns a non-scalar
            or non-finite value, a cache of other tokens, clean and corrupted runs
            with the same metric, or a retired parameter name (``unit=``).
    """
    cfg = check_model(model)
    _check(model, component, by)
    p = check_patching(
        model, tokens, corrupted_tokens=corrupted_tokens, metric=metric, direction=direction,
        positions=positions, cache=cache, what="patch_components",
    )  # fmt: skip
    n = p.tokens.shape[1]
    mask = p.positions
    pos_list = list(range(n)) if mask is None else [int(i) for i in torch.nonzero(mask).flatten()]
    names = [hook_name(component, l) for l in range(cfg.n_layers)]
    kinds: dict[str, str] = {}

    def cells(values: dict[str, torch.Tensor]) -> tuple[pd.DataFrame, list[list[Site]]]:
        rows, edits = _cells(
            component, by, cfg.n_layers, cfg.n_heads, values, pos_list, mask is not None
        )
        grouped = component in ("k", "v") and values[names[0]].shape[2] != cfg.n_heads
        if component in HEAD_COMPONENTS:
            kinds["heads"] = (
                f"key/value heads ({values[names[0]].shape[2]} per layer)"
                if grouped
                else "query heads"
            )
        return pd.DataFrame(rows), edits

    df = patch(
        model,
        p,
        names,
        cells,
        analysis="patch_components",
        description=f"the metric with each cell of {component} by {by} patched alone "
        f"({p.direction})",
        batch_size=batch_size,
        memory_budget=memory_budget,
        progress=progress,
        estimate=estimate,
        component=component,
        by=by,
    )
    if not estimate:
        df.attrs["heads"] = kinds.get("heads", "")
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
