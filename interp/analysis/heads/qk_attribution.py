"""Exact QK attribution: a head's scores split into where its query and key came from.

The residual stream a layer reads is a sum of what every earlier component
wrote: the embeddings, each head's output ``z_h W_O``, each layer's output
bias, each MLP. With every norm's scale *frozen* at its value in this run
(the layer's ``ln1``, and the per-head QK-norms of Qwen3-style models), the
head's query and key are affine in that sum, and the rotary rotation of a
position is linear, so the pre-softmax score is exactly a double sum

    s[p, k] = sum_i sum_j scale * (R_p q_i[p]) . (R_k k_j[k])

over a query-side piece ``i`` and a key-side piece ``j`` (Kamath et al. 2025
attribute attention the same way). Each piece is a component, or ``bias``: the
norm's bias, ``b_Q`` / ``b_K``, carried through the frozen norms and the
rotation. The rows add up to the score the model computed; the check is made
on every call against the model's own ``hook_attn_scores`` and reported in
``df.attrs`` (``score_gap``: the largest gap over the largest score, and a
rows-vs-model refusal above :data:`CHECK_RTOL`). What the pieces miss is an
explicit ``remainder`` row, never a silent gap.

Two things are not linear and are said so in ``df.attrs``: a soft cap
(Gemma-2's ``tanh``) is applied after the sum, so the rows attribute the
score *before* the cap; and the frozen scales are this run's, so removing a
component changes the real score by a different amount (the norms move):
:func:`qk_interventions` measures that change beside the attribution.

Example:
    >>> from interp.models import load_model
    >>> from interp.datasets import repeated_random_tokens
    >>> model = load_model("induction-2l")
    >>> tokens = repeated_random_tokens(2, 8, d_vocab=64, seed=0).tokens
    >>> df = qk_attribution(model, tokens, layer=1, head=1, key_positions=[9])
    >>> top = df.nlargest(1, "value")
    >>> bool(abs(df["value"].sum() - df.attrs["total"]) < 1e-4 * df.attrs["score_scale"])
    True
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pandas as pd
import torch

from interp.analysis.frames import table_attrs
from interp.analysis.shapes import Tokens
from interp.checks import check_tokens
from interp.engine.cache import cache_work, check_cache
from interp.errors import InterpError
from interp.head_checks import check_layer_head
from interp.hooks import head_label, hook_name
from interp.precision import rtol, tolerance
from interp.protocol import HookedModel, check_model, eval_no_grad, hook_names
from interp.runtime import runtime_of
from interp.runtime.attention import QKGeometry

By = Literal["head", "component", "layer"]
BYS = ("head", "component", "layer")
# rows vs the model's score, over the largest score: refused above this (float32; in float16 /
# bfloat16 the precision's rule, interp.precision, and df.attrs["check_rtol"] says which)
CHECK_RTOL = 1e-4
MASKED = -1e20  # a model's score below this is a mask, not a score
REMAINDER_TOL = 1e-5  # of the stream's largest entry: a larger gap is a `remainder` piece


def read_positions(value: Any, n: int, what: str) -> list[int]:
    """Positions (ints, negative from the end) as distinct indices in order.

    Raises:
        InterpError: for a non-integer or out-of-range position, or none.
    """
    scalar = not hasattr(value, "__iter__") or (hasattr(value, "ndim") and value.ndim == 0)
    items = [value] if scalar else list(value)
    out: list[int] = []
    for p in items:
        if isinstance(p, bool) or not hasattr(p, "__index__"):
            raise InterpError(f"{what} must be integers, got {p!r}")
        p = int(p)
        if not -n <= p < n:
            raise InterpError(f"{what} {p} is out of range for {n} positions (use -{n}..{n - 1})")
        if p % n not in out:
            out.append(p % n)
    if not out:
        raise InterpError(f"{what} is empty; give at least one position")
    return out


def residual_pieces(
    model: HookedModel, acts: dict[str, torch.Tensor], layer: int
) -> list[tuple[str, str, int | None, torch.Tensor]]:
    """What entered ``layer``'s residual stream, piece by piece: ``(label, kind, layer,
    [batch, pos, d_model])`` for the embeddings, every earlier head, output bias and MLP."""
    rt = runtime_of(model)
    dev = acts[hook_name("resid_pre", layer)].device  # where the layer computes (a split model)

    def read(name: str) -> torch.Tensor:
        return acts[name].to(dev).float()

    out: list[tuple[str, str, int | None, torch.Tensor]] = []
    out.append(("embed", "embed", None, read(hook_name("embed"))))
    pe = read(hook_name("pos_embed")) if hook_name("pos_embed") in acts else None
    if pe is not None and rt.has_positional and pe.shape == out[0][3].shape:
        out.append(("pos_embed", "embed", None, pe))
    b_O = rt.output_bias()
    for l in range(layer):
        W_O = rt.layer_weight("W_O", l).to(dev).float()  # [head, d_head, d_model]
        z = read(hook_name("z", l))  # [batch, pos, head, d_head]
        per = list(torch.einsum("bphe,hed->hbpd", z, W_O))
        labels = [head_label(l, h) for h in range(len(per))]
        if b_O is not None and bool(b_O[l].abs().max() > 0):
            per.append(b_O[l].to(dev).float().expand_as(per[0]))
            labels.append(f"L{l}.attn_bias")
        post = rt.norm("ln1_post", l)
        if post is not None:  # a sandwich norm on the attention's output, frozen too
            per = _frozen(post, per)
        for lab, piece in zip(labels, per, strict=True):
            out.append((lab, "attn_bias" if lab.endswith("bias") else "head", l, piece))
        if hook_name("mlp_out", l) in acts and not rt.attention_only:
            post_mlp = f"blocks.{l}.ln2_post.hook_out"
            mlp = read(post_mlp if post_mlp in acts else hook_name("mlp_out", l))
            out.append((f"L{l}.mlp", "mlp", l, mlp))
    given = acts[hook_name("resid_pre", layer)]
    resid = given.float()
    missing = resid - sum(t[3] for t in out)  # in float16 / bfloat16 the stream's own rounding
    size = float(resid.abs().max())
    if float(missing.abs().max()) > tolerance(given.dtype, size, float32=REMAINDER_TOL):
        out.append(("remainder", "remainder", None, missing))
    return out


def _frozen(norm: Any, pieces: list[torch.Tensor]) -> list[torch.Tensor]:
    """``pieces`` through ``norm`` with its scale frozen at their sum's (its bias, if any, is
    added to the last piece)."""
    gain = norm.gain
    if gain is None:
        raise InterpError("a norm of this model is not a LayerNorm / RMSNorm with a gain")
    inv = norm.inverse_scale(sum(pieces))
    gain = gain.to(inv.device)
    out = [norm.centre(p) * inv * gain for p in pieces]
    if norm.bias is not None:
        out[-1] = out[-1] + norm.bias.to(inv.device).float()
    return out


def _group(label: str, kind: str, layer: int | None, by: str) -> str:
    if by == "head" or layer is None:
        return label
    if by == "component":
        return f"L{layer}.mlp" if kind == "mlp" else f"L{layer}.attn"
    return f"L{layer}"


def side_pieces(
    model: HookedModel,
    acts: dict[str, torch.Tensor],
    *,
    layer: int,
    head: int,
    side: str,
    rows: list[int],
    geometry: QKGeometry,
) -> tuple[list[tuple[str, str, int | None]], torch.Tensor, torch.Tensor]:
    """One side's pieces after every frozen norm and the rotation: the pieces' names and
    ``[piece, batch, len(rows), d_head]`` (the last piece is ``bias``), and the model's own
    total (the same vectors, recomputed whole) for the check."""
    rt = runtime_of(model)
    terms = residual_pieces(model, acts, layer)
    resid = acts[hook_name("resid_pre", layer)].float()[:, rows]  # [batch, R, d_model]
    lay = rt.layer(layer)
    n_heads = int(model.cfg.n_heads)
    idx = head if side == "q" else head // max(1, n_heads // rt.n_kv_heads)
    W = lay.W[side][idx].float()  # [d_model, d_head]
    b = lay.b[side]
    b = torch.zeros(W.shape[1]) if b is None else b[idx].float()
    stack = torch.stack([t[3][:, rows] for t in terms])  # [piece, batch, R, d_model]
    norm = lay.ln1
    if norm is not None:
        gain = norm.gain
        if gain is None:
            raise InterpError(
                f"layer {layer}'s input norm is neither a LayerNorm nor an RMSNorm with a gain, "
                "so it cannot be frozen; QK attribution does not support this model"
            )
        inv = norm.inverse_scale(resid)  # [batch, R, 1]
        stack = norm.centre(stack) * inv * gain
        const = norm.bias.float() if norm.bias is not None else torch.zeros_like(gain)
        const = const.expand_as(resid)
    else:
        const = torch.zeros_like(resid)
    pieces = torch.cat([stack @ W, (const @ W + b)[None]])  # [piece+1, batch, R, d_head]
    qk_norm = geometry.q_norm if side == "q" else geometry.k_norm
    if qk_norm is not None:
        total = pieces.sum(0)
        gain = qk_norm.gain
        if gain is None:
            raise InterpError("this model's QK-norm is not an RMSNorm / LayerNorm with a gain")
        pieces = qk_norm.centre(pieces) * qk_norm.inverse_scale(total) * gain
        if qk_norm.bias is not None:
            pieces[-1] = pieces[-1] + qk_norm.bias.float()
    if geometry.rotary is not None:
        pieces = geometry.rotary.rotate(pieces, torch.tensor(rows), pos_dim=-2)
    names = [(t[0], t[1], t[2]) for t in terms] + [("bias", "bias", None)]
    return names, pieces, pieces.sum(0)


def qk_attribution(
    model: HookedModel,
    tokens: Tokens,
    *,
    layer: int,
    head: int,
    query_positions: Any = -1,
    key_positions: Any = None,
    contrast: Any = None,
    by: By = "component",
    cache: Any = None,
) -> pd.DataFrame:
    """Each (query-side piece, key-side piece) pair's exact share of a head's score.

    ``query_positions`` are the attending positions (default the last);
    ``key_positions`` the attended ones (default every key each query may
    see). ``contrast=(a, b)`` attributes ``s[p, a] - s[p, b]`` instead (``a``
    and ``b`` are positions, one for all sequences or one per sequence: why
    key ``a`` and not ``b``). ``by="head"``: every earlier head is a piece;
    ``"component"`` (the default): each layer's attention (its heads and output
    bias) and MLP; ``"layer"``: each block. Columns ``layer, head, label`` (the
    attending head), ``query_position, key_position`` (absent with
    ``contrast``), ``query_component, key_component, value``: ``value`` is the
    mean over sequences of the share, in the model's score units (after its
    scale, before any soft cap). The rows of one (query, key) sum to the score;
    ``df.attrs["total"]`` is the mean of the scores the rows explain and
    ``score_gap`` how far the rows are from the model's own (module
    docstring). ``cache`` (of ``tokens``) is checked and completed; one forward
    pass otherwise.

    Raises:
        InterpError: for a layer or head out of range, an unknown ``by``,
            positions out of range or a key after its query, a ``contrast`` that
            is not two positions, a model whose norms or rotation cannot be
            frozen, or rows that do not reproduce the model's scores (above
            :data:`CHECK_RTOL`).
    """
    return attribute_scores(
        model,
        tokens,
        layer=layer,
        head=head,
        query_positions=query_positions,
        key_positions=key_positions,
        contrast=contrast,
        by=by,
        cache=cache,
    )[0]


def attribute_scores(
    model: HookedModel,
    tokens: Tokens,
    *,
    layer: int,
    head: int,
    query_positions: Any = -1,
    key_positions: Any = None,
    contrast: Any = None,
    by: str = "component",
    cache: Any = None,
) -> tuple[pd.DataFrame, Any]:
    """:func:`qk_attribution`'s table and the activations it read (for the analyses built on
    it, so that they run no second forward pass)."""
    check_model(model)
    layer, head = check_layer_head(model, layer, head)
    if by not in BYS:
        raise InterpError(f"unknown by {by!r}; choose one of {', '.join(BYS)}")
    tokens = check_tokens(model, tokens)
    bsz, n = tokens.shape
    qpos = read_positions(query_positions, n, "query_positions")
    geometry = runtime_of(model).qk_geometry(layer)
    pairs = _key_plan(qpos, key_positions, contrast, n, bsz, geometry)
    with eval_no_grad(model):
        acts, work = head_inputs(model, tokens, cache, layer)
        keys = list(range(n))  # every key: the check below needs whole rows
        qn, Q, _ = side_pieces(
            model, acts, layer=layer, head=head, side="q", rows=qpos, geometry=geometry
        )
        kn, K, _ = side_pieces(
            model, acts, layer=layer, head=head, side="k", rows=keys, geometry=geometry
        )
        # [q_piece, k_piece, batch, query, key]
        share = torch.einsum("ibpd,jbkd->ijbpk", Q, K) * geometry.scale
        gap, scale_of, against = _check(model, acts, layer, head, qpos, share.sum((0, 1)), geometry)
    kidx = {k: i for i, k in enumerate(keys)}
    explained = share.sum((0, 1))  # [batch, query, key]
    check_rtol = rtol(acts[hook_name("pattern", layer)].dtype, float32=CHECK_RTOL)
    if gap > check_rtol:
        raise InterpError(
            f"the pieces reproduce L{layer}H{head}'s {against} only to {gap:.2g} (above "
            f"{check_rtol:g}); this architecture does something to its queries or keys that "
            "QK attribution does not read, so no rows are returned"
        )
    names_q, Gq = _grouping([_group(*x, by) for x in qn])
    names_k, Gk = _grouping([_group(*x, by) for x in kn])
    frames = []
    if contrast is None:
        cells = share.mean(2)  # [i, j, query, key]
        grouped = torch.einsum("gi,ijpk,hj->pkgh", Gq, cells, Gk)  # [query, key, gq, gk]
        for pi, p in enumerate(qpos):
            ks = pairs[pi][1]
            block = grouped[pi, [kidx[k] for k in ks]]  # [key, gq, gk]
            frames.append(_cells(block, names_q, names_k, query_position=p, key_position=ks))
    else:
        a, b = _contrast_index(contrast, n, bsz)
        ia = torch.tensor([kidx[int(x)] for x in a])
        ib = torch.tensor([kidx[int(x)] for x in b])
        ar = torch.arange(bsz)
        for pi, p in enumerate(qpos):
            diff = (share[:, :, ar, pi, ia] - share[:, :, ar, pi, ib]).mean(-1)  # [i, j]
            block = torch.einsum("gi,ij,hj->gh", Gq, diff, Gk)[None]
            frames.append(_cells(block, names_q, names_k, query_position=p))
    df = pd.concat(frames, ignore_index=True)
    df.insert(0, "label", head_label(layer, head))
    df.insert(0, "head", head)
    df.insert(0, "layer", layer)
    if contrast is None:
        total = float(
            sum(explained[:, pi, kidx[k]].mean() for pi, (_, ks) in enumerate(pairs) for k in ks)
        )
    else:
        total = float(df["value"].sum())
    notes = list(geometry.notes)
    if geometry.softcap:
        notes.append(
            f"scores are soft-capped ({geometry.softcap:g} * tanh(s / {geometry.softcap:g})) after "
            "the sum: the rows attribute the score before the cap"
        )
    df.attrs.update(
        table_attrs(
            "qk_attribution",
            description="each (query-side, key-side) pair's exact share of a head's pre-softmax "
            "score, every norm's scale frozen from this run",
            method="exact",
            metric="attention score" if contrast is None else "score[a] - score[b]",
            unit="score (pre-softmax, after the model's scale)",
            model=model,
            forward_equivalents=work,
            by=by,
            total=total,
            score_gap=gap,
            score_scale=scale_of,
            checked_against=against,
            remainder=any(x[0] == "remainder" for x in qn),
            check_rtol=check_rtol,
            frozen="ln1" + (" and QK-norm" if geometry.q_norm is not None else "") + " scales",
            rotary=None if geometry.rotary is None else geometry.rotary.style,
            notes=notes,
            contrast=None
            if contrast is None
            else [list(map(int, x)) for x in _contrast_index(contrast, n, bsz)],
        )
    )
    return df, acts


def _grouping(labels: list[str]) -> tuple[list[str], torch.Tensor]:
    """The distinct labels in order and the ``[group, piece]`` 0/1 matrix that sums pieces."""
    names = list(dict.fromkeys(labels))
    G = torch.zeros(len(names), len(labels))
    for j, lab in enumerate(labels):
        G[names.index(lab), j] = 1.0
    return names, G


def _cells(block: torch.Tensor, names_q, names_k, *, query_position, key_position=None):
    """Rows of ``block [key, q_group, k_group]``: one per key and pair of groups."""
    nk, nq, nkk = block.shape
    data = {
        "query_position": np.full(nk * nq * nkk, int(query_position)),
        "query_component": np.tile(np.repeat(np.array(names_q, dtype=object), nkk), nk),
        "key_component": np.tile(np.array(names_k, dtype=object), nk * nq),
        "value": block.reshape(-1).double().numpy(),
    }
    if key_position is not None:
        data["key_position"] = np.repeat(np.asarray(key_position, dtype=int), nq * nkk)
    cols = ["query_position", "key_position", "query_component", "key_component", "value"]
    return pd.DataFrame({c: data[c] for c in cols if c in data})


def _check(model, acts, layer, head, qpos, explained, geometry) -> tuple[float, float, str]:
    """How far the explained scores ``[batch, query, key]`` (every key) are from the model's:
    its ``hook_attn_scores`` over the largest score where that hook holds scores, else (a
    bridge whose hook holds the pattern) its ``hook_pattern`` against the softmax of the
    explained scores over the keys the model lets each query see."""
    scores = acts[hook_name("attn_scores", layer)][:, head].float()[:, qpos]
    pattern = acts[hook_name("pattern", layer)][:, head].float()[:, qpos]
    mine = _capped(explained, geometry)
    live = scores > MASKED
    holds_scores = not torch.allclose(scores.masked_fill(~live, 0.0), pattern, atol=1e-6)
    if holds_scores:
        scale_of = float(scores[live].abs().max())
        gap = float((mine - scores)[live].abs().max()) / max(scale_of, 1e-12)
        return gap, scale_of, "scores"
    seen = pattern > 0
    probs = torch.softmax(mine.masked_fill(~seen, float("-inf")), -1)
    return float((probs - pattern).abs().max()), float(mine[seen].abs().max()), "pattern"


def _capped(s: torch.Tensor, geometry: QKGeometry) -> torch.Tensor:
    """What the model's ``hook_attn_scores`` holds for explained scores ``s`` (after the
    soft cap, where there is one)."""
    if geometry.softcap:
        return geometry.softcap * torch.tanh(s / geometry.softcap)
    return s


def head_inputs(
    model: HookedModel, tokens: torch.Tensor, cache: Any, layer: int
) -> tuple[Any, float]:
    """The activations a QK analysis of ``layer`` reads, and their cost in forward passes:
    ``cache`` checked against ``tokens`` and completed, else one forward pass keeping only
    :func:`needed_hooks`."""
    wanted = needed_hooks(model, layer)
    acts = check_cache(model, tokens, cache, needs=wanted)
    if acts is not None:
        return acts, cache_work(acts)
    keep = set(wanted)
    _, acts = model.run_with_cache(tokens, names_filter=lambda name: name in keep)
    return acts, 1.0


def needed_hooks(model: HookedModel, layer: int) -> list[str]:
    have = hook_names(model)
    names = [hook_name("embed"), hook_name("resid_pre", layer), hook_name("attn_scores", layer)]
    names.append(hook_name("pattern", layer))
    if hook_name("pos_embed") in have and runtime_of(model).has_positional:
        names.append(hook_name("pos_embed"))
    for l in range(layer):
        names.append(hook_name("z", l))
        if hook_name("mlp_out", l) in have:
            names.append(hook_name("mlp_out", l))
        if f"blocks.{l}.ln2_post.hook_out" in have:
            names.append(f"blocks.{l}.ln2_post.hook_out")
    return names


def _key_plan(qpos, key_positions, contrast, n, bsz, geometry) -> list[tuple[int, list[int]]]:
    """For each query position, the keys whose scores are attributed."""
    if contrast is not None:
        _contrast_index(contrast, n, bsz)
        return [(p, []) for p in qpos]
    plan = []
    for p in qpos:
        lo = 0 if not geometry.window else max(0, p - geometry.window + 1)
        allowed = list(range(lo, p + 1))
        if key_positions is None:
            ks = allowed
        else:
            ks = read_positions(key_positions, n, "key_positions")
            late = [k for k in ks if k > p]
            if late:
                raise InterpError(
                    f"key_positions {late} come after query position {p}; a causal head "
                    "cannot attend to them"
                )
        plan.append((p, ks))
    return plan


def _contrast_index(contrast, n, bsz) -> tuple[list[int], list[int]]:
    """``contrast=(a, b)`` as two per-sequence position lists."""
    if not isinstance(contrast, tuple | list) or len(contrast) != 2:
        raise InterpError(f"contrast must be two key positions (a, b), got {contrast!r}")
    out = []
    for what, v in zip(("a", "b"), contrast, strict=True):
        if isinstance(v, int) or (hasattr(v, "ndim") and v.ndim == 0):
            vals = [int(v)] * bsz
        else:
            vals = [int(x) for x in v]
            if len(vals) != bsz:
                raise InterpError(f"contrast {what} has {len(vals)} positions for {bsz} sequences")
        for x in vals:
            if not -n <= x < n:
                raise InterpError(f"contrast position {x} is out of range for {n} positions")
        out.append([x % n for x in vals])
    if all(x == y for x, y in zip(*out, strict=True)):
        raise InterpError("contrast names the same key twice; the difference would be 0")
    return out[0], out[1]


def _contrast_keys(contrast, n, bsz) -> set[int]:
    if contrast is None:
        return set()
    a, b = _contrast_index(contrast, n, bsz)
    return set(a) | set(b)
