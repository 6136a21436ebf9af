"""How a layer turns query and key vectors into attention scores: :class:`QKGeometry`.

A head's pre-softmax score between a query at position ``p`` and a key at
position ``k`` is

    s[p, k] = scale * (R_p n_q(q_p)) . (R_k n_k(k_k))      (then a soft cap, a mask)

with ``q = ln1(x) W_Q + b_Q`` (and ``k`` alike), ``n_q``/``n_k`` an optional
per-head norm of the projected vectors (QK-norm: Qwen3, OLMo2), ``R_p`` the
rotary embedding of position ``p`` (none for learned or no positions) and
``scale`` the model's own (``1/sqrt(d_head)``, or Gemma-2's
``query_pre_attn_scalar ** -0.5``). Everything but the soft cap is linear once
the norms' scales are frozen, which is what exact QK attribution needs.

Rotary embeddings rotate pairs of dimensions, pair ``i`` by ``position *
freq[i]``. Models differ in which dimensions pair up: ``"half"`` (Llama, Qwen,
Gemma, NeoX, Phi: dimension ``i`` with ``i + r/2``) or ``"interleaved"``
(GPT-J: ``2i`` with ``2i + 1``), and in how many dimensions rotate (``r <
d_head`` is partial rotary: NeoX, Phi, GPT-J). The frequencies are the
model's own (its ``inv_freq`` buffer, rope scaling already applied, times its
``attention_scaling``), so nothing here is a re-derivation of a paper's formula.

Example:
    >>> import torch
    >>> rot = Rotary(freqs=torch.tensor([1.0, 0.1]), style="half", dims=4, gain=1.0)
    >>> x = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    >>> [round(v, 4) for v in rot.rotate(x, torch.tensor([1]))[0].tolist()]
    [0.5403, 0.0, 0.8415, 0.0]
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from interp.runtime.norms import Norm


@dataclasses.dataclass
class Rotary:
    """A rotary embedding: ``freqs [r/2]`` radians per position, the pairing ``style``, the
    rotated ``dims`` ``r`` (the first ``r`` of ``d_head``) and a ``gain`` on cos and sin."""

    freqs: torch.Tensor
    style: str  # "half" | "interleaved"
    dims: int
    gain: float = 1.0

    @property
    def n_pairs(self) -> int:
        return int(self.freqs.numel())

    def pairs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The dimensions of each rotated pair, ``(a [r/2], b [r/2])``."""
        i = torch.arange(self.n_pairs)
        if self.style == "interleaved":
            return 2 * i, 2 * i + 1
        return i, i + self.n_pairs

    def angles(self, positions: torch.Tensor) -> torch.Tensor:
        """``[P, r/2]``: each pair's angle at each position (any real offsets too)."""
        return positions.double()[:, None] * self.freqs.double()[None, :]

    def rotate(
        self, x: torch.Tensor, positions: torch.Tensor, *, pos_dim: int = -2
    ) -> torch.Tensor:
        """``x [..., P, ..., d_head]`` rotated, the slice at index ``j`` of ``pos_dim`` by
        ``positions[j]`` (the model's own rotation of a vector at that position)."""
        ang = self.angles(positions.to(torch.float64).cpu())
        cos = (torch.cos(ang) * self.gain).to(x.dtype).to(x.device)
        sin = (torch.sin(ang) * self.gain).to(x.dtype).to(x.device)
        shape = [1] * x.ndim
        shape[pos_dim] = cos.shape[0]
        shape[-1] = cos.shape[1]
        cos, sin = cos.reshape(shape), sin.reshape(shape)
        a, b = self.pairs()
        xa, xb = x[..., a], x[..., b]
        out = x.clone()
        out[..., a] = xa * cos - xb * sin
        out[..., b] = xb * cos + xa * sin
        return out

    def band_of_dims(self, d_head: int) -> torch.Tensor:
        """``[d_head]``: each dimension's pair index, ``r/2`` for the unrotated ones."""
        band = torch.full((d_head,), self.n_pairs, dtype=torch.long)
        a, b = self.pairs()
        band[a] = torch.arange(self.n_pairs)
        band[b] = torch.arange(self.n_pairs)
        return band


@dataclasses.dataclass
class QKGeometry:
    """What a layer does between its projected queries/keys and its scores (module docstring),
    and which keys each query may see: the layer's mask rule (:meth:`visible`), one rule for
    every kind of model (causal or bidirectional, with or without a sliding window)."""

    scale: float
    rotary: Rotary | None = None
    q_norm: Norm | None = None  # per-head norms of projected queries / keys (QK-norm)
    k_norm: Norm | None = None
    softcap: float | None = None  # s -> softcap * tanh(s / softcap), before the mask
    window: int | None = None  # sliding window: a query sees the last `window` keys
    notes: tuple[str, ...] = ()
    causal: bool = True  # False: a bidirectional encoder (every key is seen)

    def visible(self, n: int, device: Any = None) -> torch.Tensor:
        """``[query, key]`` bool: the keys each query of ``n`` positions may see."""
        q = torch.arange(n, device=device)[:, None]
        k = torch.arange(n, device=device)[None, :]
        mask = (k <= q) if self.causal else torch.ones(n, n, dtype=torch.bool, device=device)
        if self.window:
            mask = mask & (k > q - self.window)
        return mask

    def keys_of(self, query: int, n: int) -> range:
        """The key positions a query at ``query`` (of ``n``) may see, in order."""
        hi = query + 1 if self.causal else n
        lo = max(0, query - self.window + 1) if self.window else 0
        return range(lo, hi)

    def hidden(self, query: int, key: int) -> str | None:
        """Why the query at ``query`` cannot see the key at ``key``, or None when it can."""
        if self.causal and key > query:
            return f"comes after query position {query}; a causal head cannot attend to it"
        if self.window and key <= query - self.window:
            return (
                f"is {query - key} positions behind query position {query}, outside this "
                f"layer's sliding window of {self.window} keys; the head cannot attend to it"
            )
        return None


def rotary_from_hf(hf_model: Any) -> Rotary | None:
    """The rotary embedding a Hugging Face model applies, or None.

    Most families have one ``rotary_emb`` module with ``inv_freq`` (half-split
    pairs); GPT-J keeps a sin/cos table, ``embed_positions`` (interleaved pairs).
    """
    mods = [m for _, m in hf_model.named_modules() if not hasattr(m, "original_component")]
    for m in mods:
        table = getattr(m, "embed_positions", None)
        if isinstance(table, torch.Tensor) and table.ndim == 2:
            # cat(sin(p f), cos(p f)) with f = 1 / 10000^(2i / r): read f back exactly
            r = int(table.shape[1])
            base = getattr(getattr(hf_model, "config", None), "rope_theta", None) or 10000.0
            freqs = 1.0 / (float(base) ** (torch.arange(0, r, 2, dtype=torch.float64) / r))
            got = torch.atan2(table[1, : r // 2].double(), table[1, r // 2 :].double())
            if not torch.allclose(got, freqs, atol=1e-6):
                freqs = got
            return Rotary(freqs=freqs, style="interleaved", dims=r)
    for m in mods:
        inv = getattr(m, "inv_freq", None)
        if isinstance(inv, torch.Tensor):
            freqs = inv.detach().double().cpu()
            gain = float(getattr(m, "attention_scaling", 1.0) or 1.0)
            return Rotary(freqs=freqs, style="half", dims=2 * int(freqs.numel()), gain=gain)
    return None


def default_scale(d_head: int) -> float:
    """``1/sqrt(d_head)``: the score scale of a model that states none."""
    return 1.0 / math.sqrt(d_head)
