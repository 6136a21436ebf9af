"""What a head's query and key are made of: the residual stream's pieces, through the head.

The residual stream layer ``l`` reads is a sum of what every earlier
component wrote (the embeddings, each head's ``z_h W_O``, each layer's output
bias, each MLP). :func:`residual_pieces` lists those pieces, one per head or
summed per component or per layer; :func:`side_pieces` carries them through
the layer's norm (its scale frozen at this run's), the head's projection, any
QK-norm and the rotation of each position, so that they sum to the head's own
rotated query (or key). :func:`head_inputs` runs the one forward pass these
read, stopped after the head's layer (no later block, no unembedding), and
counts it (:mod:`interp.engine.cost`: block 0, and block 1 up to its pattern).

Example:
    >>> from interp.models import load_model
    >>> import torch
    >>> model = load_model("induction-2l")
    >>> acts, cost = head_inputs(model, torch.tensor([[0, 5, 6, 5]]), None, 1)
    >>> [p[0] for p in residual_pieces(model, acts, 1, by="component")], cost.forward_equivalents
    (['embed', 'pos_embed', 'L0.attn'], 0.776)
"""

from __future__ import annotations

from typing import Any

import torch

from interp.core.errors import InterpError
from interp.core.hooks import head_label, hook_name
from interp.core.precision import tolerance, within
from interp.core.protocol import HookedModel, hook_names
from interp.engine.batching import Cost
from interp.engine.cache import cache_of, cache_work, check_cache
from interp.engine.cost import cache_pass_work, work_of
from interp.runtime import runtime_of
from interp.runtime.attention import QKGeometry

REMAINDER_TOL = 1e-5  # of the stream's largest entry: a larger gap is a `remainder` piece
# A piece: (label, kind, layer, [batch, pos, d_model]); kind is embed, head, attn_bias, attn,
# mlp, layer or remainder.
Piece = tuple[str, str, int | None, torch.Tensor]


def needed_hooks(model: HookedModel, layer: int) -> list[str]:
    """The hooks a QK analysis of ``layer`` reads (the last of them fires in ``layer``)."""
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


def head_inputs(
    model: HookedModel, tokens: torch.Tensor, cache: Any, layer: int, extra: tuple[str, ...] = ()
) -> tuple[Any, Cost]:
    """The activations a QK analysis of ``layer`` reads, and what they cost: ``cache``
    checked against ``tokens`` and completed, else one forward pass keeping only
    :func:`needed_hooks` (and the hooks ``extra``, which must fire no later than ``layer``'s
    pattern: a dictionary's) and stopped once ``layer``'s pattern is known (``layer + 1`` of
    the model's blocks)."""
    wanted = list(dict.fromkeys([*needed_hooks(model, layer), *extra]))
    cost = Cost(model.cfg.n_layers)
    acts = check_cache(model, tokens, cache, needs=wanted)
    if acts is not None:
        cost.add(work_of(model, tokens.shape[1], blocks=cache_work(acts)))
        return acts, cost
    acts = cache_of(model, tokens, wanted)
    lacking = [n for n in wanted if n not in acts]
    if lacking:
        raise InterpError(f"this model has no hook {lacking[0]}; QK attribution needs it")
    cost.add(inputs_work(model, tokens.shape[1], layer))
    return acts, cost


def inputs_work(model: HookedModel, pos: int, layer: int) -> float:
    """The forward-equivalents of :func:`head_inputs`' pass: stopped once ``layer``'s pattern
    is known (:func:`interp.engine.cost.cache_pass_work`)."""
    return cache_pass_work(model, pos, needed_hooks(model, layer))


def residual_pieces(model: HookedModel, acts: Any, layer: int, *, by: str = "head") -> list[Piece]:
    """What entered ``layer``'s residual stream, piece by piece: the embeddings, then per
    earlier layer its heads (``by="head"``: one piece each, plus ``L{l}.attn_bias`` where
    the output bias is not zero) or their sum (``"component"``: ``L{l}.attn``) and its MLP
    (``L{l}.mlp``), or the whole block (``"layer"``: ``L{l}``). A gap between their sum and
    the stream above :data:`REMAINDER_TOL` is a last ``remainder`` piece."""
    rt = runtime_of(model)
    dev = acts[hook_name("resid_pre", layer)].device  # where the layer computes (a split model)

    def read(name: str) -> torch.Tensor:
        return acts[name].to(dev).float()

    out: list[Piece] = [("embed", "embed", None, read(hook_name("embed")))]
    pe = read(hook_name("pos_embed")) if hook_name("pos_embed") in acts else None
    if pe is not None and rt.has_positional and pe.shape == out[0][3].shape:
        out.append(("pos_embed", "embed", None, pe))
    b_O = rt.output_bias()
    for l in range(layer):
        W_O = rt.layer_weight("W_O", l).to(dev).float()  # [head, d_head, d_model]
        z = read(hook_name("z", l))  # [batch, pos, head, d_head]
        has_bias = b_O is not None and bool(b_O[l].abs().max() > 0)
        bias = b_O[l].to(dev).float() if has_bias else None
        if by == "head":
            per = list(torch.einsum("bphe,hed->hbpd", z, W_O))
            labels = [head_label(l, h) for h in range(len(per))]
            if bias is not None:
                per.append(bias.expand_as(per[0]))
                labels.append(f"L{l}.attn_bias")
        else:  # every head at once: [batch, pos, head * d_head] @ [head * d_head, d_model]
            whole = z.flatten(2) @ W_O.flatten(0, 1)
            per, labels = [whole if bias is None else whole + bias], [f"L{l}.attn"]
        post = rt.norm("ln1_post", l)
        if post is not None:  # a sandwich norm on the attention's output, frozen too
            per = post.frozen(per)
        mlp = None
        if hook_name("mlp_out", l) in acts and not rt.attention_only:
            post_mlp = f"blocks.{l}.ln2_post.hook_out"
            mlp = read(post_mlp if post_mlp in acts else hook_name("mlp_out", l))
        if by == "layer":
            out.append((f"L{l}", "layer", l, per[0] if mlp is None else per[0] + mlp))
            continue
        for lab, piece in zip(labels, per, strict=True):
            kind = "attn" if by != "head" else "attn_bias" if lab.endswith("bias") else "head"
            out.append((lab, kind, l, piece))
        if mlp is not None:
            out.append((f"L{l}.mlp", "mlp", l, mlp))
    given = acts[hook_name("resid_pre", layer)]
    resid = given.float()
    missing = resid.clone()  # in float16 / bfloat16: the stream's own rounding too
    for t in out:
        missing -= t[3]
    size = float(resid.abs().max())
    tol = tolerance(given.dtype, size, float32=REMAINDER_TOL)
    if not within(float(missing.abs().max()), tol):  # NaN: a remainder (then refused)
        out.append(("remainder", "remainder", None, missing))
    return out


def side_pieces(
    model: HookedModel,
    acts: Any,
    terms: list[Piece],
    *,
    layer: int,
    head: int,
    side: str,
    rows: list[int],
    geometry: QKGeometry,
) -> tuple[list[str], torch.Tensor]:
    """One side's pieces after every frozen norm, the projection and the rotation: their
    labels (the last is ``bias``: the norm's bias and ``b_Q`` / ``b_K``) and
    ``[piece, batch, len(rows), d_head]``, which sum to the head's own rotated query
    (``side="q"``) or its key/value head's key (``"k"``) at ``rows``.

    Raises:
        InterpError: for a norm that is not a LayerNorm / RMSNorm with a gain.
    """
    stack = torch.stack([t[3][:, rows] for t in terms])  # [piece, batch, R, d_model]
    pieces = project_pieces(
        model, acts, stack, layer=layer, head=head, side=side, rows=rows, geometry=geometry
    )
    return [t[0] for t in terms] + ["bias"], pieces


def project_pieces(
    model: HookedModel,
    acts: Any,
    stack: torch.Tensor,
    *,
    layer: int,
    head: int,
    side: str,
    rows: list[int],
    geometry: QKGeometry,
) -> torch.Tensor:
    """Residual-stream pieces ``stack [piece, batch, len(rows), d_model]`` (summing to
    ``layer``'s input at ``rows``) after every frozen norm, the head's projection, any QK-norm
    and the rotation of each row: ``[piece + 1, batch, len(rows), d_head]``, the last the
    ``bias`` piece (the norm's bias and ``b_Q`` / ``b_K``). The one place a piece of the
    residual stream becomes a piece of a head's query or key (:func:`side_pieces`, and the
    feature pieces of :mod:`interp.analysis.heads.qk.features`).

    Raises:
        InterpError: for a norm that is not a LayerNorm / RMSNorm with a gain.
    """
    rt = runtime_of(model)
    resid = acts[hook_name("resid_pre", layer)].float()[:, rows]  # [batch, R, d_model]
    lay = rt.layer(layer)
    n_heads = int(model.cfg.n_heads)
    idx = head if side == "q" else head // max(1, n_heads // rt.n_kv_heads)
    W = lay.W[side][idx].float()  # [d_model, d_head]
    b = lay.b[side]
    b = torch.zeros(W.shape[1]) if b is None else b[idx].float()
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
    pieces = torch.cat([stack @ W, (const @ W + b)[None]])  # [piece + 1, batch, R, d_head]
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
    return pieces
