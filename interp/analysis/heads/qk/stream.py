"""The stream a head reads, as its writers' pieces (the method: :mod:`.writers`).

:func:`split_stream` lists the pieces at every position (:class:`Split`: the tokens'
embeddings and the dictionaries' active features, which differ by position, and the pieces
every position has); :func:`writer_side` carries them through the head's frozen norms,
projection and rotation, as :mod:`~interp.analysis.heads.qk.features` does for one residual
dictionary.

Example:
    >>> import torch
    >>> from interp.models import load_model
    >>> from interp.dictionaries import Dictionary
    >>> from interp.analysis.heads.qk.inputs import head_inputs, residual_pieces
    >>> from interp.analysis.heads.qk.writers import check_writers
    >>> model = load_model("induction-2l")
    >>> D = Dictionary.random(d_in=128, d_sae=32, architecture="topk", k=2,
    ...                       hook_name="blocks.0.hook_attn_out")
    >>> tokens = torch.tensor([[0, 37, 6, 37]])
    >>> acts, _ = head_inputs(model, tokens, None, 1, extra=(D.hook_name,))
    >>> ws = check_writers(model, [D], layer=1, side="key")
    >>> split = split_stream(model, acts, tokens, ws, residual_pieces(model, acts, 1,
    ...                      by="component"), layer=1, by="component")
    >>> split.names, split.code_name(37)
    (['pos_embed', 'error', 'b_dec'], 'embed:37')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from interp.analysis.heads.qk.features import Side
from interp.analysis.heads.qk.inputs import REMAINDER_TOL, Piece, project_pieces, residual_pieces
from interp.analysis.heads.qk.writers import PAD, WRITER_RTOL, Writer, active_features
from interp.core.errors import InterpError
from interp.core.hooks import hook_name
from interp.core.precision import tolerance, within
from interp.core.protocol import HookedModel
from interp.dictionaries import Dictionary, Transcoder
from interp.dictionaries.logit_effects import token_strings
from interp.runtime import runtime_of
from interp.runtime.attention import QKGeometry


@dataclasses.dataclass(frozen=True)
class Group:
    """Pieces that differ by position: each position's own short list (a token, a
    dictionary's active features) of local codes ``ids [batch, pos, slot]`` (PAD: none) and
    their writes into the stream ``[batch, pos, slot, d_model]``."""

    name: Callable[[int], str]
    size: int
    ids: torch.Tensor
    writes: torch.Tensor


@dataclasses.dataclass(frozen=True)
class Split:
    """The stream at a layer's input as pieces: the :class:`Group` s, and the ``fixed``
    pieces (``names``; ``[batch, pos, d_model]`` each) every position has."""

    groups: list[Group]
    names: list[str]
    fixed: list[torch.Tensor]

    @property
    def base(self) -> int:
        """The codes below are the groups' (each group's codes offset by the sizes before)."""
        return sum(g.size for g in self.groups)

    def codes(self) -> torch.Tensor:
        """``[batch, pos, slot]``: every group's codes, offset, PAD kept."""
        out, off = [], 0
        for g in self.groups:
            out.append(torch.where(g.ids == PAD, g.ids, g.ids + off))
            off += g.size
        return torch.cat(out, -1)

    def writes(self) -> torch.Tensor:
        """``[batch, pos, slot, d_model]``: what each slot wrote."""
        return torch.cat([g.writes for g in self.groups], -2)

    def code_name(self, code: int) -> str:
        """A group code's label."""
        for g in self.groups:
            if code < g.size:
                return g.name(code)
            code -= g.size
        raise IndexError(code)

    def piece(self, label: str) -> torch.Tensor | None:
        """``[batch, pos, d_model]``: what the piece ``label`` wrote at every position (a
        token's embedding where that token sits, a feature where it is active), or ``None``
        for a label this split does not hold."""
        if label in self.names and label != "remainder":
            return self.fixed[self.names.index(label)]
        for g in self.groups:
            hit = [c for c in torch.unique(g.ids).tolist() if c != PAD and g.name(c) == label]
            if hit:
                mask = (g.ids == hit[0]).to(g.writes.dtype)
                return (g.writes * mask[..., None]).sum(-2)
        return None


def _features(
    D: Dictionary, x: torch.Tensor, prefix: str
) -> tuple[Group, list[str], list[torch.Tensor]]:
    """``D`` on ``x [batch, pos, d_in]``: its active features as a group, then its
    ``error`` and ``b_dec`` (in ``D``'s space)."""
    with torch.no_grad():
        ids, values = active_features(D.encode(x).float())
        W_dec, b_dec = D.W_dec.detach().float(), D.b_dec.detach().float()
        writes = values[..., None] * W_dec[ids.clamp(min=0)]  # [batch, pos, slot, d_in]
        error = x - (writes.sum(-2) + b_dec)
    group = Group(name=lambda c: f"{prefix}F{c}", size=D.d_sae, ids=ids, writes=writes)
    return group, [f"{prefix}error", f"{prefix}b_dec"], [error, b_dec.expand_as(x)]


def _transcoder_pieces(
    T: Transcoder, x: torch.Tensor, acts: Any, prefix: str
) -> tuple[Group, list[str], list[torch.Tensor]]:
    """A transcoder reading ``x [batch, pos, d_in]``: its active features, then its
    ``error`` (the real output at ``hook_name_out`` minus its own), ``b_dec`` and, with a
    skip connection, ``skip``."""
    y = acts[T.hook_name_out].to(x.device).float()
    with torch.no_grad():
        ids, values = active_features(T.encode(x).float())
        W_dec, b_dec = T.W_dec.detach().float(), T.b_dec.detach().float()
        writes = values[..., None] * W_dec[ids.clamp(min=0)]  # [batch, pos, slot, d_out]
        names, fixed = [f"{prefix}b_dec"], [b_dec.expand_as(y)]
        if T.W_skip is not None:
            names, fixed = [*names, f"{prefix}skip"], [*fixed, T.skip(x).float()]
        error = y - (writes.sum(-2) + sum(fixed))
    group = Group(name=lambda c: f"{prefix}F{c}", size=T.d_sae, ids=ids, writes=writes)
    return group, [f"{prefix}error", *names], [error, *fixed]


def _writer_pieces(
    model: HookedModel, acts: Any, w: Writer, prefix: str, wrote: torch.Tensor
) -> tuple[Group, list[str], list[torch.Tensor]]:
    """A writer dictionary's pieces in the stream's space, checked against ``wrote``
    ``[batch, pos, d_model]`` (what the writer put into the stream).

    Raises:
        InterpError: pieces that do not add up to ``wrote`` (the hook is not the writer's
            output on this model).
    """
    D, m = w.dictionary, w.layer
    rt = runtime_of(model)
    dev = wrote.device
    x = acts[D.hook_name].to(dev).float()
    if w.kind == "transcoder":  # reads the MLP's input, writes its output
        group, names, fixed = _transcoder_pieces(D, x.flatten(2), acts, prefix)
    else:
        x = x.flatten(2) if w.kind == "z" else x  # hook_z: [batch, pos, head * d_head]
        group, names, fixed = _features(D, x, prefix)
    writes = group.writes
    if w.kind == "z":  # decode through W_O, add the output bias, freeze any sandwich norm
        W_O = rt.layer_weight("W_O", m).to(dev).float().flatten(0, 1)
        writes, fixed = writes @ W_O, [f @ W_O for f in fixed]
        b_O = rt.output_bias()
        post = rt.norm("ln1_post", m)
        if b_O is not None and bool(b_O[m].abs().max() > 0) or post is not None:
            zero = torch.zeros(W_O.shape[1], device=dev)
            bias = b_O[m].to(dev).float() if b_O is not None else zero
            names, fixed = [*names, f"L{m}.attn_bias"], [*fixed, bias.expand_as(fixed[0])]
        if post is not None:
            inv = post.inverse_scale(writes.sum(-2) + sum(fixed))  # [batch, pos, 1]
            gain = 1.0 if post.gain is None else post.gain.to(dev).float()
            writes = post.centre(writes) * inv[..., None, :] * gain
            fixed = [post.centre(f) * inv * gain for f in fixed]
            if post.bias is not None:
                fixed[-1] = fixed[-1] + post.bias.to(dev).float()
    total = writes.sum(-2) + sum(fixed)
    size = float(wrote.abs().max())
    gap = float((total - wrote).abs().max())
    if not within(gap, tolerance(acts[D.hook_name].dtype, size, float32=WRITER_RTOL)):
        raise InterpError(
            f"the pieces of {D.hook_name!r} differ from what layer {m}'s {w.component} wrote into "
            f"the stream by {gap:.2g} (of {size:.2g}): on this model that hook is not the "
            "writer's output; put the dictionary on another hook (blocks.m.attn.hook_z, or the "
            "residual stream)"
        )
    return dataclasses.replace(group, writes=writes), names, fixed


def split_stream(
    model: HookedModel,
    acts: Any,
    tokens: torch.Tensor,
    writers: tuple[Writer, ...],
    terms: list[Piece],
    *,
    layer: int,
    by: str,
) -> Split:
    """The stream at ``layer``'s input as the pieces of the module docstring, summing to it
    exactly (a ``remainder`` piece where the writers do not add up).

    Args:
        model: a hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights.
        acts: the activations read (the dictionaries' hooks among them).
        tokens: ``[batch, pos]`` ids (the embedding pieces' names).
        writers: the side's dictionaries (:func:`check_writers`).
        terms: the stream's components by ``by``
            (:func:`~interp.analysis.heads.qk.inputs.residual_pieces`).
        layer: the attending head's layer.
        by: ``'head'``, ``'component'`` or ``'layer'``: what a writer without a dictionary is.

    Returns:
        The :class:`Split`.

    Raises:
        InterpError: a writer dictionary whose pieces do not add up to its writer's output.
    """
    comp = terms if by == "component" else residual_pieces(model, acts, layer, by="component")
    prefix = len(writers) > 1
    groups: list[Group] = []
    names: list[str] = []
    fixed: list[torch.Tensor] = []
    resid = next((w for w in writers if w.kind == "resid"), None)
    given = acts[hook_name("resid_pre", layer)]
    dev = given.device
    if resid is None:
        embed = next(t[3] for t in terms if t[0] == "embed")
        ids = tokens.to(dev).long()[..., None]
        groups.append(
            Group(
                name=lambda c: f"embed:{token_strings(model, [c])[0]}",
                size=int(model.cfg.d_vocab),
                ids=ids,
                writes=embed[..., None, :],
            )
        )
        for t in terms:
            if t[1] == "embed" and t[0] != "embed":
                names.append(t[0])
                fixed.append(t[3])
        start = 0
    else:
        D = resid.dictionary
        pre = f"{D.hook_name}:" if prefix else ""
        g, n, f = _features(D, acts[D.hook_name].to(dev).float(), pre)
        groups.append(g)
        names += n
        fixed += f
        start = resid.layer
    by_layer = {(w.layer, w.component): w for w in writers if w.kind != "resid"}
    for m in range(start, layer):
        mine = [c for c in ("attn", "mlp") if (m, c) in by_layer]
        src = terms if by == "head" or not mine else comp
        for t in src:
            if t[2] != m or t[1] == "remainder":
                continue
            if mine and ("mlp" if t[1] == "mlp" else "attn") in mine:
                continue
            names.append(t[0])
            fixed.append(t[3])
        for c in mine:
            w = by_layer[(m, c)]
            wrote = next(
                t[3] for t in comp if t[2] == m and t[1] == ("mlp" if c == "mlp" else "attn")
            )
            out = w.dictionary.hook_name_out if w.kind == "transcoder" else w.dictionary.hook_name
            pre = f"{out}:" if prefix else ""  # a transcoder by the hook it writes
            g, n, f = _writer_pieces(model, acts, w, pre, wrote)
            groups.append(g)
            names += n
            fixed += f
    resid_f = given.float()
    missing = resid_f - sum(g.writes.sum(-2) for g in groups) - sum(fixed)
    tol = tolerance(given.dtype, float(resid_f.abs().max()), float32=REMAINDER_TOL)
    if not within(float(missing.abs().max()), tol):  # NaN: a remainder (then refused)
        names.append("remainder")
        fixed.append(missing)
    return Split(groups=groups, names=names, fixed=fixed)


def writer_side(
    model: HookedModel,
    acts: Any,
    terms: list[Piece],
    writers: tuple[Writer, ...],
    *,
    tokens: torch.Tensor,
    by: str,
    layer: int,
    head: int,
    side: str,
    rows: list[int],
    geometry: QKGeometry,
) -> Side:
    """One side's pieces with writer dictionaries (:func:`split_stream`) after the frozen
    norms, the head's projection and the rotation: a
    :class:`~interp.analysis.heads.qk.features.Side` whose slots are the tokens' embeddings
    and the dictionaries' active features, and whose shared pieces end with ``bias``."""
    split = split_stream(model, acts, tokens, writers, terms, layer=layer, by=by)
    writes = split.writes()[:, rows]  # [batch, R, slot, d_model]
    stack = torch.cat([writes.permute(2, 0, 1, 3), torch.stack([f[:, rows] for f in split.fixed])])
    out = project_pieces(
        model, acts, stack, layer=layer, head=head, side=side, rows=rows, geometry=geometry
    )
    n = writes.shape[2]
    return Side(
        names=[*split.names, "bias"],
        fixed=out[n:],
        ids=split.codes()[:, rows],
        slots=out[:n],
        base=split.base,
        code_name=split.code_name,
        lookup=split.piece,
    )
