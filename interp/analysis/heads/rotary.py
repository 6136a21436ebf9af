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

import torch

from interp.errors import InterpError
from interp.protocol import HookedModel
from interp.runtime import runtime_of
from interp.runtime.attention import Rotary


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
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise InterpError(f"offset must be an int (query position - key position), got {offset!r}")
    return runtime_of(model).qk_geometry(layer).rotary


def rotary_keys(
    model: HookedModel, layer: int, Q: torch.Tensor, K: torch.Tensor, offset: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Query rows and key rows ``[n, d_head]`` through the layer's QK-norms (row by row,
    biases dropped) and the rotation, so that ``Q @ K.T`` is the circuit at ``offset``."""
    geometry = runtime_of(model).qk_geometry(layer)
    for side, norm in (("q", geometry.q_norm), ("k", geometry.k_norm)):
        if norm is not None:
            gain = norm.gain if norm.gain is not None else norm.weight
            x = Q if side == "q" else K
            x = norm.centre(x) * norm.inverse_scale(x) * gain.float()
            Q, K = (x, K) if side == "q" else (Q, x)
    K = geometry.rotary.rotate(K[None], torch.tensor([-offset]), pos_dim=0)[0]
    return Q, K
