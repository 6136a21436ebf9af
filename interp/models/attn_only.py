"""A small attention-only transformer with TransformerLens hook names and weights.

This is the model class behind both the article's hand-set toy heads and our
trained induction model. It is built on TransformerLens's
:class:`~transformer_lens.HookedRootModule` and
:class:`~transformer_lens.hook_points.HookPoint`, so ``run_with_cache`` and
``run_with_hooks`` behave exactly as on a ``TransformerBridge``, and it uses
the same names:

========================================  ====================================
hook                                      shape
========================================  ====================================
``hook_embed``, ``hook_pos_embed``         ``[batch, pos, d_model]``
``blocks.{l}.hook_resid_pre``              ``[batch, pos, d_model]``
``blocks.{l}.ln1.hook_scale``              ``[batch, pos, 1]`` (with LayerNorm)
``blocks.{l}.ln1.hook_normalized``         ``[batch, pos, d_model]``
``blocks.{l}.attn.hook_q`` / ``_k``/``_v``  ``[batch, pos, head, d_head]``
``blocks.{l}.attn.hook_attn_scores``       ``[batch, head, query_pos, key_pos]``
``blocks.{l}.attn.hook_pattern``           ``[batch, head, query_pos, key_pos]``
``blocks.{l}.attn.hook_z``                 ``[batch, pos, head, d_head]``
``blocks.{l}.hook_attn_out``               ``[batch, pos, d_model]``
``blocks.{l}.hook_resid_post``             ``[batch, pos, d_model]``
========================================  ====================================

Weights follow TransformerLens shapes: ``W_E [d_vocab, d_model]``, ``W_pos
[n_ctx, d_model]``, ``W_Q/W_K/W_V [n_layers, n_heads, d_model, d_head]``,
``W_O [n_layers, n_heads, d_head, d_model]``, ``W_U [d_model, d_vocab]``, and
``QK`` / ``OV`` as ``FactoredMatrix`` objects.

Switches let the same class express the article's stripped-down head: no
positions, no LayerNorm, no residual connection, an identity output
projection, no unembedding (the output is then the final residual stream).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.hook_points import HookPoint
from transformer_lens.HookedRootModule import HookedRootModule

from interp.checks import check_tokens
from interp.errors import InterpError

ReturnType = Literal["logits", "loss", "both", None]


@dataclasses.dataclass
class AttnOnlyConfig:
    """Configuration of an :class:`AttnOnlyTransformer` (TransformerLens field names).

    Fields beyond the sizes switch parts of the architecture on and off so that
    the same class runs the article's toy head (``positional_embedding_type="none"``,
    ``normalization_type=None``, ``use_residual=False``, ``use_W_O=False``,
    ``use_unembed=False``) and a trained two-layer model.
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
        """The fields that define the architecture, JSON-serialisable."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "dtype":
                continue
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AttnOnlyConfig:
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
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
        scores = q.transpose(1, 2) @ k.permute(0, 2, 3, 1) / self.cfg.attn_scale
        if self.cfg.causal:
            future = torch.triu(torch.ones(n, n, dtype=torch.bool, device=scores.device), 1)
            # -inf, not 0: exp(0) = 1 would still give future positions a share.
            scores = scores.masked_fill(future, float("-inf"))
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

    def forward(self, resid: torch.Tensor) -> torch.Tensor:
        resid = self.hook_resid_pre(resid)
        x = self.ln1(resid) if self.ln1 is not None else resid
        attn_out = self.hook_attn_out(self.attn(x))
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


class AttnOnlyTransformer(HookedRootModule):
    """An attention-only transformer exposing TransformerLens hooks and weights.

    Example:
        >>> cfg = AttnOnlyConfig(n_layers=2, n_heads=2, d_model=16, d_head=8, d_vocab=10, n_ctx=8)
        >>> model = AttnOnlyTransformer(cfg)
        >>> logits, cache = model.run_with_cache(torch.tensor([[0, 1, 2]]))
        >>> cache["blocks.1.attn.hook_pattern"].shape
        torch.Size([1, 2, 3, 3])

    Raises:
        InterpError: on forward, for tokens that are not integer ids in
            ``[0, d_vocab)``, an empty batch, or sequences longer than ``n_ctx``.
    """

    def __init__(self, cfg: AttnOnlyConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = Embed(cfg.d_vocab, cfg.d_model)
        self.hook_embed = HookPoint()  # [batch, pos, d_model]
        if cfg.positional_embedding_type == "standard":
            self.pos_embed = PosEmbed(cfg.n_ctx, cfg.d_model)
            self.hook_pos_embed = HookPoint()  # [batch, pos, d_model]
        else:
            self.pos_embed = None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        has_ln = cfg.normalization_type == "LN"
        self.ln_final = LayerNorm(cfg.d_model, cfg.eps) if has_ln and cfg.use_unembed else None
        self.unembed = Unembed(cfg.d_model, cfg.d_vocab) if cfg.use_unembed else None
        self.init_weights(cfg.seed)
        self.setup()

    # ------------------------------------------------------------------ init
    def init_weights(self, seed: int | None = None) -> None:
        """GPT-2 style init: normal(0, init_range) weights, zero biases, unit LN gains."""
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        for name, p in self.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf.startswith("W_"):
                with torch.no_grad():
                    p.copy_(torch.randn(p.shape, generator=gen) * self.cfg.init_range)

    # --------------------------------------------------------------- forward
    def check_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """Validate token ids and return them as a ``[batch, pos]`` long tensor.

        The same checks every analysis runs (:func:`interp.protocol.check_tokens`).
        """
        return check_tokens(self, tokens)

    def forward(
        self,
        tokens: torch.Tensor,
        return_type: ReturnType = "logits",
        *,
        loss_mask: torch.Tensor | None = None,
        loss_per_token: bool = False,
    ) -> Any:
        """Run the model.

        Args:
            tokens: ``[batch, pos]`` (or ``[pos]``) integer ids.
            return_type: ``"logits"`` (``[batch, pos, d_vocab]``, or the final
                residual ``[batch, pos, d_model]`` when the model has no
                unembedding), ``"loss"``, ``"both"`` or ``None``.
            loss_mask: optional ``[batch, pos]`` bool, True where the *next*
                token prediction made at that position counts in the loss.
            loss_per_token: return the ``[batch, pos - 1]`` losses instead of the mean.
        """
        tokens = self.check_tokens(tokens)
        resid = self.hook_embed(self.embed.W_E[tokens])  # [batch, pos, d_model]
        if self.pos_embed is not None:
            pos = self.pos_embed.W_pos[: tokens.shape[1]][None].expand(tokens.shape[0], -1, -1)
            resid = resid + self.hook_pos_embed(pos)
        out = self.forward_from(resid, -1)
        if return_type == "logits":
            return out
        if return_type is None:
            return None
        if self.unembed is None:
            raise InterpError("this toy model has no unembedding, so it has no next-token loss")
        loss = next_token_loss(out, tokens, mask=loss_mask, per_token=loss_per_token)
        return loss if return_type == "loss" else (out, loss)

    def forward_from(self, resid: torch.Tensor, layer: int) -> torch.Tensor:
        """Logits from the residual stream after block ``layer`` (its ``hook_resid_post``).

        ``resid`` is ``[batch, pos, d_model]``; ``layer=-1`` starts from the
        embeddings (the whole model). Only blocks ``layer + 1 ..`` run, so an
        analysis that edits block ``layer``'s output resumes here instead of
        recomputing the layers before it. Hooks on the later blocks fire as usual.

        Raises:
            InterpError: for a layer outside ``-1 .. n_layers - 1``.
        """
        if not -1 <= layer < self.cfg.n_layers:
            raise InterpError(f"layer {layer} out of range -1..{self.cfg.n_layers - 1}")
        for block in self.blocks[layer + 1 :]:
            resid = block(resid)
        if self.unembed is None:
            return resid
        if self.ln_final is not None:
            resid = self.ln_final(resid)
        return resid @ self.unembed.W_U + self.unembed.b_U  # [batch, pos, d_vocab]

    def run_with_cache(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """As ``HookedRootModule.run_with_cache``, returning an ``ActivationCache``."""
        from transformer_lens.ActivationCache import ActivationCache

        out, cache = super().run_with_cache(*args, **kwargs)
        return out, ActivationCache(cache, self, has_batch_dim=not kwargs.get("remove_batch_dim"))

    # ------------------------------------------------------------- tokens
    def to_tokens(self, text: str | Sequence[str]) -> torch.Tensor:
        """Word-level tokenisation for models built with a ``vocab``: ``[batch, pos]`` ids.

        A string is one sequence (``[1, pos]``); a list of strings is a batch, as
        in TransformerLens (every string must have the same number of words).

        Raises:
            InterpError: if the model has no vocabulary, a text is empty, a word
                is not in the vocabulary, or a batch's texts differ in length.
        """
        if self.cfg.vocab is None:
            raise InterpError(
                "this model has no tokenizer; pass token ids as a [batch, pos] tensor"
            )
        if isinstance(text, str):
            return words_to_ids(text, self.cfg.vocab)[None]
        rows = [words_to_ids(t, self.cfg.vocab) for t in text]
        if not rows:
            raise InterpError("empty batch: pass at least one text")
        if len({len(r) for r in rows}) > 1:
            raise InterpError("the texts have different numbers of words; pad or split them")
        return torch.stack(rows)

    def to_str_tokens(self, tokens: torch.Tensor | Sequence[int]) -> list[str]:
        """String labels for one sequence of ids (the id itself when there is no vocab)."""
        ids = torch.as_tensor(tokens).flatten().tolist()
        if self.cfg.vocab is None:
            return [str(i) for i in ids]
        return [self.cfg.vocab[i] for i in ids]

    @classmethod
    def from_bridge(cls, bridge: Any) -> AttnOnlyTransformer:
        """Copy an attention-only, LayerNorm ``TransformerBridge`` into this class.

        Reads the bridge's TransformerLens weight properties (``W_E, W_pos,
        W_Q, b_Q, ...``) and LayerNorm parameters, so both models compute the
        same function; used to check the two stay interchangeable.

        Raises:
            InterpError: if the bridge has MLPs or a normalisation other than LayerNorm.
        """
        bcfg = bridge.cfg
        if not getattr(bcfg, "attn_only", False) or bcfg.normalization_type != "LN":
            raise InterpError("from_bridge needs an attention-only bridge with LayerNorm")
        cfg = AttnOnlyConfig(
            n_layers=bcfg.n_layers,
            n_heads=bcfg.n_heads,
            d_model=bcfg.d_model,
            d_head=bcfg.d_head,
            d_vocab=bcfg.d_vocab,
            n_ctx=bcfg.n_ctx,
            eps=float(getattr(bcfg, "eps", 1e-5)),
        )
        model = cls(cfg)
        sd = bridge.state_dict()
        with torch.no_grad():
            model.embed.W_E.copy_(bridge.W_E)
            model.pos_embed.W_pos.copy_(bridge.W_pos)
            model.unembed.W_U.copy_(bridge.W_U)
            model.unembed.b_U.copy_(bridge.b_U)
            model.ln_final.w.copy_(sd["ln_final.weight"])
            model.ln_final.b.copy_(sd["ln_final.bias"])
            for layer, block in enumerate(model.blocks):
                for name in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O"):
                    getattr(block.attn, name).copy_(getattr(bridge, name)[layer])
                block.ln1.w.copy_(sd[f"blocks.{layer}.ln1.weight"])
                block.ln1.b.copy_(sd[f"blocks.{layer}.ln1.bias"])
        return model

    # ------------------------------------------------------------ weights
    def _stack(self, name: str) -> torch.Tensor:
        return torch.stack([getattr(b.attn, name) for b in self.blocks])

    @property
    def W_E(self) -> torch.Tensor:  # [d_vocab, d_model]
        return self.embed.W_E

    @property
    def W_pos(self) -> torch.Tensor:  # [n_ctx, d_model]
        if self.pos_embed is None:
            raise InterpError("this model has no positional embedding (W_pos)")
        return self.pos_embed.W_pos

    @property
    def W_U(self) -> torch.Tensor:  # [d_model, d_vocab]
        if self.unembed is None:
            raise InterpError("this toy model has no unembedding (W_U)")
        return self.unembed.W_U

    @property
    def b_U(self) -> torch.Tensor:  # [d_vocab]
        if self.unembed is None:
            raise InterpError("this toy model has no unembedding (b_U)")
        return self.unembed.b_U

    @property
    def W_Q(self) -> torch.Tensor:  # [n_layers, n_heads, d_model, d_head]
        return self._stack("W_Q")

    @property
    def W_K(self) -> torch.Tensor:  # [n_layers, n_heads, d_model, d_head]
        return self._stack("W_K")

    @property
    def W_V(self) -> torch.Tensor:  # [n_layers, n_heads, d_model, d_head]
        return self._stack("W_V")

    @property
    def W_O(self) -> torch.Tensor:  # [n_layers, n_heads, d_head, d_model]
        return self._stack("W_O")

    @property
    def b_Q(self) -> torch.Tensor:  # [n_layers, n_heads, d_head]
        return self._stack("b_Q")

    @property
    def b_K(self) -> torch.Tensor:  # [n_layers, n_heads, d_head]
        return self._stack("b_K")

    @property
    def b_V(self) -> torch.Tensor:  # [n_layers, n_heads, d_head]
        return self._stack("b_V")

    @property
    def b_O(self) -> torch.Tensor:  # [n_layers, d_model]
        return torch.stack([b.attn.b_O for b in self.blocks])

    @property
    def QK(self):  # FactoredMatrix [n_layers, n_heads, d_model, d_model]
        from transformer_lens import FactoredMatrix

        return FactoredMatrix(self.W_Q, self.W_K.transpose(-2, -1))

    @property
    def OV(self):  # FactoredMatrix [n_layers, n_heads, d_model, d_model]
        from transformer_lens import FactoredMatrix

        return FactoredMatrix(self.W_V, self.W_O)


def words_to_ids(text: str | Sequence[str], vocab: Sequence[str]) -> torch.Tensor:
    """Map whitespace-separated words (or a list of words) to ids in ``vocab``.

    Raises:
        InterpError: for an empty sentence or a word outside ``vocab``.
    """
    words = text.split() if isinstance(text, str) else list(text)
    if not words:
        raise InterpError("empty sentence: pass at least one word")
    index = {w: i for i, w in enumerate(vocab)}
    for w in words:
        if w not in index:
            raise InterpError(f"unknown token {w!r}; vocabulary: {', '.join(vocab)}")
    return torch.tensor([index[w] for w in words], dtype=torch.long)


def next_token_loss(
    logits: torch.Tensor,
    tokens: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    per_token: bool = False,
) -> torch.Tensor:
    """Cross-entropy of predicting ``tokens[:, 1:]`` from ``logits[:, :-1]``.

    ``mask`` (``[batch, pos]`` bool) selects the predicting positions that
    count; the last column is ignored because nothing follows it.
    """
    # logits: [batch, pos, d_vocab]; tokens: [batch, pos]
    logp = F.log_softmax(logits[:, :-1].float(), dim=-1)
    nll = -logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)  # [batch, pos - 1]
    if per_token:
        return nll
    if mask is None:
        return nll.mean()
    m = mask[:, :-1].to(nll.dtype)
    if m.sum() == 0:
        raise InterpError("loss mask selects no positions")
    return (nll * m).sum() / m.sum()
