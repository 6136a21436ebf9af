"""The positional kernel of a head: its score as a function of how far the key is behind the query.

Definition. For a head of layer ``l``, a token distribution ``D`` and an
offset ``d`` in ``0 .. max_offset`` (``P = max_offset + 1`` positions):

    K(d) = mean over query positions p = d .. P-1 of  E_{a, b ~ D} [ s(a at p, b at p - d) ]
    K(0) = mean over positions p = 0 .. P-1 of  E_{a ~ D} [ s(a at p, a at p) ]

where ``s`` is the head's pre-softmax score (the model's scale, after its
QK-norms and rotation, before any soft cap or mask) between a query whose
residual stream holds token ``a``'s embedding and a key whose stream holds
``b``'s (plus the learned positional embedding of its position, where the
model has one), each through the layer's own ``ln1`` (its epsilon, gain and
bias), with ``b_Q``/``b_K``. At ``d >= 1`` the query and key tokens are drawn
*independently*: what position alone adds to a score, the match of a token
with itself (content) left out. At ``d = 0`` the query and the key are one
position, so they hold one token: ``K(0)`` is a token's mean score with
itself, the score a forward pass gives a position attending to itself.

Because ``s`` is bilinear in the query and key vectors and ``a``, ``b`` are
independent at ``d >= 1``, ``K(d)`` is the score of the *mean* query and the
*mean* key (``K(0)`` is the mean of each token's own score, computed token by
token):

* rotary models: ``K(d) = scale * (R_d qbar) . (R_0 kbar)``; position enters
  only through the rotation (:class:`interp.runtime.attention.Rotary`: the
  model's own pairing, partial rotary, scaled frequencies and gain), so the
  mean over ``p`` drops out;
* learned positions: ``K(d) = mean_p scale * qbar_p . kbar_{p-d}``, the
  diagonals of the learned positional circuit averaged over tokens;
* no positions at all: ``K`` is flat.

``distribution`` is the ids the tokens are drawn from (any shape; each
occurrence counts once, so a corpus's ids give its frequencies),
``"uniform"`` (every id of the vocabulary) or ``"bias"``: no token at all, so
the stream holds nothing (rotary models: the bias terms ``ln1`` bias,
``b_Q``, ``b_K`` alone) or only the position (learned positions: the
positional circuit, with the biases). In layer 0 the residual stream is
exactly this, so ``K`` is the mean of the model's own scores over such
sequences, ``K(0)`` the mean of their diagonal (``tests/test_positional.py``
checks both against ``hook_attn_scores``
on random Llama (grouped-query) and GPT-NeoX (partial rotary) models and on
our attention-only model); in later layers it is the direct path only, as
:func:`interp.analysis.qk_circuit` is. Offsets a sliding window masks are NaN.

Example:
    >>> from interp.models import load_model
    >>> df = positional_kernel(load_model("induction-2l"), layer=0, head=1)
    >>> list(df.columns), len(df)  # offsets 0 .. n_ctx - 1
    (['layer', 'head', 'label', 'offset', 'score'], 48)
    >>> int(df.loc[df["score"].idxmax(), "offset"])  # the previous-token head: offset 1
    1
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import torch

from interp.core.checks import check_int
from interp.core.errors import InterpError
from interp.core.head_checks import check_layer_head
from interp.core.hooks import head_label
from interp.core.protocol import HookedModel, check_model
from interp.outputs.frames import table_attrs
from interp.runtime import runtime_of
from interp.runtime.attention import QKGeometry

ROW_CHUNK = 4096  # token rows normalised at once (a [chunk, d_model] slab per step)


def position_kind(model: HookedModel) -> str:
    """``"rotary"``, ``"learned"`` or ``"none"``: how the model's scores learn of positions.

    Raises:
        InterpError: for a positional scheme the kernel does not model (ALiBi,
            shortformer, relative position biases).
    """
    kind = str(getattr(model.cfg, "positional_embedding_type", "standard") or "standard")
    if kind == "rotary":
        return "rotary"
    if kind != "standard":
        raise InterpError(
            f"positional_embedding_type {kind!r} adds positions in a way the positional kernel "
            "does not model; it covers learned positional embeddings and rotary ones"
        )
    return "learned" if runtime_of(model).has_positional else "none"


def default_max_offset(model: HookedModel) -> int:
    """``min(n_ctx, 101) - 1``: the offsets of the standard probe (BOS + 50 tokens twice)."""
    n_ctx = getattr(model.cfg, "n_ctx", None) or 101
    return min(int(n_ctx), 101) - 1


def token_weights(model: HookedModel, distribution: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct ids of ``distribution`` and their probabilities (``"uniform"``: every id).

    Raises:
        InterpError: for ids that are not integers, empty, or outside the vocabulary.
    """
    d_vocab = int(model.cfg.d_vocab)
    if isinstance(distribution, str):
        if distribution != "uniform":
            raise InterpError(
                f"distribution must be 'uniform', 'bias' or token ids, got {distribution!r}"
            )
        ids = torch.arange(d_vocab)
        return ids, torch.full((d_vocab,), 1.0 / d_vocab, dtype=torch.float64)
    try:
        ids = torch.as_tensor(distribution)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise InterpError(
            f"distribution must be token ids, got {type(distribution).__name__}"
        ) from exc
    if ids.numel() == 0:
        raise InterpError("distribution holds no ids; pass token ids, 'uniform' or 'bias'")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise InterpError(f"distribution ids must be integers, got dtype {ids.dtype}")
    ids = ids.flatten().long().cpu()
    if int(ids.min()) < 0 or int(ids.max()) >= d_vocab:
        raise InterpError(f"distribution ids must lie in [0, {d_vocab})")
    distinct, counts = torch.unique(ids, return_counts=True)
    return distinct, counts.double() / counts.sum()


def mean_queries_keys(
    model: HookedModel, layer: int, distribution: Any, n_positions: int, geometry: QKGeometry = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``qbar, kbar [P, n_heads, d_head]``: every head's mean query and key vector (before the
    rotation) over ``distribution``, at each of ``P`` positions (``P = 1`` unless the model
    has learned positions), exactly as the layer computes them from such a residual stream.
    Grouped key/value heads are repeated, one per query head."""
    rt = runtime_of(model)
    lay = rt.layer(layer)
    geometry = geometry or rt.qk_geometry(layer)
    n_heads = int(model.cfg.n_heads)
    W = {s: _per_query(lay.W[s].float(), n_heads) for s in ("q", "k")}  # [head, d_model, d_head]
    b = {
        s: torch.zeros(W[s].shape[0], W[s].shape[2])
        if lay.b[s] is None
        else _per_query(lay.b[s].float(), n_heads)
        for s in ("q", "k")
    }
    norms = {"q": geometry.q_norm, "k": geometry.k_norm}
    learned = position_kind(model) == "learned"
    P = n_positions if learned else 1
    d_model = int(model.cfg.d_model)
    W_E = model.W_E.detach().float()
    W_pos = model.W_pos.detach().float()[:P] if learned else torch.zeros(P, d_model)
    if isinstance(distribution, str) and distribution == "bias":
        ids, w = None, torch.ones(1, dtype=torch.float64)
    else:
        ids, w = token_weights(model, distribution)
    out = {s: torch.zeros(P, n_heads, W[s].shape[2], dtype=torch.float64) for s in ("q", "k")}
    linear = all(n is None for n in norms.values())
    for p in range(P):
        n_rows = 1 if ids is None else ids.numel()
        for lo in range(0, n_rows, ROW_CHUNK):
            X = (
                torch.zeros(1, d_model)
                if ids is None
                else W_E[ids[lo : lo + ROW_CHUNK].to(W_E.device)].cpu()
            )
            wc = w[lo : lo + ROW_CHUNK]
            U = _ln1(lay.ln1, X + W_pos[p]).double()  # [rows, d_model]
            for s in ("q", "k"):
                if linear:  # mean first: the projection is affine
                    out[s][p] += torch.einsum("r,rm,hme->he", wc, U, W[s].double())
                else:
                    v = torch.einsum("rm,hme->rhe", U, W[s].double()) + b[s].double()
                    v = norms[s](v.float()).double() if norms[s] is not None else v
                    out[s][p] += torch.einsum("r,rhe->he", wc, v)
        if linear:
            for s in ("q", "k"):
                out[s][p] += b[s].double()
    return out["q"], out["k"]


def self_scores(
    model: HookedModel, layer: int, distribution: Any, n_positions: int, geometry: QKGeometry
) -> torch.Tensor:
    """``[P, n_heads]`` float64: each head's mean score of a token with itself at each of
    ``P`` positions (a query and a key at one position hold one token), over
    ``distribution``: every token's query and key through ``ln1``, ``b_Q``/``b_K``, the
    QK-norms and the rotation of one position, token by token (the score is not bilinear
    in one token's vectors)."""
    rt = runtime_of(model)
    lay = rt.layer(layer)
    n_heads = int(model.cfg.n_heads)
    W = {s: _per_query(lay.W[s].float(), n_heads) for s in ("q", "k")}  # [head, d_model, d_head]
    b = {s: None if lay.b[s] is None else _per_query(lay.b[s].float(), n_heads) for s in "qk"}
    norms = {"q": geometry.q_norm, "k": geometry.k_norm}
    learned = position_kind(model) == "learned"
    d_model = int(model.cfg.d_model)
    W_E = model.W_E.detach().float()
    W_pos = model.W_pos.detach().float()[:n_positions] if learned else None
    if isinstance(distribution, str) and distribution == "bias":
        ids, w = None, torch.ones(1, dtype=torch.float64)
    else:
        ids, w = token_weights(model, distribution)
    out = torch.zeros(n_positions, n_heads, dtype=torch.float64)
    n_rows = 1 if ids is None else ids.numel()
    for p in range(n_positions):
        for lo in range(0, n_rows, ROW_CHUNK):
            X = (
                torch.zeros(1, d_model)
                if ids is None
                else W_E[ids[lo : lo + ROW_CHUNK].to(W_E.device)].cpu()
            )
            U = _ln1(lay.ln1, X if W_pos is None else X + W_pos[p])  # [rows, d_model]
            v = {}
            for s in ("q", "k"):
                x = torch.einsum("rm,hme->rhe", U, W[s])  # [rows, head, d_head]
                x = x if b[s] is None else x + b[s]
                x = norms[s](x).float() if norms[s] is not None else x
                if geometry.rotary is not None:  # both at one position: only the gain is left
                    x = geometry.rotary.rotate(x, torch.zeros(1), pos_dim=0)
                v[s] = x.double()
            own = (v["q"] * v["k"]).sum(-1) * geometry.scale  # [rows, head]
            out[p] += torch.einsum("r,rh->h", w[lo : lo + ROW_CHUNK], own)
    return out


def _per_query(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Grouped key/value weights repeated so there is one per query head."""
    return x if x.shape[0] == n_heads else x.repeat_interleave(n_heads // x.shape[0], dim=0)


def _ln1(norm: Any, x: torch.Tensor) -> torch.Tensor:
    """``x`` through the layer's ``ln1`` exactly as the model computes it (identity if none)."""
    if norm is None:
        return x.float()
    w = norm.weight
    if w is not None:
        x = x.to(w.device, w.dtype)
    return norm(x).float().cpu()


def layer_kernels(
    model: HookedModel,
    layer: int,
    *,
    distribution: Any = "uniform",
    max_offset: int,
    geometry: QKGeometry = None,
) -> torch.Tensor:
    """``[n_heads, max_offset + 1]``: the positional kernel of every head of ``layer``
    (module docstring), NaN at offsets a sliding window masks. ``geometry`` is the layer's
    (read from the runtime when not given)."""
    kind = position_kind(model)
    geometry = geometry or runtime_of(model).qk_geometry(layer)
    P = max_offset + 1
    qbar, kbar = mean_queries_keys(model, layer, distribution, P, geometry)
    if kind == "rotary":
        rot = geometry.rotary
        offsets = torch.arange(1, P)
        q = rot.rotate(qbar[0].float()[None].expand(P - 1, -1, -1), offsets, pos_dim=0).double()
        k = rot.rotate(kbar[0].float()[None], torch.zeros(1), pos_dim=0).double()
        K = torch.einsum("phe,he->hp", q, k[0]) * geometry.scale  # [head, offset 1..]
    elif kind == "learned":
        S = torch.einsum("phe,khe->hpk", qbar, kbar) * geometry.scale  # [head, query, key]
        diagonals = [S.diagonal(-d, dim1=1, dim2=2).mean(-1) for d in range(1, P)]
        K = torch.stack(diagonals, dim=1) if diagonals else S.new_zeros(S.shape[0], 0)
    else:
        flat = torch.einsum("he,he->h", qbar[0], kbar[0]) * geometry.scale
        K = flat[:, None].expand(-1, P - 1).clone()
    own = self_scores(model, layer, distribution, P if kind == "learned" else 1, geometry)
    K = torch.cat([own.mean(0)[:, None], K], dim=1)  # offset 0: a token with itself
    if geometry.window:
        K[:, geometry.window :] = float("nan")
    return K.float()


def positional_kernel(
    model: HookedModel,
    *,
    layer: int,
    head: int,
    distribution: Any = "uniform",
    max_offset: int | None = None,
) -> pd.DataFrame:
    """A head's mean pre-softmax score at each offset ``0 .. max_offset`` (module docstring).

    ``K(d)`` is the mean score of a query and a key ``d`` positions behind it, their tokens
    drawn independently from ``distribution`` (``K(0)``: a token with itself): what position
    alone adds to a score. Weights only: no forward pass.

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``). Only its weights are read.
        layer: A block index: the head's layer.
        head: A head index within ``layer``.
        distribution: The tokens a weight-based kernel averages over, query and key drawn
            independently: token ids (any shape; each occurrence counts once),
            ``'uniform'`` (default: every id) or ``'bias'`` (no token: the bias terms, and
            learned positions where the model has them).
        max_offset: The largest ``offset`` a positional kernel reports (``None``: the
            standard probe's, ``min(n_ctx, 101) - 1``: :func:`default_max_offset`).

    Returns:
        A table with one row per offset: ``layer, head, label, offset, score`` (the model's
        score units: after its scale, before any soft cap; NaN where a sliding window masks
        the offset). ``attrs`` follow :data:`interp.outputs.frames.SCHEMA`, plus
        ``distribution``, ``position_kind`` and ``notes``.

    Raises:
        InterpError: for a layer or head out of range, a bad ``distribution``, a
            ``max_offset`` below 0 or past the context, or a positional scheme the
            kernel does not model (ALiBi, shortformer, relative position biases).
    """
    check_model(model)
    layer, head = check_layer_head(model, layer, head)
    kind = position_kind(model)
    if max_offset is None:
        max_offset = default_max_offset(model)
    max_offset = check_int(max_offset, "max_offset", minimum=0)
    n_ctx = getattr(model.cfg, "n_ctx", None)
    if n_ctx is not None and max_offset >= int(n_ctx):
        raise InterpError(
            f"max_offset {max_offset} does not fit the context n_ctx={n_ctx}; use at most "
            f"{int(n_ctx) - 1}"
        )
    if not (isinstance(distribution, str) and distribution == "bias"):
        token_weights(model, distribution)  # checked before any work
    with torch.no_grad():
        K = layer_kernels(model, layer, distribution=distribution, max_offset=max_offset)[head]
    df = pd.DataFrame(
        {
            "layer": layer,
            "head": head,
            "label": head_label(layer, head),
            "offset": range(max_offset + 1),
            "score": K.double().numpy(),
        }
    )
    geometry = runtime_of(model).qk_geometry(layer)
    notes = list(geometry.notes)
    if geometry.softcap:
        notes.append("scores are before the model's soft cap")
    if geometry.window:
        notes.append(f"offsets from {geometry.window} on are outside the sliding window: NaN")
    df.attrs.update(
        table_attrs(
            "positional_kernel",
            description="a head's mean pre-softmax score at each offset, query and key tokens "
            "drawn independently from a distribution (weights only)",
            method="exact",
            metric="attention score",
            unit="score (pre-softmax, after the model's scale)",
            model=model,
            forward_equivalents=0.0,
            distribution=_describe(distribution),
            position_kind=kind,
            notes=notes,
        )
    )
    return df


def _describe(distribution: Any) -> str:
    if isinstance(distribution, str):
        return distribution
    n = torch.as_tensor(distribution).numel()
    return f"{n} token ids"
