"""Writer dictionaries: the residual stream a head reads, split into its writers' features.

The stream at layer ``l``'s input is what its writers put there
(:func:`~interp.analysis.heads.qk.inputs.residual_pieces`): the token embedding, the
positional embedding, each earlier attention layer's output and each MLP's. A *writer
dictionary* sits on one writer's output: ``blocks.m.hook_attn_out``,
``blocks.m.attn.hook_z`` (heads concatenated, decoded through ``W_O`` and the layer's
output bias) or ``blocks.m.hook_mlp_out``. It rewrites that output as

    out = sum_f a_f W_dec[f] + b_dec + error,   error = out - decode(encode(out)),

so the stream becomes a sum of *pieces* (Ameisen et al. 2025; Kamath et al. 2025):

* the token embedding, one piece per token (``embed:<token>``; the id without a tokenizer);
* the positional embedding, where the model has one;
* for each writer with a dictionary, its active features (``F123``, or
  ``blocks.0.hook_attn_out:F123`` when a side has several dictionaries), its ``error``
  and its decoder bias ``b_dec`` (and ``L{m}.attn_bias``, the output bias, for ``hook_z``);
* each writer without a dictionary, as a component (``L{m}.attn``, a head, ``L{m}.mlp``);
* a residual dictionary (``blocks.s.hook_resid_pre``) replaces the embeddings and every
  writer before ``s`` by its own features, error and decoder bias;
* a ``remainder`` where these do not add up to the stream (a post-norm model's norms).

A sandwich norm on a writer's output (Gemma-2) is frozen at this run's scale, as for
components. Each writer's pieces are checked against what the writer put into the stream
(:data:`WRITER_RTOL`), so a hook that is not the writer's output is refused
(:mod:`~interp.analysis.heads.qk.stream` builds the pieces; this module checks the
dictionaries before any work). A writer is
one entry of :data:`WRITER_HOOKS`; a transcoder (reading an MLP's input, writing its
output) is one more: ``blocks.m.hook_mlp_out`` written by a
:class:`~interp.dictionaries.Transcoder` reading the MLP's input (its ``hook_name``, e.g.
``blocks.m.ln2.hook_normalized``) splits into its active features (activation x decoder
row), its ``error`` (the MLP's real output minus the transcoder's), its ``b_dec`` and, for a
skip transcoder, its ``skip`` (``x @ W_skip.T``).

Example:
    >>> from interp.models import load_model
    >>> from interp.dictionaries import Dictionary
    >>> model = load_model("induction-2l")
    >>> D = Dictionary.random(d_in=128, d_sae=32, architecture="topk", k=2,
    ...                       hook_name="blocks.0.hook_attn_out")
    >>> [w.kind for w in check_writers(model, [D], layer=1, side="key")]
    ['attn_out']
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from interp.core.errors import InterpError
from interp.core.protocol import HookedModel
from interp.dictionaries import Dictionary, Transcoder, check_dictionary, check_transcoder
from interp.runtime import runtime_of

PAD = -1  # a slot no piece fills at that position
WRITER_RTOL = 1e-4  # a writer's pieces vs what it wrote into the stream, over its largest entry
# hook suffix -> (kind, the component of its layer it replaces)
WRITER_HOOKS = {
    "hook_attn_out": ("attn_out", "attn"),
    "attn.hook_z": ("z", "attn"),
    "hook_mlp_out": ("mlp_out", "mlp"),
}


@dataclasses.dataclass(frozen=True)
class Writer:
    """A dictionary of one side of a QK split: ``kind`` (``resid``, a :data:`WRITER_HOOKS`
    kind or ``transcoder``), ``layer`` (a writer's own layer; for ``resid``, the first layer
    whose writes come after its hook) and ``component`` (``attn`` / ``mlp``: what it
    replaces; ``None`` for ``resid``)."""

    dictionary: Dictionary | Transcoder
    kind: str
    layer: int
    component: str | None


def writer_of(model: HookedModel, D: Any, *, layer: int, side: str) -> Writer:
    """One dictionary of a side, checked: where it reads, and that it is upstream.

    Args:
        model: a hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights.
        D: the dictionary.
        layer: the attending head's layer.
        side: ``'query'`` or ``'key'`` (named in messages).

    Returns:
        The :class:`Writer`.

    Raises:
        InterpError: not a :class:`~interp.dictionaries.Dictionary` or
            :class:`~interp.dictionaries.Transcoder`, a hook the model lacks or another
            width, a hook that is neither the residual stream nor a writer's output, or one
            that is not upstream of layer ``layer``'s input (a transcoder: as
            :func:`_transcoder_writer`).
    """
    if isinstance(D, Transcoder):
        return _transcoder_writer(model, D, layer=layer, side=side)
    if not isinstance(D, Dictionary):
        raise InterpError(
            f"{side}_dictionary must be a Dictionary or a Transcoder (or a list of them), got "
            f"{type(D).__name__}: load one with interp.dictionaries.load_dictionary(path)"
        )
    check_dictionary(model, D)
    start = dictionary_start(model, D)
    if start is not None:
        if start > layer:
            raise InterpError(
                f"the {side} dictionary reads {D.hook_name!r}, after layer {layer}'s input: pick "
                f"a dictionary at or before blocks.{layer}.hook_resid_pre, or a head of a later "
                "layer"
            )
        return Writer(D, "resid", start, None)
    parts = D.hook_name.split(".")
    found = None
    if len(parts) >= 3 and parts[0] == "blocks" and parts[1].isdigit():
        found = WRITER_HOOKS.get(".".join(parts[2:]))
    if found is None:
        raise InterpError(
            f"the {side} dictionary reads {D.hook_name!r}; QK attribution splits a head's input, "
            f"so it needs a residual-stream dictionary at or before layer {layer}'s input "
            f"(blocks.l.hook_resid_pre with l <= {layer}) or a writer's output before it "
            "(blocks.m.hook_attn_out, blocks.m.attn.hook_z or blocks.m.hook_mlp_out)"
        )
    m = int(parts[1])
    if m >= layer:
        raise InterpError(
            f"the {side} dictionary reads {D.hook_name!r}, layer {m}'s output, which is not "
            f"upstream of layer {layer}'s input: pick a writer of a layer below {layer}, or a "
            "head of a later layer"
        )
    if found[0] == "attn_out" and getattr(runtime_of(model), "post_norm", False):
        raise InterpError(
            f"{D.hook_name!r} on this post-norm model holds the normed stream, not what the "
            f"attention wrote: put the dictionary on blocks.{m}.attn.hook_z instead"
        )
    return Writer(D, found[0], m, found[1])


def _transcoder_writer(model: HookedModel, T: Transcoder, *, layer: int, side: str) -> Writer:
    """A transcoder as the writer of ``blocks.m.hook_mlp_out``, ``m`` below ``layer``.

    Raises:
        InterpError: hooks the model lacks or other widths (:func:`check_transcoder`), an
            output hook that is not an MLP's ``hook_mlp_out``, or one not upstream.
    """
    check_transcoder(model, T)
    parts = T.hook_name_out.split(".")
    if not (len(parts) == 3 and parts[0] == "blocks" and parts[1].isdigit()) or (
        parts[2] != "hook_mlp_out"
    ):
        raise InterpError(
            f"the {side} transcoder writes {T.hook_name_out!r}; in QK attribution a transcoder "
            "stands in for an MLP: its hook_name_out must be blocks.m.hook_mlp_out"
        )
    m = int(parts[1])
    if m >= layer:
        raise InterpError(
            f"the {side} transcoder writes {T.hook_name_out!r}, layer {m}'s output, which is not "
            f"upstream of layer {layer}'s input: pick a transcoder of a layer below {layer}, or "
            "a head of a later layer"
        )
    return Writer(T, "transcoder", m, "mlp")


def check_writers(model: HookedModel, Ds: Any, *, layer: int, side: str) -> tuple[Writer, ...]:
    """A side's list of dictionaries, checked together before any work.

    Args:
        model: a hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights.
        Ds: a dictionary or a list of them.
        layer: the attending head's layer.
        side: ``'query'`` or ``'key'`` (named in messages).

    Returns:
        One :class:`Writer` per dictionary, in the order given.

    Raises:
        InterpError: an empty list, a dictionary :func:`writer_of` refuses, a hook given
            twice, two dictionaries replacing one writer (``hook_attn_out`` and ``hook_z``
            of a layer), two residual dictionaries, or a writer before a residual
            dictionary's hook (its write is inside that stream already).
    """
    items = list(Ds) if isinstance(Ds, (list, tuple)) else [Ds]
    if not items:
        raise InterpError(f"the {side} dictionaries are an empty list: give at least one, or None")
    out = [writer_of(model, D, layer=layer, side=side) for D in items]
    seen: dict[Any, str] = {}
    for w in out:
        hook = w.dictionary.hook_name if w.kind != "transcoder" else w.dictionary.hook_name_out
        if hook in seen:
            raise InterpError(f"the {side} dictionaries hold {hook!r} twice: give each hook once")
        seen[hook] = hook
        what = ("resid", None) if w.kind == "resid" else (w.layer, w.component)
        if what in seen:
            raise InterpError(
                f"{seen[what]!r} and {hook!r} both replace "
                + (
                    "the residual stream"
                    if w.kind == "resid"
                    else f"layer {w.layer}'s {w.component}"
                )
                + f" on the {side} side: keep one (the other side can take the other)"
            )
        seen[what] = hook
    resid = [w for w in out if w.kind == "resid"]
    for w in out:
        if resid and w.kind != "resid" and w.layer < resid[0].layer:
            raise InterpError(
                f"{w.dictionary.hook_name!r} wrote before {resid[0].dictionary.hook_name!r}, so "
                f"its output is inside that dictionary's stream already: drop one, or put the "
                f"residual dictionary at blocks.{w.layer}.hook_resid_pre or earlier"
            )
    return tuple(out)


def dictionary_start(model: HookedModel, D: Dictionary) -> int | None:
    """The first layer whose writes come after ``D``'s hook (``blocks.l.hook_resid_pre``:
    ``l``; ``blocks.l.hook_resid_post``: ``l + 1``), or ``None`` for any other hook."""
    parts = D.hook_name.split(".")
    if len(parts) == 3 and parts[0] == "blocks" and parts[1].isdigit():
        if parts[2] == "hook_resid_pre":
            return int(parts[1])
        if parts[2] == "hook_resid_post":
            return int(parts[1]) + 1
    return None


def active_features(acts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The active features of each position (a feature is active where its activation is
    above 0).

    Args:
        acts: ``[..., d_sae]`` feature activations.

    Returns:
        ``ids`` and ``values``, ``[..., slot]``: slots are the most any position has; PAD
        and 0 where a position has fewer.
    """
    on = acts > 0
    n = max(1, int(on.sum(-1).max()))
    values, ids = acts.topk(n, dim=-1)
    off = values <= 0
    return ids.masked_fill(off, PAD), values.masked_fill(off, 0.0)
