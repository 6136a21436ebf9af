"""Feature-level QK attribution: a head's score split over (query feature, key feature) pairs.

A dictionary ``D`` at the residual stream a head reads rewrites each position's stream as

    x = sum_f a_f W_dec[f] + b_dec + error,   error = x - decode(encode(x)),

and where it sits at an earlier hook (``blocks.l.hook_resid_pre`` with ``l`` below the
head's layer, or ``hook_resid_post``), the head's input is that ``x`` plus what the
components in between wrote (:func:`interp.analysis.heads.qk.inputs.residual_pieces`),
plus a ``remainder`` where those do not add up. Every one of these is a *piece*: an
active feature (``F123``: its activation times its decoder row), the dictionary's
``error``, its decoder bias ``b_dec``, a component between the hooks, and the head's own
``bias`` (the norm's bias and ``b_Q`` / ``b_K``). The pieces go through the frozen norms,
the projection and each position's rotation exactly as components do
(:func:`~interp.analysis.heads.qk.inputs.project_pieces`: the same code), so the score is
the exact double sum over (query piece, key piece) pairs (Kamath et al. 2025, "Tracing
Attention Computation Through Feature Interactions").

Only the features active at a position are its pieces: each position holds its own short
list (``k`` of them for a TopK dictionary), so the pairs scored per cell do not grow with
the dictionary's width; only the encode does. With ``contrast=(a, b)`` the key pieces are
those of ``a`` minus those of ``b`` (a feature active at both is one row: its difference).

Example:
    >>> from interp.models import load_model
    >>> from interp.dictionaries import Dictionary
    >>> model = load_model("induction-2l")
    >>> D = Dictionary.random(d_in=128, d_sae=64, architecture="topk", k=2,
    ...                       hook_name="blocks.1.hook_resid_pre")
    >>> check_qk_dictionary(model, D, layer=1, side="key")
    1
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import torch

from interp.analysis.heads.qk.cells import Cells
from interp.analysis.heads.qk.inputs import REMAINDER_TOL, Piece, project_pieces
from interp.analysis.heads.qk.writers import (
    PAD,
    Writer,
    active_features,
    check_writers,
    dictionary_start,
)
from interp.core.errors import InterpError
from interp.core.hooks import hook_name
from interp.core.precision import tolerance, within
from interp.core.protocol import HookedModel
from interp.dictionaries import Dictionary, Transcoder, check_dictionary
from interp.runtime.attention import QKGeometry


@dataclasses.dataclass(frozen=True)
class Side:
    """One side's pieces at its rows, after the head's projection: the per-position feature
    slots and the pieces every position shares (``names``; the last is ``bias``)."""

    names: list[str]  # the shared pieces' labels
    fixed: torch.Tensor  # [piece, batch, R, d_head]
    ids: torch.Tensor  # [batch, R, slot] long: each row's active features (PAD: none)
    slots: torch.Tensor  # [slot, batch, R, d_head]
    dictionary: Dictionary | None = None
    values: torch.Tensor | None = None  # [batch, pos, slot]: activations at every position
    ids_all: torch.Tensor | None = None  # [batch, pos, slot]: their features
    base: int | None = None  # slot codes are below (None: the dictionary's width, or 0)
    code_name: Callable[[int], str] | None = None  # a slot code's label (None: F<code>)
    lookup: Callable[[str], torch.Tensor | None] | None = None  # label -> [batch, pos, d_model]

    @property
    def code_base(self) -> int:
        """The first code of a shared piece: slot codes are below it."""
        if self.base is not None:
            return self.base
        return self.dictionary.d_sae if self.dictionary is not None else 0

    def name_of(self, code: int) -> str:
        """A code's label: a slot's (``F12``, ``embed:37``, ...) or a shared piece's."""
        if code >= self.code_base:
            return self.names[code - self.code_base]
        return self.code_name(code) if self.code_name is not None else f"F{code}"

    def piece_of(self, label: str) -> torch.Tensor | None:
        """``[batch, pos, d_model]``: what piece ``label`` wrote into the head's input at
        every position, or ``None`` where this side does not hold it (a component's)."""
        if self.lookup is not None:
            return self.lookup(label)
        if self.dictionary is not None and label[:1] == "F" and label[1:].isdigit():
            return self.feature_piece(label)
        return None

    @property
    def total(self) -> torch.Tensor:
        """``[batch, R, d_head]``: the head's own rotated query (or key) at the rows."""
        return self.fixed.sum(0) + self.slots.sum(0)

    def feature_piece(self, label: str) -> torch.Tensor:
        """``[batch, pos, d_model]``: what feature ``label`` (``'F12'``) wrote at every
        position (its activation times its decoder row; zero where it is off)."""
        D, f = self.dictionary, int(label[1:])
        assert D is not None and self.values is not None and self.ids_all is not None
        a = (self.values * (self.ids_all == f)).sum(-1)  # [batch, pos]
        return a[..., None] * D.W_dec[f].detach().float()


def component_side(names: list[str], pieces: torch.Tensor) -> Side:
    """A side without a dictionary: its components (``side_pieces``) as shared pieces."""
    _, bsz, rows, d = pieces.shape
    return Side(
        names=names,
        fixed=pieces,
        ids=torch.full((bsz, rows, 0), PAD, dtype=torch.long),
        slots=pieces.new_zeros((0, bsz, rows, d)),
    )


def check_qk_dictionary(model: HookedModel, D: Any, *, layer: int, side: str) -> int:
    """Refuse a dictionary one side of a layer's head cannot be split over, before any work.

    Args:
        model: a hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights.
        D: the dictionary.
        layer: the attending head's layer.
        side: ``'query'`` or ``'key'`` (named in messages).

    Returns:
        The first layer whose components are pieces between ``D``'s hook and the head.

    Raises:
        InterpError: not a :class:`~interp.dictionaries.Dictionary`, a hook the model lacks
            or another width (:func:`interp.dictionaries.check_dictionary`), a hook that is
            not the residual stream, or one after the head's input.
    """
    if not isinstance(D, Dictionary):
        raise InterpError(
            f"{side}_dictionary must be a Dictionary, got {type(D).__name__}: load one with "
            "interp.dictionaries.load_dictionary(path)"
        )
    check_dictionary(model, D)
    start = dictionary_start(model, D)
    if start is None:
        raise InterpError(
            f"the {side} dictionary reads {D.hook_name!r}; QK attribution splits a head's input, "
            f"so it needs a residual-stream dictionary at or before layer {layer}'s input "
            f"(blocks.l.hook_resid_pre with l <= {layer}, or blocks.l.hook_resid_post with "
            f"l < {layer})"
        )
    if start > layer:
        raise InterpError(
            f"the {side} dictionary reads {D.hook_name!r}, after layer {layer}'s input: pick a "
            f"dictionary at or before blocks.{layer}.hook_resid_pre, or a head of a later layer"
        )
    return start


@dataclasses.dataclass(frozen=True)
class Dictionaries:
    """The dictionaries a QK attribution splits its sides over, checked (``None``: that side
    is split over components) and where each reads (``start``: :func:`check_qk_dictionary`)."""

    query: Dictionary | None = None
    key: Dictionary | None = None
    query_start: int = 0
    key_start: int = 0
    query_writers: tuple[Writer, ...] = ()  # a list of dictionaries (writers' or several)
    key_writers: tuple[Writer, ...] = ()

    @property
    def any(self) -> bool:
        """Whether either side has a dictionary."""
        return bool(self.all)

    @property
    def all(self) -> tuple[Dictionary, ...]:
        """Every dictionary of both sides (one given to both appears twice)."""
        ws = (*self.query_writers, *self.key_writers)
        return (*(D for D in (self.query, self.key) if D is not None), *(w.dictionary for w in ws))

    def given(self, side: str) -> Any:
        """What ``side`` (``'query'`` / ``'key'``) was given, checked: its dictionary, its list
        of dictionaries, or ``None`` (to run a chunk with the same options)."""
        writers = self.query_writers if side == "query" else self.key_writers
        if writers:
            return [w.dictionary for w in writers]
        return self.query if side == "query" else self.key

    @property
    def hooks(self) -> tuple[str, ...]:
        """The hooks the dictionaries read (a transcoder's input and output hooks)."""
        names = [D.hook_name for D in self.all]
        names += [D.hook_name_out for D in self.all if isinstance(D, Transcoder)]
        return tuple(dict.fromkeys(names))


def qk_dictionaries(
    model: HookedModel, *, layer: int, dictionary: Any, query_dictionary: Any, key_dictionary: Any
) -> Dictionaries:
    """``dictionary`` (both sides) or ``query_dictionary`` / ``key_dictionary``, checked.

    A side's value is one dictionary or a list of them
    (:mod:`~interp.analysis.heads.qk.writers`); a lone residual-stream dictionary is split as
    before (its features ``F123``, ``error``, ``b_dec``, the components after its hook).

    Raises:
        InterpError: ``dictionary`` beside a side's own, or a dictionary (or list)
            :func:`check_qk_dictionary` / :func:`~interp.analysis.heads.qk.writers.
            check_writers` refuses.
    """
    if dictionary is not None:
        if query_dictionary is not None or key_dictionary is not None:
            raise InterpError(
                "give dictionary (both sides) or query_dictionary / key_dictionary, not both"
            )
        query_dictionary = key_dictionary = dictionary
    out: dict[str, Any] = {}
    for side, D in (("query", query_dictionary), ("key", key_dictionary)):
        if D is None:
            continue
        ws = check_writers(model, D, layer=layer, side=side)
        if len(ws) == 1 and ws[0].kind == "resid":
            out[side] = ws[0].dictionary
            out[f"{side}_start"] = check_qk_dictionary(
                model, ws[0].dictionary, layer=layer, side=side
            )
        else:
            out[f"{side}_writers"] = ws
    return Dictionaries(**out)


def feature_side(
    model: HookedModel,
    acts: Any,
    terms: list[Piece],
    D: Dictionary,
    *,
    start: int,
    layer: int,
    head: int,
    side: str,
    rows: list[int],
    geometry: QKGeometry,
) -> Side:
    """One side's pieces with ``D`` at ``start``'s input (module docstring): its active
    features per row, then ``error``, ``b_dec``, the components between the hooks
    (``terms`` of layers ``start`` on), ``remainder`` where needed, and ``bias``."""
    x = acts[D.hook_name].float()  # [batch, pos, d_model]
    with torch.no_grad():
        f_acts = D.encode(x).float()  # [batch, pos, d_sae]
        W_dec, b_dec = D.W_dec.detach().float(), D.b_dec.detach().float()
        ids, values = active_features(f_acts)  # [batch, pos, slot]
        del f_acts
        x = x[:, rows]
        # [batch, R, slot, d_model]: what each active feature wrote at the rows
        written = values[:, rows, :, None] * W_dec[ids[:, rows].clamp(min=0)]
        error = x - (written.sum(-2) + b_dec)
    between = [t for t in terms if t[2] is not None and t[2] >= start and t[1] != "remainder"]
    names = ["error", "b_dec", *(t[0] for t in between)]
    fixed = [error, b_dec.expand_as(x), *(t[3][:, rows] for t in between)]
    given = acts[hook_name("resid_pre", layer)][:, rows]
    missing = given.float() - x
    for t in between:
        missing = missing - t[3][:, rows]
    size = float(given.float().abs().max())
    tol = tolerance(given.dtype, size, float32=REMAINDER_TOL)
    if not within(float(missing.abs().max()), tol):  # NaN: a remainder (then refused)
        names.append("remainder")
        fixed.append(missing)
    stack = torch.cat(
        [written.permute(2, 0, 1, 3), torch.stack(fixed)]
    )  # [slot + piece, batch, R, d_model]
    out = project_pieces(
        model, acts, stack, layer=layer, head=head, side=side, rows=rows, geometry=geometry
    )
    n_slots = ids.shape[-1]
    return Side(
        names=[*names, "bias"],
        fixed=out[n_slots:],
        ids=ids[:, rows],
        slots=out[:n_slots],
        dictionary=D,
        values=values,
        ids_all=ids,
    )


def _cell_vectors(side: Side, seq: torch.Tensor, row: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Each cell's piece vectors ``[cell, piece, d_head]`` and codes ``[cell, piece]``: a
    feature's id, ``d_sae + j`` for shared piece ``j`` (``d_sae`` 0 without a dictionary),
    PAD for an empty slot."""
    base = side.code_base
    vec = torch.cat([side.slots[:, seq, row], side.fixed[:, seq, row]]).transpose(0, 1)
    shared = torch.arange(len(side.names)) + base
    codes = torch.cat([side.ids[seq, row], shared.expand(len(seq), -1)], dim=1)
    return vec, codes


def feature_rows(q: Side, k: Side, cells: Cells, *, scale: float) -> pd.DataFrame:
    """One row per group of ``cells`` and (query piece, key piece) pair present in it:
    the group's columns, ``query_piece, key_piece, value`` (the mean over the group's cells;
    a pair absent from a cell counts 0 there)."""
    qi = torch.full((int(cells.query.max()) + 1,), -1, dtype=torch.long)
    q_rows = cells.query_rows
    qi[torch.tensor(q_rows)] = torch.arange(len(q_rows))
    Qv, Qc = _cell_vectors(q, cells.seq, qi[cells.query])  # [cell, i, d_head]
    Kv, Kc = _cell_vectors(k, cells.seq, cells.key)  # [cell, j, d_head]
    if cells.other is not None:  # score[a] - score[b]: b's pieces negated
        Ko, Kco = _cell_vectors(k, cells.seq, cells.other)
        Kv, Kc = torch.cat([Kv, -Ko], 1), torch.cat([Kc, Kco], 1)
    share = torch.einsum("cid,cjd->cij", Qv, Kv) * scale  # [cell, i, j]
    n_cell, ni, nj = share.shape
    group = (torch.arange(n_cell) // cells.per_group)[:, None, None].expand(-1, ni, nj)
    qc = Qc[:, :, None].expand(-1, -1, nj)
    kc = Kc[:, None, :].expand(-1, ni, -1)
    keep = (qc != PAD) & (kc != PAD)
    flat = pd.DataFrame(
        {
            "g": group[keep].numpy(),
            "q": qc[keep].numpy(),
            "k": kc[keep].numpy(),
            "value": share[keep].double().numpy(),
        }
    )
    summed = flat.groupby(["g", "q", "k"], sort=True)["value"].sum() / cells.per_group
    summed = summed.reset_index()
    g = summed["g"].to_numpy()
    data: dict[str, Any] = {
        name: np.array([cells.groups[i][c] for i in g], dtype=int)
        for c, name in enumerate(cells.columns)
    }
    q_names = {c: q.name_of(c) for c in summed["q"].unique().tolist()}
    k_names = {c: k.name_of(c) for c in summed["k"].unique().tolist()}
    data["query_piece"] = summed["q"].map(q_names).to_numpy(dtype=object)
    data["key_piece"] = summed["k"].map(k_names).to_numpy(dtype=object)
    data["value"] = summed["value"].to_numpy()
    return pd.DataFrame(data)


def describe(D: Any) -> Any:
    """What a table's attrs record of a dictionary (``None``: that side has none; a list of
    :class:`~interp.analysis.heads.qk.writers.Writer`: one record each)."""
    if D is None:
        return None
    if isinstance(D, (list, tuple)):
        return [describe(w.dictionary) for w in D] if D else None
    return {
        "hook_name": D.hook_name,
        "architecture": D.architecture,
        "d_sae": D.d_sae,
        "k": D.k,
        "model_name": D.metadata.get("model_name"),
    } | ({"hook_name_out": D.hook_name_out} if isinstance(D, Transcoder) else {})
