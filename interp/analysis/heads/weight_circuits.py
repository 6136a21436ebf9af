"""Full QK and OV circuits of a head, as TransformerLens ``FactoredMatrix`` objects.

Following Elhage et al. (2021), "A Mathematical Framework for Transformer
Circuits", a head's behaviour on tokens is summarised by two bilinear maps
over the vocabulary (row-vector convention, ``E`` the embedding read by the head):

* QK circuit, token-token: ``E W_Q W_K^T E^T  [d_vocab (query), d_vocab (key)]``;
  positional: ``P W_Q W_K^T P^T  [n_ctx, n_ctx]`` with ``P = W_pos``;
* OV circuit: ``E W_V W_O W_U  [d_vocab (source), d_vocab (output logit)]``;
* K-composition circuit through a previous-token head ``p`` into an induction
  head ``i`` (as in Elhage et al. and ARENA): ``E W_Q^i (E W_V^p W_O^p W_K^i)^T``:
  a query token against the *previous* token of each key.

They are returned factored (``A [n, d_head]``, ``B [d_head, n]``), so a
``d_vocab x d_vocab`` matrix is never materialised unless you call ``.AB``;
:func:`diagonal_fraction` scans rows in chunks.

LayerNorm (``fold_ln=True``, the default): when the model normalises the
head's input, ``E`` is the embedding passed through that LayerNorm row by row
(centred, scaled to unit RMS, multiplied by its weight; the bias is dropped
because a factored bilinear map cannot hold it), and ``W_U`` is scaled by the
final LayerNorm's weight. This is the token's own contribution as the head
reads it; positional embeddings and earlier layers also enter the real input,
so the circuits describe the direct path, not the whole computation.
Unembedding biases are dropped. ``fold_ln=False`` uses the raw weights
(``W_E``, ``W_pos``, ``W_U`` as stored), as ARENA's exercises do. The two
differ in scale and can differ in shape (:func:`previous_position_attention`
measures the positional circuit both ways).

Example:
    >>> from interp.models import load_induction_model
    >>> model = load_induction_model()
    >>> ov = ov_circuit(model, layer=1, head=1)
    >>> tuple(ov.shape)
    (64, 64)
    >>> diagonal_fraction(ov) > 0.9  # a copying head: each token's top output is itself
    True
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import pandas as pd
import torch

from interp.core.errors import InterpError
from interp.core.head_checks import check_layer, check_layer_head, parse_heads
from interp.core.protocol import HookedModel, check_model
from interp.outputs.frames import described, head_frame
from interp.runtime import head_weight, runtime_of


def _factored():
    from transformer_lens import FactoredMatrix

    return FactoredMatrix


def _gain(model: HookedModel, layer: int | None) -> torch.Tensor | None:
    """The gain of the norm before ``layer``'s attention (None: the final norm) by the
    runtime's one norm rule (``weight``, or Gemma's ``1 + weight``: :attr:`Norm.gain`);
    None where there is no norm or it has no gain."""
    norm = runtime_of(model).norm("final" if layer is None else "ln1", layer)
    return None if norm is None else norm.gain


def _normalise_rows(model: HookedModel, X: torch.Tensor, layer: int) -> torch.Tensor:
    """Rows of ``X`` through ``layer``'s ``ln1`` exactly as the model computes it (its epsilon,
    its gain: ``weight``, or Gemma's ``1 + weight``), its bias dropped."""
    norm = runtime_of(model).norm("ln1", layer)
    if norm is None:
        return X
    gain = norm.gain
    X = norm.centre(X) * norm.inverse_scale(X)
    return X * gain.float() if gain is not None else X


Embedding = Literal["token", "positional"]


def effective_embedding(
    model: HookedModel, *, layer: int, embedding: Embedding = "token", fold_ln: bool = True
) -> torch.Tensor:
    """The embedding rows as ``layer``'s heads read them: ``[d_vocab or n_ctx, d_model]``.

    With ``fold_ln=True``, each row passes through ``layer``'s attention LayerNorm exactly as
    the model computes it (centred, scaled to unit RMS, times its gain; the bias dropped:
    module docstring); with ``fold_ln=False``, the raw ``W_E`` or ``W_pos``.

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``). Only its weights are read.
        layer: A block index: whose attention input the rows are normalised for.
        embedding: ``'token'`` (default: ``W_E``) or ``'positional'`` (``W_pos``).
        fold_ln: Pass the rows through the layer's norm (default ``True``).

    Returns:
        ``[d_vocab, d_model]`` (token) or ``[n_ctx, d_model]`` (positional) float32 rows.

    Raises:
        InterpError: for a layer out of range, an unknown embedding, or
            ``positional`` on a model without learned positions.
    """
    check_model(model)
    layer = check_layer(model, layer)
    if embedding == "token":
        X = model.W_E
    elif embedding == "positional":
        try:
            X = model.W_pos
        except (AttributeError, InterpError) as exc:
            raise InterpError("this model has no learned positional embedding W_pos") from exc
    else:
        raise InterpError(f"embedding must be 'token' or 'positional', got {embedding!r}")
    if not fold_ln:
        return X.detach().float()
    return _normalise_rows(model, X.detach().float(), layer)


def _unembed(model: HookedModel, fold_ln: bool) -> torch.Tensor:
    try:
        W_U = model.W_U.detach().float()  # [d_model, d_vocab]
    except (AttributeError, InterpError) as exc:
        raise InterpError("this model has no unembedding W_U, so it has no OV circuit") from exc
    g = _gain(model, None)
    return W_U * g.float()[:, None] if (g is not None and fold_ln) else W_U


def _head_w(model: HookedModel, name: str, layer: int, head: int) -> torch.Tensor:
    return head_weight(model, name)[layer, head].float()


def qk_circuit(
    model: HookedModel,
    *,
    layer: int,
    head: int,
    embedding: Embedding = "token",
    fold_ln: bool = True,
    offset: int | None = None,
) -> Any:
    """The head's full QK circuit as a ``FactoredMatrix`` (query rows, key columns).

    ``E W_Q W_K^T E^T`` over the vocabulary (``E`` the embedding as the head reads it:
    :func:`effective_embedding`); ``embedding="positional"`` gives the ``[n_ctx, n_ctx]``
    positional circuit ``P W_Q W_K^T P^T``. On a rotary model the token-token score depends
    on how far the key is behind the query, so ``offset=d`` is required: the circuit
    ``E W_Q R_-d W_K^T E^T`` of a query ``d`` positions after its key, in the model's own
    rotation (half-split or interleaved pairs, partial rotary, scaled frequencies) and
    through its QK-norms, row by row.

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``). Only its weights are read.
        layer: A block index.
        head: A head index within ``layer``.
        embedding: ``'token'`` (default) or ``'positional'`` (learned positions only).
        fold_ln: Fold the LayerNorms into the circuit (default ``True``: module docstring);
            ``False`` uses the raw weights.
        offset: How many positions a key is behind its query (``0`` = the same position);
            required on a rotary model, refused on any other (its circuit does not depend
            on it).

    Returns:
        A TransformerLens ``FactoredMatrix``: ``[d_vocab (query), d_vocab (key)]``, or
        ``[n_ctx, n_ctx]`` for ``embedding="positional"``.

    Example:
        >>> from interp.models.hf import random_llama
        >>> m = random_llama(1, vocab=20)
        >>> tuple(qk_circuit(m, layer=0, head=0, offset=3).shape)
        (20, 20)

    Raises:
        InterpError: for a layer or head out of range, an unknown embedding, no
            ``offset`` on a rotary model (or one on a model without rotary
            embeddings), or ``embedding="positional"`` on a rotary model.
    """
    from interp.analysis.heads.qk.bands import rotary_keys, rotary_of

    layer, head = check_layer_head(model, layer, head)
    rotary = rotary_of(model, layer, offset, embedding)
    E = effective_embedding(model, layer=layer, embedding=embedding, fold_ln=fold_ln)
    Q = E @ _head_w(model, "W_Q", layer, head)  # [n, d_head]
    K = E @ _head_w(model, "W_K", layer, head)  # [n, d_head]
    if rotary is not None:
        Q, K = rotary_keys(model, layer, Q, K, int(offset))
    return _factored()(Q, K.T)


def ov_circuit(model: HookedModel, *, layer: int, head: int, fold_ln: bool = True) -> Any:
    """The head's full OV circuit ``E W_V W_O W_U`` as a ``FactoredMatrix [d_vocab, d_vocab]``.

    Row ``s`` is what attending to source token ``s`` adds to each output logit, on the
    direct path (module docstring: ``E``, the LayerNorm folding, dropped biases).

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``). Only its weights are read.
        layer: A block index.
        head: A head index within ``layer``.
        fold_ln: Fold the LayerNorms into the circuit (default ``True``: module docstring);
            ``False`` uses the raw weights.

    Returns:
        A TransformerLens ``FactoredMatrix``, ``[d_vocab (source), d_vocab (output logit)]``.

    Raises:
        InterpError: for a layer or head out of range or a model without ``W_U``.
    """
    layer, head = check_layer_head(model, layer, head)
    E = effective_embedding(model, layer=layer, fold_ln=fold_ln)
    A = E @ _head_w(model, "W_V", layer, head)  # [d_vocab, d_head]
    B = _head_w(model, "W_O", layer, head) @ _unembed(model, fold_ln)  # [d_head, d_vocab]
    return _factored()(A, B)


def k_composition_circuit(
    model: HookedModel, *, prev: Any, induction: Any, fold_ln: bool = True
) -> Any:
    """``E W_Q^ind (E W_V^prev W_O^prev W_K^ind)^T``: query token vs. each key's previous token.

    The K-composition circuit of Elhage et al. (2021) and ARENA: a previous-token head
    ``prev`` writes each token into the next position, and the induction head's keys read
    it; entry ``[q, k]`` is how much a query token ``q`` attends to a key whose previous
    token is ``k``.

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``). Only its weights are read.
        prev: The previous-token head: a ``(layer, head)`` pair or an ``'L0H1'`` label.
        induction: The induction head, in a later layer: a pair or a label.
        fold_ln: Fold the LayerNorms into the circuit (default ``True``: module docstring);
            ``False`` uses the raw weights.

    Returns:
        A TransformerLens ``FactoredMatrix``, ``[d_vocab (query), d_vocab (previous token)]``.

    Raises:
        InterpError: for a malformed head, or unless the previous-token head
            sits in an earlier layer.
    """
    (lp, hp), (li, hi) = parse_heads(model, [prev]) + parse_heads(model, [induction])
    if lp >= li:
        raise InterpError(
            f"K-composition needs the previous-token head (layer {lp}) in an "
            f"earlier layer than the induction head (layer {li})"
        )
    E_q = effective_embedding(model, layer=li, fold_ln=fold_ln)
    E_p = effective_embedding(model, layer=lp, fold_ln=fold_ln)
    Q = E_q @ _head_w(model, "W_Q", li, hi)  # [d_vocab, d_head]
    moved = (
        E_p @ _head_w(model, "W_V", lp, hp) @ _head_w(model, "W_O", lp, hp)
    )  # [d_vocab, d_model]
    g = _gain(model, li)
    if g is not None and fold_ln:
        moved = moved * g.float()
    K = moved @ _head_w(model, "W_K", li, hi)  # [d_vocab, d_head]
    return _factored()(Q, K.T)


def diagonal_fraction(fm: Any, *, chunk: int = 2048, exclude: Iterable[int] = ()) -> float:
    """Fraction of rows of a square factored matrix whose largest entry is on the diagonal.

    For an OV circuit, the share of tokens whose top output is the token itself (a copying
    head scores near 1). Rows are materialised ``chunk`` at a time, so a ``d_vocab x
    d_vocab`` matrix is never held whole.

    Args:
        fm: A square ``FactoredMatrix`` (or any object with factors ``A`` and ``B``).
        chunk: How many rows to materialise at a time (default 2048).
        exclude: Row indices to leave out (e.g. BOS).

    Returns:
        The fraction, in ``[0, 1]`` (0 when every row is excluded).

    Raises:
        InterpError: for a non-square matrix.
    """
    A, B = fm.A, fm.B
    if A.shape[-2] != B.shape[-1]:
        raise InterpError(f"diagonal_fraction needs a square matrix, got {tuple(fm.shape)}")
    n = A.shape[-2]
    skip = set(exclude)
    hits = total = 0
    for start in range(0, n, chunk):
        rows = A[start : start + chunk] @ B  # [chunk, n]
        idx = torch.arange(start, start + rows.shape[0])
        keep = torch.tensor([int(i) not in skip for i in idx])
        hits += int((rows.argmax(-1).cpu() == idx)[keep].sum())
        total += int(keep.sum())
    return hits / max(total, 1)


def previous_position_attention(fm: Any, *, scale: float | None = None) -> float:
    """Mean attention a positional QK circuit alone puts on the previous position.

    Each query row ``q >= 1`` of ``fm`` (``[n_ctx, n_ctx]``, queries as rows)
    is masked to keys ``k <= q``, divided by ``scale`` and softmaxed; the result is
    the mean weight on key ``q - 1``. Near 1 for a previous-token head whose
    positional preference does the work. Because the raw ``W_pos`` of a
    LayerNorm model is small, the raw circuit (``fold_ln=False``) gives much
    flatter rows than the circuit of the normalised input the head reads.

    Args:
        fm: A square positional QK circuit (:func:`qk_circuit` with
            ``embedding="positional"``), a ``FactoredMatrix`` or a tensor.
        scale: What the scores are divided by before the softmax; ``None`` is
            ``sqrt(d_head)``, the factor's inner width.

    Returns:
        The mean softmax weight on the previous position, in ``[0, 1]``.

    Example:
        >>> from interp.models import load_induction_model
        >>> model = load_induction_model()
        >>> folded = qk_circuit(model, layer=0, head=1, embedding="positional")
        >>> raw = qk_circuit(model, layer=0, head=1, embedding="positional", fold_ln=False)
        >>> [round(previous_position_attention(fm), 2) for fm in (folded, raw)]
        [0.79, 0.07]

    Raises:
        InterpError: for a non-square matrix.
    """
    M = fm.AB if hasattr(fm, "AB") else torch.as_tensor(fm)
    if M.ndim != 2 or M.shape[-1] != M.shape[-2]:
        raise InterpError(
            f"previous_position_attention needs a square matrix, got {tuple(M.shape)}"
        )
    if scale is None:
        inner = fm.A.shape[-1] if hasattr(fm, "A") else M.shape[-1]
        scale = float(inner) ** 0.5
    n = M.shape[-1]
    future = torch.triu(torch.ones(n, n, dtype=torch.bool, device=M.device), 1)
    P = (M.float() / scale).masked_fill(future, float("-inf")).softmax(-1)
    return float(P.diagonal(-1).mean())


def copying_score(fm: Any) -> float:
    """OV eigenvalue positivity: ``sum(lambda) / sum(|lambda|)`` (real part), in ``[-1, 1]``.

    Uses the non-zero eigenvalues of ``AB``, computed as those of the small ``BA``.
    """
    eig = fm.eigenvalues  # complex [d_head]
    denom = eig.abs().sum()
    if float(denom) == 0.0:
        return 0.0
    return float(eig.sum().real / denom)


def copying_scores(
    model: HookedModel,
    *,
    heads: Iterable[Any] | None = None,
    top1: bool = True,
    fold_ln: bool = True,
) -> pd.DataFrame:
    """Copying score of each head's OV circuit (and how often a token's top output is itself).

    The copying score is the OV circuit's eigenvalue positivity, ``sum(lambda) /
    sum(|lambda|)`` (real part, over the non-zero eigenvalues), in ``[-1, 1]``: near 1 for a
    head that copies the token it attends to into the output (Elhage et al. 2021).

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``). Only its weights are read.
        heads: An iterable of ``(layer, head)`` pairs or ``'L1H4'`` labels; ``None`` is every
            head; duplicates collapse with a warning.
        top1: Also compute ``top1_self_fraction`` (:func:`diagonal_fraction` of the OV
            circuit; default ``True``).
        fold_ln: Fold the LayerNorms into the circuit (default ``True``: module docstring);
            ``False`` uses the raw weights.

    Returns:
        A table with one row per head of ``heads`` (in layer, head order): ``layer, head,
        label, copying_score`` and, with ``top1``, ``top1_self_fraction`` (BOS row 0 is
        included; the circuit is over all tokens). ``attrs`` follow
        :data:`interp.outputs.frames.SCHEMA`.

    Raises:
        InterpError: for a malformed head or a model without ``W_U``.
    """
    cfg = check_model(model)
    wanted = set(parse_heads(model, heads))
    cs = torch.full((cfg.n_layers, cfg.n_heads), float("nan"))
    t1 = torch.full((cfg.n_layers, cfg.n_heads), float("nan"))
    with torch.no_grad():
        for layer, head in sorted(wanted):
            fm = ov_circuit(model, layer=layer, head=head, fold_ln=fold_ln)
            cs[layer, head] = copying_score(fm)
            if top1:
                t1[layer, head] = diagonal_fraction(fm)
    values = {"copying_score": cs}
    if top1:
        values["top1_self_fraction"] = t1
    df = head_frame(values, cfg.n_layers, cfg.n_heads)
    keep = [(int(l), int(h)) in wanted for l, h in zip(df["layer"], df["head"])]
    return described(
        df[keep].reset_index(drop=True),
        "copying_scores",
        description="how much each head's OV circuit copies tokens (from weights alone)",
        method="exact",
        unit="score",
        model=model,
        forward_equivalents=0.0,
    )
