"""Weight circuits on rotary models: the rotation of the key behind the query.

With rotary embeddings a query at ``p`` and a key at ``p - d`` score
``(R_p q) . (R_{p-d} k) = q . R_{-d} k``: the token-token circuit depends on the
offset ``d`` only, and is ``E W_Q R_-d W_K^T E^T`` (:func:`interp.analysis.qk_circuit`
with ``offset=d``). The rotation is the model's own
(:class:`interp.runtime.attention.Rotary`).

Example:
    >>> from interp.models import load_model
    >>> rotary_of(load_model("induction-2l"), 0, None, "token") is None
    True
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import torch

from interp.analysis.heads.qk.shares import attribute_scores
from interp.core.checks import check_int
from interp.core.errors import InterpError
from interp.core.protocol import HookedModel, check_model
from interp.outputs.frames import table_attrs
from interp.runtime import runtime_of
from interp.runtime.attention import QKGeometry, Rotary


def rotary_of(model: HookedModel, layer: int, offset: Any, embedding: str) -> Rotary | None:
    """The layer's rotary embedding when ``offset`` is used, None on a model without one.

    Raises:
        InterpError: for no ``offset`` on a rotary model, an ``offset`` on a model
            without rotary embeddings, a non-integer ``offset``, or a positional
            circuit of a rotary model.
    """
    kind = str(getattr(model.cfg, "positional_embedding_type", "standard") or "standard")
    if kind != "rotary":
        if offset is not None:
            raise InterpError(
                "offset= is for rotary models; this model's QK circuit does not depend on the "
                "offset (drop offset=, or use embedding='positional' for its positions)"
            )
        return None
    if embedding != "token":
        raise InterpError(
            "a rotary model has no positional embedding matrix; use qk_circuit(..., offset=d) "
            "for the circuit at each offset"
        )
    if offset is None:
        raise InterpError(
            "this model uses rotary embeddings, so its QK circuit depends on how far the key "
            "is behind the query; pass offset=d (0 = the same position)"
        )
    geometry = runtime_of(model).qk_geometry(layer)
    check_offset(model, offset, geometry)
    return geometry.rotary


def check_offset(model: HookedModel, offset: Any, geometry: QKGeometry) -> int:
    """``offset`` (query position - key position) as an int the layer can score: by the one
    integer rule (numpy integers accepted), at least 0 on a causal model (a key is never
    after its query), inside the context and the layer's sliding window.

    Raises:
        InterpError: for a non-integer offset, or one the layer's mask or context rules out.
    """
    d = check_int(offset, "offset")
    n_ctx = getattr(model.cfg, "n_ctx", None)
    if n_ctx is not None and abs(d) >= int(n_ctx):
        raise InterpError(
            f"offset {d} does not fit the context n_ctx={n_ctx}: a query and a key are at most "
            f"{int(n_ctx) - 1} positions apart"
        )
    if geometry.causal and d < 0:
        raise InterpError(
            f"offset {d} puts the key after its query, which a causal head never sees; use an "
            "offset >= 0 (0 = the same position)"
        )
    if geometry.window and d >= geometry.window:
        raise InterpError(
            f"offset {d} is outside this layer's sliding window of {geometry.window} keys, "
            f"so the head never scores it; use 0..{geometry.window - 1}"
        )
    return d


def rotary_keys(
    model: HookedModel, layer: int, Q: torch.Tensor, K: torch.Tensor, offset: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Query rows and key rows ``[n, d_head]`` through the layer's QK-norms (row by row,
    biases dropped) and the rotation, so that ``Q @ K.T`` is the circuit at ``offset``."""
    geometry = runtime_of(model).qk_geometry(layer)
    for side, norm in (("q", geometry.q_norm), ("k", geometry.k_norm)):
        if norm is not None:
            gain = norm.gain
            x = Q if side == "q" else K
            x = norm.centre(x) * norm.inverse_scale(x)
            x = x if gain is None else x * gain.float()
            Q, K = (x, K) if side == "q" else (Q, x)
    rot = geometry.rotary
    K = rot.rotate(K[None], torch.tensor([-offset]), pos_dim=0)[0]
    if rot.gain != 1.0:  # the query is rotated too: the gain meets the rotated dims twice
        Q = torch.cat([Q[..., : rot.dims] * rot.gain, Q[..., rot.dims :]], -1)
    return Q, K


def rotary_bands(
    model: HookedModel,
    tokens: Any,
    *,
    layer: int,
    head: int,
    query_positions: Any = -1,
    key_positions: Any = None,
    cache: Any = None,
) -> Any:
    """Each pre-softmax score of a head split exactly over its rotary frequency pairs.

    A rotated query and key meet pair by pair: ``s = scale * sum_i (q_a k_a + q_b k_b)``
    over the pairs ``(a, b)`` of band ``i`` (and the unrotated dimensions of a
    partial rotary model, band ``"unrotated"``), so a table says which bands carry
    the head: positional heads live in the fast bands, content in the slow ones
    (Barbero et al. 2025). The rows sum to the mean score, checked against the model's own.
    One forward pass stopped after the head's layer, or a read of ``cache``.

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``), with rotary embeddings.
        tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence).
        layer: A block index: the head's layer.
        head: A head index within ``layer``.
        query_positions: The attending positions of a head's scores (ints, negative from the
            end, for every sequence; or one list per sequence, ``[[q0], [q1], ...]``, read per
            sequence); read, not edited. Default ``-1``, the last.
        key_positions: The attended positions, in the same forms; ``None`` is every key each
            query may see.
        cache: An ActivationCache of ``tokens``; it is read only after its earliest
            token-dependent activation is recomputed on ``tokens`` and matches; hooks it lacks
            are computed by one forward pass.

    Returns:
        A table with one row per band: ``layer, head, label, band, frequency`` (radians per
        position), ``wavelength`` (positions), ``value`` (the band's mean share of the scores
        of ``query_positions`` x ``key_positions``) and ``magnitude`` (the mean absolute
        share). ``attrs`` follow :data:`interp.outputs.frames.SCHEMA`, plus ``total`` (the
        mean score) and ``score_gap`` (as :func:`qk_attribution`).

    Example:
        >>> from interp.models.hf import random_llama
        >>> import torch
        >>> m = random_llama(1, vocab=20)
        >>> df = rotary_bands(m, torch.randint(0, 20, (2, 6)), layer=0, head=0)
        >>> len(df), bool(abs(df["value"].sum() - df.attrs["total"]) < 1e-5)
        (4, True)

    Raises:
        InterpError: as :func:`interp.analysis.qk_attribution`, and for a model
            without rotary embeddings.
    """
    check_model(model)
    if str(getattr(model.cfg, "positional_embedding_type", "")) != "rotary":
        raise InterpError("this model has no rotary embeddings; rotary_bands needs a rotary model")
    att = attribute_scores(
        model,
        tokens,
        layer=layer,
        head=head,
        query_positions=query_positions,
        key_positions=key_positions,
        by="layer",
        cache=cache,
    )
    df = att.table
    geometry = runtime_of(model).qk_geometry(layer)
    cells = att.cells
    qrows = cells.query_rows  # att.query's rows
    qi = torch.tensor([qrows.index(int(q)) for q in cells.query])
    # the head's rotated queries and keys, as the attribution rebuilt them (checked there)
    prod = att.query[cells.seq, qi] * att.key[cells.seq, cells.key] * geometry.scale
    d_head = prod.shape[-1]
    band = geometry.rotary.band_of_dims(d_head)
    n_b = geometry.rotary.n_pairs + (1 if bool((band == geometry.rotary.n_pairs).any()) else 0)
    per = torch.zeros(prod.shape[:-1] + (n_b,), dtype=prod.dtype).index_add_(-1, band, prod)
    freqs = geometry.rotary.freqs.tolist() + ([0.0] if n_b > geometry.rotary.n_pairs else [])
    rows = []
    for i in range(n_b):
        f = float(freqs[i])
        rows.append(
            {
                "band": str(i) if i < geometry.rotary.n_pairs else "unrotated",
                "frequency": f,
                "wavelength": (2 * 3.141592653589793 / f) if f > 0 else float("inf"),
                "value": float(per[..., i].mean()),
                "magnitude": float(per[..., i].abs().mean()),
            }
        )
    out = pd.DataFrame(rows)
    out.insert(0, "label", f"L{layer}H{head}")
    out.insert(0, "head", head)
    out.insert(0, "layer", layer)
    out.attrs.update(
        table_attrs(
            "rotary_bands",
            description="each rotary frequency pair's exact share of a head's pre-softmax scores",
            method="exact",
            metric="attention score",
            unit="score (pre-softmax, after the model's scale)",
            model=model,
            forward_equivalents=att.cost.forward_equivalents,
            total=float(per.sum(-1).mean()),
            score_gap=df.attrs["score_gap"],
        )
    )
    return out
