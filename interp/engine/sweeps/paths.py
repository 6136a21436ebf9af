"""The paths an exact sweep can take, each checked once per model against the plain loop.

``loop`` (one ``run_with_hooks`` per edit), ``resume-after-block`` and ``resume-blocks``
(module docstring of :mod:`interp.engine.sweeps.sweep`), and ``resume-suffix``
(:mod:`interp.engine.sweeps.suffix`); :func:`choose_path` takes the fastest whose check
passes, and :func:`likely_path` names it without the check, for estimates.

Example:
    >>> from interp.models import load_model
    >>> from interp.engine.sweeps.sites import head_edits
    >>> likely_path(load_model("induction-2l"), head_edits([(0, 0)]))
    'resume-after-block'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from interp.core.hooks import hook_name
from interp.core.protocol import HookedModel
from interp.engine.cost import ALL_ROWS, Cost
from interp.engine.sweeps import suffix
from interp.engine.sweeps.sites import Edit, edit_hooks, edit_start, site
from interp.runtime import Runtime, runtime_of

ATOL, RTOL = 1e-5, 1e-5  # a path must match the plain loop this closely to be used


# ------------------------------------------------------------------------------ the loop
def loop_pass(rt: Runtime, tokens, packed, values, cost: Cost | None = None) -> list:
    """One full forward pass per edit: the reference every faster path is checked against."""
    out = []
    for edit in packed:
        out.append(rt.run(tokens, hooks=edit_hooks([edit], values, tokens.shape[0])))
        if cost is not None:
            cost.forward(rows=ALL_ROWS)  # a loop pass unembeds every row
    return out


# ------------------------------------------------------- resume after the edited block
class AfterBlock:
    """``resume-after-block``: attention-only models, ``hook_z`` edits of one layer."""

    name = "resume-after-block"

    def __init__(self, rt: Runtime, tokens: torch.Tensor, layers: set[int], rows: Any = None):
        self.rt = rt
        self.tokens = tokens
        kept: dict[str, torch.Tensor] = {}

        def keep(x: torch.Tensor, hook: Any) -> None:
            kept[hook.name] = x

        names = [n for l in sorted(layers) for n in (hook_name("z", l), hook_name("resid_post", l))]
        self.base_logits = rt.run(tokens, hooks=[(n, keep) for n in names], rows=rows)
        self.kept = kept
        W_O = rt.model.W_O  # stacked once: each read of the property stacks every layer
        self.w_o = {l: W_O[l].detach() for l in layers}

    @staticmethod
    def fits(edits: Sequence[Edit]) -> bool:
        """Only edits of whole heads' ``hook_z`` in a single layer."""
        return all(
            len({st.layer for st in e}) == 1
            and all(st.hook.endswith("attn.hook_z") and st.channels is None for st in e)
            for e in edits
        )

    def run(self, packed, values, rows, cost: Cost | None = None) -> torch.Tensor:
        k = len(packed)
        layer = packed[0][0].layer
        z = self.kept[hook_name("z", layer)]
        resid = self.kept[hook_name("resid_post", layer)]
        W = self.w_o[layer].to(z.device).float()  # [head, d_head, d_model]
        target = None if values is None else values[hook_name("z", layer)].to(z.dtype)
        b = resid.shape[0]
        state = resid.repeat(k, *([1] * (resid.ndim - 1)))  # k copies (one: a copy)
        for i, edit in enumerate(packed):
            # accumulated in float32, rounded once into the residual stream
            state[i * b : (i + 1) * b] += _head_delta(edit, z, W, target).to(resid.dtype)
        logits = self.rt.run(self.tokens, start=layer + 1, state=state, rows=rows)
        if cost is not None:
            cost.per_token(sum(projection_flops(e, W.shape) for e in packed))  # through W_O
            cost.forward(k, start=layer + 1)
        return logits  # [k * batch, ...]: copy i in rows i * batch ..


def _head_delta(
    edit: Edit, z: torch.Tensor, W: torch.Tensor, target: torch.Tensor | None
) -> torch.Tensor:
    """What ``edit`` adds to the residual stream after its layer: ``(new - z) W_O`` over the
    edited slices of ``z [batch, pos, head, d_head]`` (``new``: ``target``'s slices, or zero),
    in float32. One whole head at every position (an ablation or patch of one head) is one
    product with that head's ``W_O``; other edits project their slices' differences through
    every head's."""
    if one_head(edit):
        h = edit[0].head
        new = 0.0 if target is None else target[:, :, h]
        return (new - z[:, :, h]).float() @ W[h]
    # new - z: the edited slices' new value minus z there (what z - z is elsewhere: 0)
    diff = torch.zeros_like(z)  # [batch, pos, head, d_head]
    for st in edit:
        sel = st.index(z.ndim, z.device)
        diff[sel] = (0.0 if target is None else target[sel]) - z[sel]
    return torch.einsum("bphe,hed->bpd", diff.float(), W)


def one_head(edit: Edit) -> bool:
    """Is ``edit`` one whole head at every position (:func:`_head_delta`'s one product)?

    Example:
        >>> from interp.engine.sweeps.sites import head_edits
        >>> one_head(head_edits([(1, 0)])[0])
        True

    Args:
        edit: The sites one edit changes (:mod:`interp.engine.sweeps.sites`).

    Returns:
        True for a single site naming a head and no positions.
    """
    return len(edit) == 1 and edit[0].head is not None and edit[0].positions is None


# ----------------------------------------------------- resume at the first edited block
class ResumeBlocks:
    """``resume-blocks``: skip the blocks before each edit's first layer (module docstring)."""

    name = "resume-blocks"

    def __init__(self, rt: Runtime, tokens: torch.Tensor, starts: set[int], rows: Any = None):
        self.rt = rt
        self.tokens = tokens
        self.base_logits, self.kept = rt.block_inputs(tokens, starts - {0}, rows=rows)

    def run(self, packed, values, rows, cost: Cost | None = None) -> torch.Tensor:
        k = len(packed)
        b = self.tokens.shape[0]
        start = min(edit_start(edit) for edit in packed)
        logits = self.rt.run(
            self.tokens,
            hooks=edit_hooks(packed, values, b),
            rows=rows,
            start=start,
            state=self.kept.get(start),
            copies=k,
        )
        if cost is not None:
            cost.forward(k, start=start)
        return logits  # [k * batch, ...]: copy i in rows i * batch ..


# ----------------------------------------------------------------------- choosing a path
def _probe(rt: Runtime, tokens: torch.Tensor, path_cls: Any, edit: Edit) -> tuple[bool, str]:
    """Does ``path_cls`` give the plain loop's logits for ``edit`` on a slice of ``tokens``?"""
    probe = tokens[:1, : min(tokens.shape[1], 8)]
    try:
        with torch.no_grad():
            layers = {st.layer for st in edit}
            engine = path_cls(rt, probe, layers if path_cls is AfterBlock else {min(layers)})
            got = engine.run([edit], None, None)
            ref = loop_pass(rt, probe, [edit], None)[0]
        if got.shape != ref.shape:
            return False, f"{path_cls.name} gave logits of shape {tuple(got.shape)}"
        if not _agree(got, ref):
            diff = float((got.float() - ref.float()).abs().max())
            return False, f"{path_cls.name} differed from the plain loop by {diff:.2e}"
        return True, ""
    except Exception as exc:  # noqa: BLE001 - any failure means "this path does not apply"
        return False, f"{path_cls.name} failed its check ({type(exc).__name__}: {exc})"


def _agree(got: torch.Tensor, ref: torch.Tensor) -> bool:
    """A path's logits against the plain loop's: to :data:`ATOL` / :data:`RTOL` in float32, to
    the precision's rule (:mod:`interp.core.precision`, of the largest logit) in float16 /
    bfloat16."""
    from interp.core.precision import is_reduced, tolerance

    if not is_reduced(ref.dtype):
        return bool(torch.allclose(got.float(), ref.float(), atol=ATOL, rtol=RTOL))
    size = float(ref.float().abs().max())
    return float((got.float() - ref.float()).abs().max()) <= tolerance(
        ref.dtype, size, float32=RTOL
    )


def _faster_paths(rt: Runtime, edits: Sequence[Edit]) -> list[tuple[Any, str, Edit]]:
    """The faster paths that apply to ``edits``, fastest first: each with the name its
    exactness check is remembered under and the edit that check probes."""
    out: list[tuple[Any, str, Edit]] = []
    if rt.can_resume and rt.attention_only and AfterBlock.fits(edits):
        out.append((AfterBlock, "sweep: after-block", [site("z", 0, head=0)]))
    if rt.n_layers > 1 and rt.can_resume:
        last = rt.n_layers - 1
        out.append((ResumeBlocks, "sweep: resume-blocks", [site("z", last, head=0)]))
    return out


def choose_path(
    model: HookedModel, tokens: torch.Tensor, edits: Sequence[Edit], *, rows: Any = None,
    shared: int = 0,
) -> tuple[str, str]:  # fmt: skip
    """Which path :func:`sweep` will take for these edits, and why (if not the fastest)."""
    rt = runtime_of(model)
    why = ""
    if suffix.fits(rt, edits, rows, shared, tokens.shape[1]):
        ok, why = rt.verdict("sweep: resume-suffix", lambda: suffix.check(rt, tokens))
        if ok:
            return suffix.ResumeSuffix.name, ""
    for cls, check, probe_edit in _faster_paths(rt, edits):
        ok, note = rt.verdict(check, lambda c=cls, e=probe_edit: _probe(rt, tokens, c, e))
        if ok:
            return cls.name, why
        why = note
    return "loop", why or "no faster exact path for this model"


def likely_path(
    model: HookedModel, edits: Sequence[Edit], *, rows: Any = None, shared: int = 0,
    pos: int | None = None,
) -> str:  # fmt: skip
    """The path :func:`choose_path` takes for ``edits`` when its exactness check passes (as
    it does on every model kind the runtime reads), known without running the check: the
    path an estimate counts."""
    rt = runtime_of(model)
    if pos is not None and suffix.fits(rt, edits, rows, shared, pos):
        return suffix.ResumeSuffix.name
    paths = _faster_paths(rt, edits)
    return paths[0][0].name if paths else "loop"


def projection_flops(edit: Edit, shape: Sequence[int]) -> float:
    """FLOPs per token of projecting ``edit``'s change of ``z`` through ``W_O``.

    ``resume-after-block`` (:func:`_head_delta`) multiplies one whole head's change by that
    head's ``W_O`` alone, any other edit's by every head's: ``2 * heads * d_head * d_model``.

    Example:
        >>> from interp.engine.sweeps.sites import head_edits
        >>> projection_flops(head_edits([(0, 1)])[0], (2, 32, 128))
        8192.0

    Args:
        edit: The sites one edit changes (:mod:`interp.engine.sweeps.sites`).
        shape: ``W_O``'s shape in the edited layer, ``[head, d_head, d_model]``.

    Returns:
        The FLOPs per token, as a float.
    """
    h, e, d = (int(x) for x in shape)
    return 2.0 * (1 if one_head(edit) else h) * e * d
