"""Q-, K- and V-composition scores between heads (Elhage et al. 2021).

A later head composes with an earlier head when the earlier head's output
(its OV circuit ``W_V W_O``, ``[d_model, d_model]``) is read by the later
head's queries (Q), keys (K) or values (V). The score is

    ||W_OV^early  M^late||_F / (||W_OV^early||_F ||M^late||_F)

with ``M = W_Q W_K^T`` (Q), ``(W_Q W_K^T)^T`` (K) or ``W_V W_O`` (V), computed
from the factored forms: the same numbers as TransformerLens's
``composition_scores`` (tested), computed from Gram matrices so that all
head pairs are one matrix product. Two random
low-rank matrices of the same shapes already score about ``1/sqrt(d_model)``;
the baseline column is that value estimated by sampling Gaussian factors of
the heads' shapes, so a score means something only well above it.

LayerNorm between the heads is ignored (as in the paper): the scores describe
the weights, not a particular input.

Example:
    >>> from interp.models import load_induction_model
    >>> df = composition_scores(load_induction_model(), component="K")
    >>> top = df.nlargest(1, "score")
    >>> top["src_label"].item(), top["label"].item(), bool(top["ratio"].item() > 2)
    ('L0H1', 'L1H1', True)
"""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

import pandas as pd
import torch

from interp.core.errors import InterpError
from interp.core.hooks import head_label
from interp.core.protocol import HookedModel, check_model
from interp.outputs.frames import described
from interp.runtime import head_weight

Component = Literal["Q", "K", "V"]


def composition_factors(model: HookedModel, component: Component) -> tuple[Any, Any]:
    """``(OV, other)``: every head's OV circuit and the circuit a later head composes through
    (``"Q"``: its QK, ``"K"``: its QK transposed, ``"V"``: its OV), as TransformerLens
    FactoredMatrix stacks ``[n_layers, n_heads, d_model, d_model]``, the inputs of
    ``transformer_lens.utilities.composition_scores``.

    Example:
        >>> from interp.models import load_model
        >>> ov, qk = composition_factors(load_model("induction-2l"), "K")
        >>> tuple(ov.shape), tuple(qk.shape)
        ((2, 2, 128, 128), (2, 2, 128, 128))
    """
    from transformer_lens import FactoredMatrix

    W_V, W_O = head_weight(model, "W_V").float(), head_weight(model, "W_O").float()
    left = FactoredMatrix(W_V, W_O)  # [n_layers, n_heads, d_model, d_model]
    if component == "V":
        return left, left
    W_Q, W_K = head_weight(model, "W_Q").float(), head_weight(model, "W_K").float()
    qk = FactoredMatrix(W_Q, W_K.transpose(-2, -1))
    return left, (qk if component == "Q" else qk.T)


@cache
def random_baseline(d_model: int, d_head: int, *, samples: int = 256, seed: int = 0) -> float:
    """Mean composition score of random Gaussian rank-``d_head`` matrices in ``d_model`` dims.

    ``samples`` independent pairs, scored with the same formula as the heads
    (:func:`pair_scores`; equal to TransformerLens's ``composition_scores``).
    """
    from transformer_lens import FactoredMatrix

    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)

    left = FactoredMatrix(rand(samples, d_model, d_head), rand(samples, d_head, d_model))
    right = FactoredMatrix(rand(samples, d_model, d_head), rand(samples, d_head, d_model))
    return float(pair_scores(left, right).mean())


def pair_scores(left: Any, right: Any) -> torch.Tensor:
    """``[n]`` composition scores of matched pairs ``left[i]``, ``right[i]`` (``FactoredMatrix``).

    ``||A1 B1 A2 B2||_F / (||A1 B1||_F ||A2 B2||_F)`` from ``d_head x d_head`` products only.
    """
    A1, B1, A2, B2 = left.A, left.B, right.A, right.B
    M = B1 @ A2  # [n, d_head, d_head]
    G1 = A1.transpose(-2, -1) @ A1
    G2 = B2 @ B2.transpose(-2, -1)
    num = torch.einsum("nij,njk,nkl,nli->n", G1, M, G2, M.transpose(-2, -1)).clamp(min=0).sqrt()
    n1 = torch.einsum("nij,nji->n", G1, B1 @ B1.transpose(-2, -1)).clamp(min=0).sqrt()
    n2 = torch.einsum("nij,nji->n", A2.transpose(-2, -1) @ A2, G2).clamp(min=0).sqrt()
    return num / (n1 * n2).clamp(min=torch.finfo(A1.dtype).tiny)


def _pairwise_scores(left: Any, right: Any) -> torch.Tensor:
    """``[n_layers, n_heads, n_layers, n_heads]`` composition scores of every head pair.

    ``left = A1 B1`` and ``right = A2 B2`` (``FactoredMatrix``, ``[d_model,
    d_head] @ [d_head, d_model]`` per head). Exactly the Frobenius norms
    TransformerLens's ``composition_scores`` takes, from Gram matrices instead of
    a factored product per pair: ``||A1 B1 A2 B2||_F^2 = <X1, X2>_F`` with
    ``X1 = B1^T (A1^T A1) B1`` and ``X2 = A2 (B2 B2^T) A2^T`` (both
    ``[d_model, d_model]``), so all pairs are one matrix product
    (``benchmarks/composition.py`` times it against TransformerLens's).
    """
    A1, B1, A2, B2 = left.A, left.B, right.A, right.B
    n_layers, n_heads, d = A1.shape[0], A1.shape[1], A1.shape[2]
    n = n_layers * n_heads
    A1, B1 = (
        A1.reshape(n, d, -1),
        B1.reshape(n, -1, d),
    )  # [head, d_model, d_head], [head, d_head, d_model]
    A2, B2 = A2.reshape(n, d, -1), B2.reshape(n, -1, d)
    G1 = A1.transpose(-2, -1) @ A1  # [head, d_head, d_head]
    G2 = B2 @ B2.transpose(-2, -1)
    X1 = (B1.transpose(-2, -1) @ G1 @ B1).reshape(n, -1)  # [head, d_model * d_model]
    X2 = (A2 @ G2 @ A2.transpose(-2, -1)).reshape(n, -1)
    norm1 = torch.einsum("nij,nji->n", G1, B1 @ B1.transpose(-2, -1)).clamp(min=0).sqrt()
    norm2 = torch.einsum("nij,nji->n", A2.transpose(-2, -1) @ A2, G2).clamp(min=0).sqrt()
    product = (X1 @ X2.T).clamp(min=0).sqrt()  # [early head, late head]
    scores = product / (norm1[:, None] * norm2[None, :]).clamp(min=torch.finfo(A1.dtype).tiny)
    return scores.reshape(n_layers, n_heads, n_layers, n_heads)


def composition_tensor(model: HookedModel, *, component: Component = "K") -> torch.Tensor:
    """Scores ``[n_layers, n_heads, n_layers, n_heads]`` (earlier, later).

    Entries are zero unless the first head's layer is earlier.

    Raises:
        InterpError: for an unknown component.
    """
    if component not in ("Q", "K", "V"):
        raise InterpError(f"component must be 'Q', 'K' or 'V', got {component!r}")
    cfg = check_model(model)
    with torch.no_grad():
        left, right = composition_factors(model, component)
        scores = _pairwise_scores(left, right)
    layer = torch.arange(cfg.n_layers, device=scores.device)
    mask = layer[:, None, None, None] < layer[None, None, :, None]
    return torch.where(mask, scores, torch.zeros_like(scores))


def composition_scores(model: HookedModel, *, component: Component = "K") -> pd.DataFrame:
    """One row per (earlier head, later head) pair with the composition score and its baseline.

    The score is ``||W_OV^early M^late||_F / (||W_OV^early||_F ||M^late||_F)``, with ``M``
    the later head's input map (module docstring); the baseline is what two random
    low-rank matrices of the heads' shapes already score (about ``1/sqrt(d_model)``), so a
    score means something only well above it.

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``). Only its weights are read.
        component: A named part of the model: the later head's input that the earlier head's
            output feeds, ``'Q'``, ``'K'`` (default) or ``'V'``.

    Returns:
        A table with one row per pair of heads in different layers: ``src_layer, src_head,
        src_label`` (the earlier head), ``layer, head, label`` (the later one), then
        ``component, score, baseline, ratio`` (``score / baseline``). ``attrs`` follow
        :data:`interp.outputs.frames.SCHEMA`, plus ``component``.

    Raises:
        InterpError: for an unknown component or a model with a single layer.
    """
    cfg = check_model(model)
    if cfg.n_layers < 2:
        raise InterpError("composition needs at least two layers")
    scores = composition_tensor(model, component=component)
    base = random_baseline(int(cfg.d_model), int(cfg.d_head))
    rows = []
    for l1 in range(cfg.n_layers):
        for h1 in range(cfg.n_heads):
            for l2 in range(l1 + 1, cfg.n_layers):
                for h2 in range(cfg.n_heads):
                    s = float(scores[l1, h1, l2, h2])
                    rows.append(
                        {
                            "src_layer": l1,
                            "src_head": h1,
                            "src_label": head_label(l1, h1),
                            "layer": l2,
                            "head": h2,
                            "label": head_label(l2, h2),
                            "component": component,
                            "score": s,
                            "baseline": base,
                            "ratio": s / base,
                        }
                    )
    return described(
        pd.DataFrame(rows),
        "composition_scores",
        description=f"{component}-composition scores of every head pair (from weights alone)",
        method="exact",
        unit="score",
        model=model,
        forward_equivalents=0.0,
        component=component,
    )
