"""QK attribution checked by intervention: remove a piece from one input of a head, measure.

:func:`qk_attribution` splits a score with every norm's scale frozen; removing a
component really changes the norms too. Here each top component is removed from
the head's query input (or key input) alone, the norms recomputed, and the score's
real change is set beside the frozen-norm prediction: the direct path from the
component into that one input, cut (a path patch with a zero source).

Example:
    >>> from interp.models import load_model
    >>> from interp.datasets import repeated_random_tokens
    >>> model = load_model("induction-2l")
    >>> tokens = repeated_random_tokens(2, 8, d_vocab=64, seed=0).tokens
    >>> out = qk_interventions(model, tokens, layer=1, head=1, top=1)
    >>> list(out["side"])
    ['query', 'key']
"""

from __future__ import annotations

from typing import Any, Literal

import pandas as pd
import torch

from interp.analysis.heads.qk.shares import attribute_scores
from interp.core.checks import check_int, check_tokens
from interp.core.errors import InterpError
from interp.core.head_checks import check_layer_head
from interp.core.hooks import head_label, hook_name
from interp.core.precision import model_dtype, tolerance, within
from interp.core.protocol import HookedModel, eval_no_grad
from interp.core.shapes import Tokens
from interp.dictionaries import Dictionary
from interp.engine.cache import run_until
from interp.engine.cost import cache_pass_work
from interp.outputs.frames import table_attrs
from interp.runtime import runtime_of

# pieces with no one tensor to remove: the head's bias, what no component wrote, and a
# dictionary's error and decoder bias
UNREMOVABLE = ("bias", "remainder", "error", "b_dec")
NOOP_RTOL = 1e-4  # a no-op edit must reproduce the clean scores to this, over the largest


def qk_interventions(
    model: HookedModel,
    tokens: Tokens,
    *,
    layer: int,
    head: int,
    query_positions: Any = -1,
    key_positions: Any = None,
    contrast: Any = None,
    by: Literal["head", "component", "layer"] = "head",
    top: int = 3,
    dictionary: Dictionary | None = None,
    query_dictionary: Dictionary | None = None,
    key_dictionary: Dictionary | None = None,
    cache: Any = None,
) -> pd.DataFrame:
    """QK attribution checked by intervention: each top component removed from one input, measured.

    For each side's ``top`` components (by the size of their attribution), the score change
    when that component is removed from the head's query input (``side="query"``) or key
    input (``"key"``) only, with every norm recomputed, beside what the frozen-norm
    attribution (:func:`qk_attribution`) predicts. The edit recomputes the head's ``hook_q``
    (or its key/value head's ``hook_k``, which heads sharing it under grouped-query attention
    also see; only this head is read) from ``ln1(resid - c)`` at every position, so the
    component's path into this one input is cut and nothing else moves. On a soft-capped
    model scores are read before the cap (the cap inverted), as they are attributed. Costs
    the attribution's pass, one no-op check and one pass per row, each stopped after the
    head's layer.

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``).
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence).
        layer: A block index: the attending head's layer.
        head: A head index within ``layer``: the attending head.
        query_positions: The attending positions of a head's scores (ints, negative from the
            end, for every sequence; or one list per sequence, ``[[q0], [q1], ...]``, read per
            sequence); read, not edited. Default ``-1``, the last; the change is averaged
            over cells and sequences.
        key_positions: The attended positions, in the same forms; ``None`` is every key each
            query may see.
        contrast: Two key positions ``(a, b)`` (one for all sequences or one per sequence):
            the score of ``a`` minus the score of ``b`` is attributed and measured.
        by: What a table's row is: ``'head'`` (default: every earlier head and MLP),
            ``'component'`` (each layer's attention and MLP) or ``'layer'`` (each block), as
            in :func:`qk_attribution`.
        top: How many components per side to remove, the largest attributions first
            (default 3).
        dictionary: A sparse dictionary on the residual stream at or before the head's
            input, for both sides, as in :func:`qk_attribution`: the pieces removed are then
            its active features (``F123``: the feature's activation times its decoder row,
            at every position) and the components between its hook and the head.
        query_dictionary: The query side's dictionary alone; not beside ``dictionary``.
        key_dictionary: The key side's dictionary alone; not beside ``dictionary``.
        cache: An ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; hooks it lacks
            are computed by one forward pass.

    Returns:
        A table with one row per (side, component): ``layer, head, label`` (the attending
        head), ``side, component, attribution, measured, gap, attention_moved`` (with a
        dictionary, ``component`` names the piece removed: a feature ``F123`` or a component):
        ``attribution`` is minus the component's share on that side (what removing it
        changes if the norms stayed frozen), ``measured`` the real change, ``gap = measured -
        attribution`` (the norms' movement), ``attention_moved`` how much attention the edit
        moves: half the summed absolute change of the query rows' attention weights (0: none,
        1: all of it), averaged over query rows. ``attrs`` follow
        :data:`interp.outputs.frames.SCHEMA` (``ablation="zero"``), plus ``by`` and
        ``contrast``.

    Raises:
        InterpError: as :func:`qk_attribution`, for ``top`` not a positive int, a model
            whose ``hook_attn_scores`` holds the pattern rather than the scores, a
            dictionary :func:`qk_attribution` refuses, or a
            model whose ``hook_q`` / ``hook_k`` edits cannot be reproduced (the no-op
            edit is checked against the clean scores first).
    """
    top = check_int(top, "top", minimum=1)
    att = attribute_scores(
        model,
        tokens,
        layer=layer,
        head=head,
        query_positions=query_positions,
        key_positions=key_positions,
        contrast=contrast,
        by=by,
        dictionary=dictionary,
        query_dictionary=query_dictionary,
        key_dictionary=key_dictionary,
        cache=cache,
    )
    df = att.table
    if df.attrs["checked_against"] != "scores":
        raise InterpError(
            "this model's hook_attn_scores holds the attention pattern, not the scores "
            "(TransformerLens's adapter for it), so score changes cannot be measured; use "
            "qk_attribution alone"
        )
    tokens = check_tokens(model, tokens)
    layer, head = check_layer_head(model, layer, head)
    geometry = runtime_of(model).qk_geometry(layer)
    cells = att.cells

    def uncapped(s: torch.Tensor) -> torch.Tensor:  # scores as attributed: before any cap
        if geometry.softcap:
            cap = geometry.softcap
            s = cap * torch.atanh((s / cap).clamp(-1 + 1e-7, 1 - 1e-7))
        return cells.scores(s)

    cost = att.cost
    read_work = cache_pass_work(model, tokens.shape[1], [hook_name("pattern", layer)])
    with eval_no_grad(model):
        base_s = uncapped(att.acts[hook_name("attn_scores", layer)][:, head].float())
        base_p = cells.rows(att.acts[hook_name("pattern", layer)][:, head].float())
        noop = [_edit(model, att.acts, layer, head, side, None) for side in ("q", "k")]
        s0, _ = _read(model, tokens, layer, head, noop)
        cost.add(read_work)  # a pass stopped after the pattern
        size = float(base_s.abs().max())  # float16 / bfloat16: the check allows their rounding
        gap = float((uncapped(s0) - base_s).abs().max())
        if not within(gap, tolerance(model_dtype(model), size, float32=NOOP_RTOL)):  # NaN fails
            raise InterpError(
                f"recomputing L{layer}H{head}'s hook_q / hook_k from its input does not "
                f"reproduce the model's scores (they differ by {gap:.2g}), so this model's q/k "
                "inputs cannot be edited here"
            )
        rows = []
        n_groups = len(cells.groups)
        suffix = "piece" if "query_piece" in df.columns else "component"
        for side, name in (("q", "query"), ("k", "key")):
            shares = df.groupby(f"{name}_{suffix}")["value"].sum() / n_groups  # mean over cells
            shares = shares.drop([x for x in UNREMOVABLE if x in shares.index])
            for comp in shares.abs().sort_values(ascending=False).index[:top]:
                edit = [_edit(model, att.acts, layer, head, side, att.piece(side, comp))]
                s1, p1 = _read(model, tokens, layer, head, edit)
                cost.add(read_work)  # a pass stopped after the pattern
                measured = float((uncapped(s1) - base_s).mean())
                moved = (cells.rows(p1) - base_p).abs().sum(-1).mean() / 2
                rows.append(
                    {
                        "side": name,
                        "component": comp,
                        "attribution": -float(shares[comp]),
                        "measured": measured,
                        "gap": measured + float(shares[comp]),
                        "attention_moved": float(moved),
                    }
                )
    out = pd.DataFrame(rows)
    out.insert(0, "label", head_label(layer, head))
    out.insert(0, "head", head)
    out.insert(0, "layer", layer)
    out.attrs.update(
        table_attrs(
            "qk_interventions",
            description="each top component removed from the head's query or key input alone, "
            "norms recomputed, beside its frozen-norm QK attribution",
            method="exact",
            ablation="zero",
            metric="attention score" if contrast is None else "score[a] - score[b]",
            unit="score (pre-softmax, after the model's scale)",
            model=model,
            forward_equivalents=cost.forward_equivalents,
            by=by,
            contrast=cells.contrast,
        )
    )
    for key in ("query_dictionary", "key_dictionary"):
        if key in df.attrs:
            out.attrs[key] = df.attrs[key]
    return out


def _read(model: HookedModel, tokens, layer, head, hooks) -> tuple[torch.Tensor, torch.Tensor]:
    """The head's scores and pattern ``[batch, query_pos, key_pos]`` with ``hooks`` on, from
    one pass stopped after its pattern."""
    got: dict[str, torch.Tensor] = {}

    def keep(name: str) -> Any:
        def f(value: torch.Tensor, hook: Any) -> None:
            got[name] = value[:, head].detach().float()

        return f

    reads = [(hook_name(k, layer), keep(k)) for k in ("attn_scores", "pattern")]
    run_until(model, tokens, [*hooks, *reads], hook_name("pattern", layer))
    return got["attn_scores"], got["pattern"]


def _edit(
    model: HookedModel, acts: Any, layer: int, head: int, side: str, piece: Any
) -> tuple[str, Any]:
    """A hook setting this head's ``hook_q`` (or its key/value head's ``hook_k``) to the
    projection of ``ln1(resid - piece)`` (``piece=None``: the resid itself, a no-op)."""
    rt = runtime_of(model)
    lay = rt.layer(layer)
    idx = head if side == "q" else head // max(1, int(model.cfg.n_heads) // rt.n_kv_heads)
    given = acts[hook_name("resid_pre", layer)]
    resid = given.float()
    x = resid if piece is None else resid - piece.to(resid.device)
    ln = model.blocks[layer].ln1 if lay.ln1 is not None else None
    with torch.no_grad():  # the norm in the model's precision, as the model runs it
        normed = ln(x.to(given.dtype)).float() if ln is not None else x
    b = lay.b[side]
    W = lay.W[side][idx].to(normed.device).float()
    new = normed @ W + (0.0 if b is None else b[idx].to(normed.device).float())

    def hook(value: torch.Tensor, hook: Any) -> torch.Tensor:
        value = value.clone()
        value[:, :, idx] = new.to(value.dtype)
        return value

    return hook_name(side, layer), hook


def score_without(
    model: HookedModel,
    tokens: torch.Tensor,
    acts: Any,
    *,
    layer: int,
    head: int,
    side: str,
    piece: torch.Tensor,
) -> torch.Tensor:
    """A head's scores with ``piece`` removed from its query input (``side="q"``) or its
    key/value head's key input (``"k"``) alone, every norm recomputed (the edit
    :func:`qk_interventions` makes, for any piece: a component, a feature, or one piece per
    sequence).

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``).
        tokens: ``[batch, pos]`` integer ids.
        acts: The activations of ``tokens`` a QK attribution read (its ``resid_pre``).
        layer: A block index: the attending head's layer.
        head: A head index within ``layer``: the attending head.
        side: ``'q'`` or ``'k'``.
        piece: ``[batch, pos, d_model]``: what to remove from the head's input.

    Returns:
        ``[batch, query_pos, key_pos]``: the scores as the model's ``hook_attn_scores``
        holds them, from one pass stopped after the head's layer.

    Raises:
        InterpError: for a side other than ``'q'`` / ``'k'``.
    """
    if side not in ("q", "k"):
        raise InterpError(f"side must be 'q' or 'k', got {side!r}")
    with eval_no_grad(model):
        edit = [_edit(model, acts, layer, head, side, piece)]
        scores, _ = _read(model, tokens, layer, head, edit)
    return scores
