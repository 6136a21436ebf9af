"""QK attribution checked by intervention: remove a piece from one input of a head, measure.

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

from typing import Any

import pandas as pd
import torch

from interp.analysis.frames import table_attrs
from interp.analysis.heads.qk_attribution import attribute_scores, residual_pieces
from interp.analysis.shapes import Tokens
from interp.checks import check_tokens
from interp.errors import InterpError
from interp.head_checks import check_layer_head
from interp.hooks import head_label, hook_name
from interp.precision import model_dtype, tolerance
from interp.protocol import HookedModel, eval_no_grad
from interp.runtime import runtime_of


def qk_interventions(
    model: HookedModel,
    tokens: Tokens,
    *,
    layer: int,
    head: int,
    query_positions: Any = -1,
    key_positions: Any = None,
    top: int = 3,
    cache: Any = None,
) -> pd.DataFrame:
    """QK attribution checked by intervention: for each side's ``top`` components (by the
    size of their attribution), the score change when that component is removed from the
    head's query input (``side="query"``) or key input (``"key"``) only, with every norm
    recomputed, beside what the frozen-norm attribution predicts.

    The edit recomputes the head's ``hook_q`` (or its key/value head's ``hook_k``, which
    heads sharing it under grouped-query attention also see; only this head is read)
    from ``ln1(resid - c)``, so the component's path into this one input is cut and
    nothing else moves. ``query_positions`` / ``key_positions`` choose the score cells
    (default: the last query, every key it may see), averaged over cells and sequences.
    Columns ``layer, head, label, side, component, attribution, measured, gap,
    attention_moved``: ``attribution`` is minus the component's share of the
    score on that side (what removing it changes if the norms stayed frozen),
    ``measured`` the real change, ``gap = measured - attribution`` (the norms'
    movement), ``attention_moved`` how much attention the edit moves: half the
    summed absolute change of the query rows' attention weights (0: none, 1: all of
    it), averaged over query rows. On a soft-capped model scores are read before
    the cap (the cap inverted), as they are attributed. Costs one forward pass plus
    one per row and two checks.

    Raises:
        InterpError: as :func:`qk_attribution`, for ``top`` not a positive int, or a
            model whose ``hook_q`` / ``hook_k`` edits cannot be reproduced (the
            no-op edit is checked against the clean scores first).
    """
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise InterpError(f"top must be a positive int, got {top!r}")
    df, acts = attribute_scores(
        model,
        tokens,
        layer=layer,
        head=head,
        query_positions=query_positions,
        key_positions=key_positions,
        by="head",
        cache=cache,
    )
    if df.attrs["checked_against"] != "scores":
        raise InterpError(
            "this model's hook_attn_scores holds the attention pattern, not the scores "
            "(TransformerLens's adapter for it), so score changes cannot be measured; use "
            "qk_attribution alone"
        )
    tokens = check_tokens(model, tokens)
    layer, head = check_layer_head(model, layer, head)
    geometry = runtime_of(model).qk_geometry(layer)
    cells = list(zip(df["query_position"], df["key_position"], strict=True))
    cells = sorted(set(cells))
    n_cells = len(cells)
    dtype = model_dtype(model)  # float16 / bfloat16: the no-op check allows its rounding
    with eval_no_grad(model):
        terms = {t[0]: t[3] for t in residual_pieces(model, acts, layer)}
        base_s, base_p = _read_cells(model, tokens, layer, head, cells, [], geometry)
        for side in ("q", "k"):  # the no-op edit reproduces the clean run
            noop = [_edit(model, acts, layer, head, side, None)]
            s0, _ = _read_cells(model, tokens, layer, head, cells, noop, geometry)
            size = float(base_s.abs().max())
            if float((s0 - base_s).abs().max()) > tolerance(dtype, size, float32=1e-4):
                raise InterpError(
                    f"recomputing L{layer}H{head}'s hook_{side} from its input does not reproduce "
                    "the model's scores, so this model's q/k inputs cannot be edited here"
                )
        rows = []
        for side, col, name in (("q", "query_component", "query"), ("k", "key_component", "key")):
            shares = df.groupby(col)["value"].sum() / n_cells
            shares = shares.drop([x for x in ("bias", "remainder") if x in shares.index])
            for comp in shares.abs().sort_values(ascending=False).index[:top]:
                edit = [_edit(model, acts, layer, head, side, terms[comp])]
                s1, p1 = _read_cells(model, tokens, layer, head, cells, edit, geometry)
                measured = float((s1 - base_s).mean())
                rows.append(
                    {
                        "side": name,
                        "component": comp,
                        "attribution": -float(shares[comp]),
                        "measured": measured,
                        "gap": measured + float(shares[comp]),
                        "attention_moved": float((p1 - base_p).abs().sum(-1).mean() / 2),
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
            metric="attention score",
            unit="score (pre-softmax, after the model's scale)",
            model=model,
            forward_equivalents=float(df.attrs["forward_equivalents"]) + 3 + len(rows),
            cells=[list(map(int, c)) for c in cells],
        )
    )
    return out


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


def _read_cells(
    model, tokens, layer, head, cells, hooks, geometry
) -> tuple[torch.Tensor, torch.Tensor]:
    """The head's scores at ``cells`` ``[batch, cell]`` (before any soft cap) and its
    attention rows at the cells' queries ``[batch, query, key]``, in one pass."""
    got: dict[str, torch.Tensor] = {}

    def keep(name: str) -> Any:
        def f(value: torch.Tensor, hook: Any) -> None:
            got[name] = value[:, head].detach().float()

        return f

    reads = [(hook_name(k, layer), keep(k)) for k in ("attn_scores", "pattern")]
    model.run_with_hooks(tokens, fwd_hooks=[*hooks, *reads])
    qi = torch.tensor([c[0] for c in cells])
    ki = torch.tensor([c[1] for c in cells])
    scores = got["attn_scores"][:, qi, ki]
    if geometry.softcap:
        cap = geometry.softcap
        scores = cap * torch.atanh((scores / cap).clamp(-1 + 1e-7, 1 - 1e-7))
    rows = sorted({int(c[0]) for c in cells})
    return scores, got["pattern"][:, rows]
