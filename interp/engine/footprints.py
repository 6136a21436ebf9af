"""The runner's memory model: the :class:`~interp.engine.chunks.Footprint` of each analysis.

Every analysis that runs on :mod:`interp.engine.runner` states what it holds at its peak,
beyond the model's weights: bytes whatever the chunk (``fixed``) and bytes per prompt of a
chunk (``per_prompt``). The formulas live here, one function per kind of work, from the
model's config and the analysis's options (the pieces, a forward pass's transients, a
residual stream, a backward pass, are :mod:`interp.core.memory`'s); the sweep engine's
is :mod:`interp.engine.sweeps.cost`, the edge engine's :mod:`interp.engine.edges`'. The
FLOPs are :mod:`interp.engine.cost`'s. Tensors an analysis makes in float32 count 4 bytes
an element; the model's own activations count its dtype's.

Example:
    >>> from interp.models import load_model
    >>> model = load_model("induction-2l")
    >>> scores_footprint(model, 8, cached=True).per_prompt  # the cache holds the passes
    0
    >>> a = dictionary_pass_footprint(model, 8, d_sae=64)
    >>> a.fixed, a.per_prompt > a.fixed
    (2048, True)
"""

from __future__ import annotations

from collections.abc import Sequence

from interp.core.memory import Dims, backward_bytes, element_bytes, forward_bytes, stream_bytes
from interp.core.protocol import HookedModel
from interp.engine.chunks import Footprint
from interp.runtime import runtime_of

F32 = 4  # bytes of a float32 element (what analyses compute in)

__all__ = [
    "atlas_footprint", "attribution_footprint", "dictionary_pass_footprint",
    "dictionary_training_footprint", "dla_footprint", "feature_reading_footprint",
    "generation_footprint", "lens_footprint", "qk_footprint", "scores_footprint",
]  # fmt: skip


def scores_footprint(model: HookedModel, pos: int, *, cached: bool) -> Footprint:
    """Head scores (:mod:`interp.analysis.heads.scores`): a forward pass per prompt, none
    when the patterns come from a cache.

    Args:
        model: The hooked model.
        pos: Tokens per prompt.
        cached: Whether a cache supplies the patterns.

    Returns:
        The footprint.
    """
    return Footprint(fixed=0, per_prompt=0 if cached else forward_bytes(model, 1, pos))


def dla_footprint(
    model: HookedModel, pos: int, *, reads: int, rows: Sequence[int] | None, cached: bool
) -> Footprint:
    """Direct logit attribution: a forward pass unembedding ``rows`` and the activations it
    reads, ``reads`` vectors of ``d_model`` per prompt in float32; nothing with a cache.

    Args:
        model: The hooked model.
        pos: Tokens per prompt.
        reads: Activations read per prompt (hooks x positions).
        rows: The rows the pass unembeds (:meth:`interp.runtime.base.Runtime.unembedded`).
        cached: Whether a cache supplies the activations.

    Returns:
        The footprint.
    """
    per = forward_bytes(model, 1, pos, rows=rows) + reads * int(model.cfg.d_model) * F32
    return Footprint(fixed=0, per_prompt=0 if cached else per)


def lens_footprint(
    model: HookedModel, pos: int, *, reads: int, readout: int, cached: bool
) -> Footprint:
    """The logit lens: per prompt, every stage's stream at the positions read (``reads``
    vectors in the model's dtype, filled by a pass stopped before the unembedding, none
    with a cache); fixed, one chunk of ``readout`` bytes of logits, its log-probabilities
    beside it, then their comparison with the target's (bool) and its int32 count: 2.25
    chunks.

    Args:
        model: The hooked model.
        pos: Tokens per prompt.
        reads: Streams read per prompt (stages x positions).
        readout: The bytes of one chunk of readout logits.
        cached: Whether a cache supplies the streams.

    Returns:
        The footprint.
    """
    stack = reads * int(model.cfg.d_model) * element_bytes(model)
    per = stack + (0 if cached else forward_bytes(model, 1, pos, rows=()))
    return Footprint(fixed=readout * 9 // 4, per_prompt=per)


def attribution_footprint(
    model: HookedModel,
    pos: int,
    *,
    rows: Sequence[int] | None,
    edited: Sequence[str],
    patterns: Sequence[str] = (),
) -> Footprint:
    """Head attribution: a forward and backward pass (logits at ``rows``), and at each of
    the ``edited`` hooks the heads' outputs, their replacement values and their gradients;
    the ``patterns`` a QK correction reads.

    Args:
        model: The hooked model.
        pos: Tokens per prompt.
        rows: The rows the pass unembeds.
        edited: The hooks whose activations are attributed (``hook_z`` of each layer).
        patterns: The pattern hooks kept for the correction.

    Returns:
        The footprint.
    """
    rt = runtime_of(model)
    per = backward_bytes(model, 1, pos, rows=rows)
    per += 3 * sum(rt.activation_bytes(x, pos) for x in edited)
    per += sum(rt.activation_bytes(x, pos) for x in patterns)
    return Footprint(fixed=0, per_prompt=per)


def qk_footprint(
    model: HookedModel,
    pos: int,
    layer: int,
    by: str,
    *,
    dictionaries: Sequence[tuple[int, int | None]] = (),
    writers: bool = False,
) -> Footprint:
    """QK attribution of a head in ``layer``: per prompt, a forward pass stopped after
    ``layer`` (no logits), the activations it keeps (each earlier layer's heads' outputs
    and MLP, the layer's input) and the pieces built from them, twice (the pieces, then
    their normed copies; their projections to ``d_head`` are smaller): one per earlier head
    and MLP (``by="head"``), per earlier attention and MLP (``"component"``) or per earlier
    block (``"layer"``), and the embeddings, bias and remainder. Each dictionary adds its
    encode (pre-activations and activations, ``2 d_sae`` a position) and its active
    features' writes (``k`` a position for a TopK dictionary; at most 64 assumed for
    others); writers' dictionaries add the component split beside their pieces.

    Args:
        model: The hooked model.
        pos: Tokens per prompt.
        layer: The head's layer.
        by: ``"head"``, ``"component"`` or ``"layer"``.
        dictionaries: ``(d_sae, k)`` of each dictionary (``k`` None: not TopK).
        writers: Whether some dictionaries read writers' outputs.

    Returns:
        The footprint.
    """
    cfg = model.cfg
    stream = stream_bytes(model, pos, element=F32)
    per_layer = {"head": int(cfg.n_heads) + 2, "component": 2, "layer": 1}[by]
    pieces = layer * per_layer + 3
    extra = 0
    for d_sae, k in dictionaries:
        slots = k if k is not None else min(d_sae, 64)
        extra += F32 * pos * 2 * d_sae + 2 * slots * stream
    if writers:
        extra += 2 * (layer + 2) * stream
    forward = forward_bytes(model, 1, pos, rows=())
    return Footprint(
        fixed=0, per_prompt=int(forward + (2 * pieces + 2 * layer + 2) * stream + extra)
    )


def atlas_footprint(model: HookedModel, pos: int, draws: int) -> Footprint:
    """The head atlas's probes: per prompt, a forward pass stopped after the last pattern
    (no logits), and a layer's patterns as the readers hold them: the model's, the
    recomputed one and each of ``draws`` control draws', with the scores they come from.

    Args:
        model: The hooked model.
        pos: Tokens per prompt.
        draws: Control draws per head.

    Returns:
        The footprint.
    """
    cfg = model.cfg
    d_vocab = int(getattr(cfg, "d_vocab_out", 0) or cfg.d_vocab)
    patterns = (draws + 2) * 2 * int(cfg.n_heads) * pos * pos * F32
    forward = forward_bytes(model, 1, pos) - F32 * pos * d_vocab
    return Footprint(fixed=0, per_prompt=int(forward + patterns))


def generation_footprint(
    model: HookedModel, prompt: int, n_new: int, *, cached: bool, keep_logits: bool
) -> Footprint:
    """Generation: per prompt, the keys and values of every column (with a cache), the
    largest pass (the prompt's with a cache, else the whole sequence's, unembedding its last
    row where the runtime can), the logits of a step in float32 and, when kept, every
    step's, and the tokens and scores of each column.

    Args:
        model: The hooked model.
        prompt: Tokens per prompt.
        n_new: Tokens generated.
        cached: Whether steps reuse the keys and values.
        keep_logits: Whether every step's logits are kept.

    Returns:
        The footprint.
    """
    dims = Dims.of(model)
    total = prompt + n_new
    kv = 2 * dims.n_layers * dims.n_kv_heads * dims.d_head * total * dims.element if cached else 0
    rows = runtime_of(model).unembedded([-1])
    one_pass = forward_bytes(model, 1, prompt if cached else total, rows=rows)
    logits = F32 * dims.d_vocab * (3 + (n_new if keep_logits else 0))
    return Footprint(fixed=0, per_prompt=int(kv + one_pass + logits + 24 * total))


def dictionary_pass_footprint(model: HookedModel, pos: int, d_sae: int) -> Footprint:
    """A dictionary's report (or a transcoder's): per prompt, a forward pass, three float32
    streams (the activation, its reconstruction, the error) and the features' activations;
    fixed, one prompt's activations more (the running statistics).

    Args:
        model: The hooked model.
        pos: Tokens per prompt.
        d_sae: The dictionary's features.

    Returns:
        The footprint.
    """
    acts = F32 * d_sae * pos
    per = forward_bytes(model, 1, pos) + 3 * stream_bytes(model, pos, element=F32)
    return Footprint(fixed=acts, per_prompt=per + acts)


def dictionary_training_footprint(
    model: HookedModel, pos: int, *, d_in: int, d_out: int, n_features: int, batch_size: int
) -> Footprint:
    """Training a dictionary (``d_out == d_in``) or a transcoder: fixed, its encoder and
    decoder, their gradients and Adam's two moments, and one mini-batch's tensors; per
    prompt of the activation stream, a pass stopped at the hooks (no logits) and its input
    and target rows in float32.

    Args:
        model: The hooked model.
        pos: Tokens per prompt.
        d_in: The width read.
        d_out: The width written (``d_in`` for a sparse autoencoder).
        n_features: The dictionary's features.
        batch_size: Rows per training step.

    Returns:
        The footprint.
    """
    fixed = F32 * (4 * ((d_in + d_out) * n_features) + 6 * batch_size * n_features)
    per = forward_bytes(model, 1, pos, rows=()) + F32 * pos * (d_in + d_out)
    return Footprint(fixed=fixed, per_prompt=per)


def feature_reading_footprint(
    model: HookedModel,
    pos: int,
    *,
    d_in: int,
    d_sae: int,
    features: int,
    top: int,
    window: int,
    copies: int,
    cached: bool,
) -> Footprint:
    """Reading features' top contexts: fixed, the running top contexts (values, places and
    windows of token ids and activations) held ``copies`` times while merging; per prompt,
    the activations read and the encoder's pre-activations, activations and mask, and a
    pass stopped at the hook unless a cache supplies it.

    Args:
        model: The hooked model.
        pos: Tokens per prompt.
        d_in: The dictionary's input width.
        d_sae: Its features.
        features: The features read.
        top: Contexts kept per feature.
        window: Tokens of each context.
        copies: Copies of the contexts held at once (:func:`interp.dictionaries.top.copies`).
        cached: Whether a cache supplies the activations.

    Returns:
        The footprint.
    """
    fixed = copies * features * top * (F32 + 8 + window * 12)
    per = pos * (F32 * d_in + 3 * F32 * d_sae)
    if not cached:
        per += forward_bytes(model, 1, pos, rows=())
    return Footprint(fixed=fixed, per_prompt=per)
