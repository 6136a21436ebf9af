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

from collections.abc import Sequence
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.hook_points import HookPoint
from transformer_lens.HookedRootModule import HookedRootModule

from interp.core.checks import check_tokens
from interp.core.errors import InterpError
from interp.models.attn_layers import AttnOnlyConfig, Block, Embed, LayerNorm, PosEmbed, Unembed
from interp.models.attn_weights import StackedWeights
from interp.models.kv_cache import KVCache

__all__ = ["AttnOnlyConfig", "AttnOnlyTransformer", "next_token_loss", "words_to_ids"]

ReturnType = Literal["logits", "loss", "both", None]


class AttnOnlyTransformer(StackedWeights, HookedRootModule):
    """An attention-only transformer exposing TransformerLens hooks and weights.

    The hook names and weight shapes are TransformerLens's (module docstring), so every
    analysis runs on it as on a ``TransformerBridge``. The weights are initialised from
    ``cfg.seed`` (:meth:`init_weights`).

    Args:
        cfg: Its :class:`~interp.models.attn_layers.AttnOnlyConfig`: sizes and the
            switches for positions, LayerNorm, residual, output projection and unembedding.

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
        """GPT-2 style init: normal(0, init_range) weights, zero biases, unit LN gains.

        Only the ``W_*`` weights are redrawn; biases and LayerNorm gains keep their values
        (zeros and ones as built).

        Args:
            seed: Every random draw; the same seed gives the same numbers (``None``: torch's
                global generator).
        """
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        for name, p in self.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf.startswith("W_"):
                with torch.no_grad():
                    p.copy_(torch.randn(p.shape, generator=gen) * self.cfg.init_range)

    # --------------------------------------------------------------- forward
    def check_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """Validate token ids and return them as a ``[batch, pos]`` long tensor.

        The same checks every analysis runs (:func:`interp.core.checks.check_tokens`).

        Args:
            tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence).

        Returns:
            ``[batch, pos]`` long ids.

        Raises:
            InterpError: as :func:`interp.core.checks.check_tokens`.
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
            tokens: ``[batch, pos]`` integer ids (``[pos]`` is one sequence).
            return_type: ``"logits"`` (``[batch, pos, d_vocab]``, or the final
                residual ``[batch, pos, d_model]`` when the model has no
                unembedding), ``"loss"``, ``"both"`` or ``None``.
            loss_mask: ``[batch, pos]`` bool: which positions count (True where the *next*
                token prediction made at that position counts in the loss); ``None``: all.
            loss_per_token: Return the ``[batch, pos - 1]`` losses instead of the mean.

        Returns:
            The logits (or final residual) for ``"logits"``, the loss for ``"loss"``, ``(logits,
            loss)`` for ``"both"``, ``None`` for ``None``.

        Raises:
            InterpError: for bad tokens (as the class), or a loss asked of a model without an
                unembedding.
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

        Only blocks ``layer + 1 ..`` run, so an analysis that edits block ``layer``'s output
        resumes here instead of recomputing the layers before it. Hooks on the later blocks
        fire as usual.

        Args:
            resid: ``[batch, pos, d_model]``: the residual stream after block ``layer``.
            layer: A block index: the block whose output ``resid`` is; ``-1`` starts from the
                embeddings (the whole model).

        Returns:
            ``[batch, pos, d_vocab]`` logits, or the final residual stream when the model has no
            unembedding.

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

    def decode(
        self,
        tokens: torch.Tensor,
        *,
        attention_mask: torch.Tensor,
        past: KVCache | None = None,
        keep: bool = True,
        last: bool = True,
    ) -> tuple[torch.Tensor, KVCache | None]:
        """Logits of ``tokens``, the columns after those ``past`` holds (generation's pass).

        No query reads a padding key, and each token's position counts only the real tokens
        before it (as Hugging Face's ``generate`` numbers them). Hooks fire on the new
        columns only; ``hook_pattern`` is ``[batch, head, new, past + new]``.

        Args:
            tokens: ``[batch, new]`` integer ids.
            attention_mask: ``[batch, past + new]``: 1 for real tokens, 0 for left padding.
            past: The :class:`~interp.models.kv_cache.KVCache` of the earlier columns (None:
                these are the first); extended in place.
            keep: Build and return the cache (False: none is built).
            last: Unembed only the last column.

        Returns:
            The logits (``[batch, new, d_vocab]``, or ``[batch, 1, d_vocab]`` with ``last``)
            and the cache extended by these columns' keys and values, taken after ``hook_k``
            / ``hook_v`` (None without ``keep``).

        Example:
            >>> model = AttnOnlyTransformer(AttnOnlyConfig(1, 2, 8, 4, d_vocab=5, n_ctx=8))
            >>> ids = torch.tensor([[0, 1, 2, 3]])
            >>> _, past = model.decode(ids[:, :3], attention_mask=torch.ones(1, 3))
            >>> step, _ = model.decode(ids[:, 3:], attention_mask=torch.ones(1, 4), past=past)
            >>> bool(torch.allclose(step[:, -1], model(ids)[:, -1], atol=1e-6))
            True

        Raises:
            InterpError: for a model without an unembedding, a mask that does not cover the
                cached and new columns, or a position past the context ``n_ctx``.
        """
        if self.unembed is None:
            raise InterpError("this toy model has no unembedding, so it predicts no tokens")
        tokens = self.check_tokens(tokens)
        mask = attention_mask.to(tokens.device).bool()
        held = 0 if past is None else past.length
        if mask.shape != (tokens.shape[0], held + tokens.shape[1]):
            raise InterpError(
                f"attention_mask has shape {tuple(mask.shape)}; it needs one column per cached "
                f"and new token: {(tokens.shape[0], held + tokens.shape[1])}"
            )
        pos = (mask.long().cumsum(-1) - 1).clamp(min=0)[:, held:]  # [batch, new]
        resid = self.hook_embed(self.embed.W_E[tokens])  # [batch, new, d_model]
        if self.pos_embed is not None:
            if int(pos.max()) >= self.cfg.n_ctx:
                raise InterpError(
                    f"position {int(pos.max())} is past the context n_ctx={self.cfg.n_ctx}"
                )
            resid = resid + self.hook_pos_embed(self.pos_embed.W_pos[pos])
        if past is None:
            past = KVCache.empty(self.cfg.n_layers, tokens.shape[0], tokens.device)
        layers = past.layers if keep or held else [None] * len(self.blocks)
        for block, kv in zip(self.blocks, layers):
            resid = block(resid, kv, mask)
        if last:
            resid = resid[:, -1:]
        if self.ln_final is not None:
            resid = self.ln_final(resid)
        logits = resid @ self.unembed.W_U + self.unembed.b_U  # [batch, new or 1, d_vocab]
        return logits, KVCache(past.layers, mask) if keep else None

    def run_with_cache(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """As ``HookedRootModule.run_with_cache``, returning an ``ActivationCache``.

        Args:
            *args: Passed to the forward pass (the tokens first).
            **kwargs: ``names_filter``, ``remove_batch_dim`` and the other options of
                TransformerLens's ``run_with_cache``, and the forward pass's own.

        Returns:
            ``(output, cache)``: the forward pass's output and a TransformerLens
            ``ActivationCache``.
        """
        from transformer_lens.ActivationCache import ActivationCache

        out, cache = super().run_with_cache(*args, **kwargs)
        return out, ActivationCache(cache, self, has_batch_dim=not kwargs.get("remove_batch_dim"))

    # ------------------------------------------------------------- tokens
    def to_tokens(self, text: str | Sequence[str]) -> torch.Tensor:
        """Word-level tokenisation for models built with a ``vocab``: ``[batch, pos]`` ids.

        A string is one sequence (``[1, pos]``); a list of strings is a batch, as
        in TransformerLens (every string must have the same number of words).

        Args:
            text: A sentence of space-separated words, or a list of them.

        Returns:
            ``[batch, pos]`` long ids.

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
        """String labels for one sequence of ids (the id itself when there is no vocab).

        Args:
            tokens: The integer ids of one sequence (any shape; flattened).

        Returns:
            One string per id.
        """
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

        Args:
            bridge: An attention-only ``TransformerBridge`` with LayerNorm and learned
                positions (e.g. one from ``TransformerBridge.boot_native``).

        Returns:
            An :class:`AttnOnlyTransformer` with the bridge's weights.

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
