"""TransformerLens hook names, built in one place.

Every hooked model `interp` supports (the toy heads, our attention-only
models, and ``TransformerBridge`` wrappers of Hugging Face models) exposes
the same names, so analysis code asks this module for them instead of
formatting strings itself.

Example:
    >>> hook_name("pattern", 1)
    'blocks.1.attn.hook_pattern'
    >>> hook_name("resid_pre", 0)
    'blocks.0.hook_resid_pre'
    >>> hook_name("embed")
    'hook_embed'
"""

from __future__ import annotations

from interp.core.errors import InterpError

_ATTN = {"q", "k", "v", "z", "pattern", "attn_scores", "result"}
_BLOCK = {"resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out"}
_LN1 = {"ln1_scale": "ln1.hook_scale", "ln1_normalized": "ln1.hook_normalized"}
_TOP = {"embed": "hook_embed", "pos_embed": "hook_pos_embed"}


def hook_name(kind: str, layer: int | None = None) -> str:
    """The TransformerLens hook name for activation ``kind`` in ``layer``.

    Raises:
        InterpError: for an unknown kind, or a per-layer kind without a layer.
    """
    if kind in _TOP:
        return _TOP[kind]
    if kind == "ln_final_scale":
        return "ln_final.hook_scale"
    known = sorted(_ATTN | _BLOCK | set(_LN1) | set(_TOP))
    if kind not in _ATTN | _BLOCK | set(_LN1):
        raise InterpError(f"unknown activation kind {kind!r}; known kinds: {', '.join(known)}")
    if layer is None:
        raise InterpError(f"activation kind {kind!r} needs a layer index")
    if kind in _ATTN:
        return f"blocks.{layer}.attn.hook_{kind}"
    if kind in _LN1:
        return f"blocks.{layer}.{_LN1[kind]}"
    return f"blocks.{layer}.hook_{kind}"


def head_label(layer: int, head: int) -> str:
    """The conventional head label ``L{layer}H{head}``."""
    return f"L{layer}H{head}"


def stage_names(n_layers: int, *, first: str = "embed") -> list[str]:
    """The residual stream's stages: ``first`` (stage 0, what block 0 reads: the embeddings
    for the lens, a word's token embedding for word states), then ``L0`` ... ``L{n-1}``
    (stage ``l + 1``, the stream after block ``l``).

    Example:
        >>> stage_names(2), stage_names(1, first="token embedding")
        (['embed', 'L0', 'L1'], ['token embedding', 'L0'])
    """
    return [first, *(f"L{l}" for l in range(n_layers))]
