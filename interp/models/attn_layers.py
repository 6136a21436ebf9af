"""The parts of an attention-only transformer: its config, LayerNorm, attention, block, embeddings.

:class:`AttnOnlyConfig` uses TransformerLens's field names; each module carries
TransformerLens's hook points (``hook_scale``, ``hook_q`` ... ``hook_z``,
``hook_resid_pre`` ...), so :class:`interp.models.attn_only.AttnOnlyTransformer`
built from them has TransformerLens hook names.

Example:
    >>> cfg = AttnOnlyConfig(n_layers=1, n_heads=2, d_model=8, d_head=4, d_vocab=5, n_ctx=4)
    >>> Block(cfg)(torch.zeros(1, 3, 8)).shape
    torch.Size([1, 3, 8])
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

import torch
from torch import nn
from transformer_lens.hook_points import HookPoint

from interp.core.errors import InterpError
from interp.models.kv_cache import LayerKV


@dataclasses.dataclass
class AttnOnlyConfig:
    """Configuration of an :class:`AttnOnlyTransformer` (TransformerLens field names).

    Fields beyond the sizes switch parts of the architecture on and off so that
    the same class runs the article's toy head (``positional_embedding_type="none"``,
    ``normalization_type=None``, ``use_residual=False``, ``use_W_O=False``,
    ``use_unembed=False``) and a trained two-layer model. The fields after ``model_name``
    are TransformerLens-compatible constants read by shared utilities.

    Attributes:
        n_layers: Blocks (a positive int).
        n_heads: Heads per block (a positive int).
        d_model: Residual stream width (a positive int).
        d_head: Width of each head (a positive int).
        d_vocab: Vocabulary size (a positive int).
        n_ctx: Maximum sequence length (required with learned positions).
        normalization_type: ``"LN"`` (default: LayerNorm before each attention layer and the
            unembedding) or ``None``.
        positional_embedding_type: ``"standard"`` (default: learned positions) or ``"none"``.
        attention_dir: ``"causal"`` (default) or ``"bidirectional"``.
        use_residual: Add each block's update to its input (default ``True``).
        use_W_O: An output projection per head (default ``True``; without one, ``n_heads *
            d_head`` must equal ``d_model``).
        use_unembed: An unembedding to logits (default ``True``; without one, the output is
            the final residual stream).
        attn_scale: What the scores are divided by (``None``: ``sqrt(d_head)``).
        init_range: The standard deviation of the initial weights (default 0.02).
        eps: LayerNorm's epsilon (default 1e-5).
        seed: Every random draw of the initial weights; the same seed gives the same numbers
            (``None``: torch's global generator).
        vocab: A word per id, for word-level ``to_tokens`` (``None``: ids only).
        model_name: What tables and reports call the model.
        attn_only: Always ``True``.
        act_fn: Always ``None`` (no MLPs).
        n_key_value_heads: Always ``None`` (no grouped-query attention).
        device: The device TransformerLens utilities assume (``"cpu"``).
        dtype: The weights' dtype (default ``torch.float32``).
        default_prepend_bos: Always ``False`` (prompts are ids).
        d_vocab_out: ``d_vocab``.
        causal: Whether ``attention_dir`` is ``"causal"``.

    Raises:
        InterpError: for a size that is not a positive int, learned positions without
            ``n_ctx``, ``use_W_O=False`` with ``n_heads * d_head != d_model``, or a
            ``vocab`` whose length is not ``d_vocab``.
    """

    n_layers: int
    n_heads: int
    d_model: int
    d_head: int
    d_vocab: int
    n_ctx: int | None = None
    normalization_type: Literal["LN"] | None = "LN"
    positional_embedding_type: Literal["standard", "none"] = "standard"
    attention_dir: Literal["causal", "bidirectional"] = "causal"
    use_residual: bool = True
    use_W_O: bool = True
    use_unembed: bool = True
    attn_scale: float | None = None
    init_range: float = 0.02
    eps: float = 1e-5
    seed: int | None = None
    vocab: tuple[str, ...] | None = None
    model_name: str = "attn-only"
    # TransformerLens-compatible constants read by shared utilities.
    attn_only: bool = True
    act_fn: None = None
    n_key_value_heads: None = None
    device: str = "cpu"
    dtype: torch.dtype = torch.float32
    default_prepend_bos: bool = False

    def __post_init__(self) -> None:
        for name in ("n_layers", "n_heads", "d_model", "d_head", "d_vocab"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise InterpError(f"config field {name} must be a positive int, got {value!r}")
        if self.positional_embedding_type == "standard" and not self.n_ctx:
            raise InterpError("learned positions need n_ctx (the maximum sequence length)")
        if not self.use_W_O and self.n_heads * self.d_head != self.d_model:
            raise InterpError(
                "without an output projection the concatenated heads must have width d_model: "
                f"n_heads * d_head = {self.n_heads * self.d_head} but d_model = {self.d_model}; "
                "pass W_O or make the widths match"
            )
        if self.vocab is not None:
            self.vocab = tuple(self.vocab)
            if len(self.vocab) != self.d_vocab:
                raise InterpError(
                    f"vocab has {len(self.vocab)} words but d_vocab is {self.d_vocab}"
                )
        if self.attn_scale is None:
            self.attn_scale = math.sqrt(self.d_head)

    @property
    def d_vocab_out(self) -> int:
        return self.d_vocab

    @property
    def causal(self) -> bool:
        return self.attention_dir == "causal"

    def to_dict(self) -> dict[str, Any]:
        """The fields that define the architecture, JSON-serialisable.

        Returns:
            ``{field: value}`` for every field but ``dtype``, tuples as lists.
        """
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "dtype":
                continue
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AttnOnlyConfig:
        """The config a checkpoint's ``model`` dict (:meth:`to_dict`) describes.

        Args:
            d: ``{field: value}``; missing fields take their defaults.

        Returns:
            The :class:`AttnOnlyConfig`.

        Raises:
            InterpError: for unknown fields, or as the class for values it refuses.
        """
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise InterpError(f"unknown config fields {sorted(unknown)}")
        return cls(**d)


class LayerNorm(nn.Module):
    """LayerNorm with TransformerLens's ``hook_scale`` and ``hook_normalized``."""

    def __init__(self, d_model: int, eps: float):
        super().__init__()
        self.eps = eps
        self.w = nn.Parameter(torch.ones(d_model))
        self.b = nn.Parameter(torch.zeros(d_model))
        self.hook_scale = HookPoint()  # [batch, pos, 1]
        self.hook_normalized = HookPoint()  # [batch, pos, d_model]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x - x.mean(-1, keepdim=True)
        scale = self.hook_scale((x.pow(2).mean(-1, keepdim=True) + self.eps).sqrt())
        return self.hook_normalized(x / scale * self.w + self.b)


class Attention(nn.Module):
    """Multi-head attention with separate per-head ``W_Q, W_K, W_V, W_O``."""

    def __init__(self, cfg: AttnOnlyConfig):
        super().__init__()
        h, d, e = cfg.n_heads, cfg.d_model, cfg.d_head
        self.cfg = cfg
        self.W_Q = nn.Parameter(torch.empty(h, d, e))
        self.W_K = nn.Parameter(torch.empty(h, d, e))
        self.W_V = nn.Parameter(torch.empty(h, d, e))
        self.b_Q = nn.Parameter(torch.zeros(h, e))
        self.b_K = nn.Parameter(torch.zeros(h, e))
        self.b_V = nn.Parameter(torch.zeros(h, e))
        if cfg.use_W_O:
            self.W_O = nn.Parameter(torch.empty(h, e, d))
        else:
            # No output projection: the concatenated head outputs are the update.
            self.register_buffer("W_O", torch.eye(d).reshape(h, e, d))
        self.b_O = nn.Parameter(torch.zeros(d), requires_grad=cfg.use_W_O)
        self.hook_q = HookPoint()  # [batch, pos, head, d_head]
        self.hook_k = HookPoint()
        self.hook_v = HookPoint()
        self.hook_attn_scores = HookPoint()  # [batch, head, query_pos, key_pos]
        self.hook_pattern = HookPoint()  # [batch, head, query_pos, key_pos]
        self.hook_z = HookPoint()  # [batch, pos, head, d_head]

    def forward(
        self, x: torch.Tensor, past: LayerKV | None = None, key_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The heads' output ``[batch, pos, d_model]`` for the positions of ``x``.

        ``past`` (generation) holds the earlier positions' keys and values and is extended by
        these; ``key_mask`` (``[batch, all positions]``, True for real tokens) keeps queries
        off left padding (a query always sees itself, so a padding row stays finite).
        """
        # x: [batch, pos, d_model]
        b, n, d = x.shape
        h, e = self.cfg.n_heads, self.cfg.d_head
        # One [d_model, 3 * head * d_head] matmul for q, k and v (faster than three einsums).
        w = torch.cat([self.W_Q, self.W_K, self.W_V], 0).permute(1, 0, 2).reshape(d, 3 * h * e)
        bias = torch.cat([self.b_Q, self.b_K, self.b_V], 0).reshape(3 * h * e)
        qkv = (x @ w + bias).view(b, n, 3, h, e)
        q = self.hook_q(qkv[:, :, 0])  # [batch, pos, head, d_head]
        k = self.hook_k(qkv[:, :, 1])
        v = self.hook_v(qkv[:, :, 2])
        if past is not None:
            k, v = past.extend(k, v)  # every position's: [batch, key_pos, head, d_head]
        m = k.shape[1]  # keys: the cached positions, then these n
        scores = q.transpose(1, 2) @ k.permute(0, 2, 3, 1) / self.cfg.attn_scale
        if self.cfg.causal or key_mask is not None:
            dev = scores.device
            blocked = torch.ones(n, m, dtype=torch.bool, device=dev)  # query i is key m - n + i
            blocked = torch.triu(blocked, m - n + 1) if self.cfg.causal else ~blocked
            if key_mask is not None:
                cols = torch.arange(m, device=dev)
                own = cols[None, :] == (cols[m - n :])[:, None]  # [query, key]: itself
                blocked = blocked | (~key_mask[:, None, None, :m] & ~own)
            # -inf, not 0: exp(0) = 1 would still give future positions a share.
            scores = scores.masked_fill(blocked, float("-inf"))
        scores = self.hook_attn_scores(scores)  # [batch, head, query_pos, key_pos]
        pattern = self.hook_pattern(torch.softmax(scores, dim=-1))
        z = self.hook_z((pattern @ v.transpose(1, 2)).transpose(1, 2))  # [batch, pos, head, d_head]
        return z.reshape(b, n, h * e) @ self.W_O.reshape(h * e, d) + self.b_O


class Block(nn.Module):
    """One attention-only block: (LayerNorm) -> attention -> (residual add)."""

    def __init__(self, cfg: AttnOnlyConfig):
        super().__init__()
        self.cfg = cfg
        self.ln1 = LayerNorm(cfg.d_model, cfg.eps) if cfg.normalization_type == "LN" else None
        self.attn = Attention(cfg)
        self.hook_resid_pre = HookPoint()
        self.hook_attn_out = HookPoint()
        self.hook_resid_post = HookPoint()

    def forward(
        self, resid: torch.Tensor, past: LayerKV | None = None, key_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        resid = self.hook_resid_pre(resid)
        x = self.ln1(resid) if self.ln1 is not None else resid
        attn_out = self.hook_attn_out(self.attn(x, past, key_mask))
        out = resid + attn_out if self.cfg.use_residual else attn_out
        return self.hook_resid_post(out)


class Embed(nn.Module):
    def __init__(self, d_vocab: int, d_model: int):
        super().__init__()
        self.W_E = nn.Parameter(torch.empty(d_vocab, d_model))


class PosEmbed(nn.Module):
    def __init__(self, n_ctx: int, d_model: int):
        super().__init__()
        self.W_pos = nn.Parameter(torch.empty(n_ctx, d_model))


class Unembed(nn.Module):
    def __init__(self, d_model: int, d_vocab: int):
        super().__init__()
        self.W_U = nn.Parameter(torch.empty(d_model, d_vocab))
        self.b_U = nn.Parameter(torch.zeros(d_vocab))
