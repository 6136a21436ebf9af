"""The article's trainable one-head sense classifier, with TransformerLens hook names.

:class:`OneHeadSense`: embedding, one head, a linear classifier reading the mixture at the
final position. Its parameters are created in the article's order, so
``torch.manual_seed(0)`` reproduces the article's run. (It lived in
:mod:`interp.models.toy`, which still exports it.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from transformer_lens.hook_points import HookPoint
from transformer_lens.HookedRootModule import HookedRootModule

from interp.core.errors import InterpError
from interp.models.attn_only import AttnOnlyConfig, words_to_ids


class _SenseAttn(nn.Module):
    """Hook points of OneHeadSense's head (its weights stay on the parent, article-style)."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_q = HookPoint()  # [batch, pos, head, d_head]
        self.hook_k = HookPoint()
        self.hook_v = HookPoint()
        self.hook_attn_scores = HookPoint()  # [batch, head, query_pos, key_pos]
        self.hook_pattern = HookPoint()
        self.hook_z = HookPoint()  # [batch, pos, head, d_head]


class _SenseBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hook_resid_pre = HookPoint()
        self.attn = _SenseAttn()
        self.hook_attn_out = HookPoint()
        self.hook_resid_post = HookPoint()


class OneHeadSense(HookedRootModule):
    """The article's one-head sense classifier, with TransformerLens hook names.

    Embedding ``[vocab_size, d]``, one head with ``d x d`` query, key and value
    maps (no output projection, no residual, no positions), and a linear
    classifier over two senses reading the mixture at the final position. With
    the four-word vocabulary and ``d=8`` it has ``4*8 + 3*8*8 + (8*2+2) = 242``
    parameters. Its parameters are created in the article's order, so
    ``torch.manual_seed(0)`` reproduces the article's run.

    ``forward(ids)`` accepts ``[pos]`` (returns logits ``[n_classes]``, as in the
    article) or ``[batch, pos]`` (returns ``[batch, n_classes]``).

    Args:
        vocab_size: How many token ids.
        d: The embedding and head width (default 8).
        n_classes: How many senses the classifier tells apart (default 2).
        vocab: A word per id, so :meth:`encode` and ``to_tokens`` take text (``None``:
            ids only).
        causal: Causal attention (default ``False``: bidirectional, as in the article).

    Example:
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> model = OneHeadSense(4)
        >>> sum(p.numel() for p in model.parameters())
        242

    Raises:
        InterpError: for a ``vocab`` whose length is not ``vocab_size``, and on forward,
            for ids outside the vocabulary or an empty sentence.
    """

    def __init__(
        self,
        vocab_size: int,
        d: int = 8,
        *,
        n_classes: int = 2,
        vocab: Sequence[str] | None = None,
        causal: bool = False,
    ):
        super().__init__()
        if vocab is not None and len(vocab) != vocab_size:
            raise InterpError(f"vocab has {len(vocab)} words but vocab_size is {vocab_size}")
        # Creation order matters: it fixes which random numbers each weight draws.
        self.emb = nn.Embedding(vocab_size, d)
        self.Wq, self.Wk, self.Wv = (nn.Linear(d, d, bias=False) for _ in range(3))
        self.cls = nn.Linear(d, n_classes)
        self.d = d
        self.hook_embed = HookPoint()  # [batch, pos, d_model]
        self.blocks = nn.ModuleList([_SenseBlock()])
        self.cfg = AttnOnlyConfig(
            n_layers=1,
            n_heads=1,
            d_model=d,
            d_head=d,
            d_vocab=vocab_size,
            n_ctx=None,
            normalization_type=None,
            positional_embedding_type="none",
            attention_dir="causal" if causal else "bidirectional",
            use_residual=False,
            use_W_O=False,
            use_unembed=True,
            vocab=tuple(vocab) if vocab is not None else None,
            model_name="one-head-sense",
        )
        self.setup()

    def encode(self, tokens: str | Sequence[str]) -> torch.Tensor:
        """Word ids ``[pos]`` for a sentence (needs ``vocab``).

        Args:
            tokens: A sentence of space-separated words, or a list of words.

        Returns:
            ``[pos]`` long ids.

        Raises:
            InterpError: if the classifier has no vocab, or a word is not in it.
        """
        if self.cfg.vocab is None:
            raise InterpError("this classifier was built without a vocab; pass ids")
        return words_to_ids(tokens, self.cfg.vocab)

    def to_tokens(self, text: str | Sequence[str]) -> torch.Tensor:
        """``[1, pos]`` ids of one sentence, as TransformerLens's ``to_tokens`` shapes them.

        Args:
            text: A sentence of space-separated words, or a list of words.

        Returns:
            ``[1, pos]`` long ids.

        Raises:
            InterpError: as :meth:`encode`.
        """
        return self.encode(text)[None]

    def to_str_tokens(self, tokens: torch.Tensor | Sequence[int]) -> list[str]:
        """String labels for one sequence of ids (the id itself when there is no vocab).

        Args:
            tokens: The integer ids of one sequence (any shape; flattened).

        Returns:
            One string per id.
        """
        ids = torch.as_tensor(tokens).flatten().tolist()
        return [self.cfg.vocab[i] for i in ids] if self.cfg.vocab else [str(i) for i in ids]

    def forward(self, ids: torch.Tensor, return_attn: bool = False) -> Any:
        """The sense logits of each sentence, read from the mixture at its final position.

        Args:
            ids: ``[pos]`` (one sentence) or ``[batch, pos]`` integer ids.
            return_attn: Also return the head's attention pattern (default ``False``).

        Returns:
            Logits ``[n_classes]`` (``[batch, n_classes]`` for a batch); with ``return_attn``,
            ``(logits, pattern)`` with the pattern ``[query_pos, key_pos]`` (``[batch,
            query_pos, key_pos]``).

        Raises:
            InterpError: for an empty sentence or ids outside the vocabulary.
        """
        unbatched = ids.ndim == 1
        ids = ids[None] if unbatched else ids
        if ids.numel() == 0:
            raise InterpError("empty sentence: pass at least one token id")
        if int(ids.min()) < 0 or int(ids.max()) >= self.cfg.d_vocab:
            raise InterpError(f"token id outside the vocabulary [0, {self.cfg.d_vocab})")
        X = self.hook_embed(self.emb(ids))  # [batch, pos, d]
        block = self.blocks[0]
        X = block.hook_resid_pre(X)
        attn = block.attn
        Q = attn.hook_q(self.Wq(X)[:, :, None])[:, :, 0]  # [batch, pos, d]
        K = attn.hook_k(self.Wk(X)[:, :, None])[:, :, 0]
        V = attn.hook_v(self.Wv(X)[:, :, None])[:, :, 0]
        scores = Q @ K.transpose(-1, -2) / self.d**0.5  # [batch, query_pos, key_pos]
        if self.cfg.causal:
            n = scores.shape[-1]
            future = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
            scores = scores.masked_fill(future, float("-inf"))
        scores = attn.hook_attn_scores(scores[:, None])  # [batch, head, query_pos, key_pos]
        A = attn.hook_pattern(torch.softmax(scores, dim=-1))
        H = attn.hook_z((A[:, 0] @ V)[:, :, None])[:, :, 0]  # [batch, pos, d]
        H = block.hook_resid_post(block.hook_attn_out(H))
        logits = self.cls(H[:, -1])  # [batch, n_classes]
        if unbatched:
            logits, A = logits[0], A[0, 0]
        else:
            A = A[:, 0]
        return (logits, A) if return_attn else logits

    def run_with_cache(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """As ``HookedRootModule.run_with_cache``, returning an ``ActivationCache``.

        Args:
            *args: Passed to the forward pass (the ids first).
            **kwargs: ``names_filter`` and the other options of TransformerLens's
                ``run_with_cache``, and the forward pass's own.

        Returns:
            ``(output, cache)``: the forward pass's output and a TransformerLens
            ``ActivationCache``.
        """
        from transformer_lens.ActivationCache import ActivationCache

        out, cache = super().run_with_cache(*args, **kwargs)
        return out, ActivationCache(cache, self)

    # TransformerLens-shaped weights, [n_layers=1, n_heads=1, ...].
    @property
    def W_E(self) -> torch.Tensor:  # [d_vocab, d_model]
        return self.emb.weight

    @property
    def W_Q(self) -> torch.Tensor:  # [1, 1, d_model, d_head]
        return self.Wq.weight.T[None, None]

    @property
    def W_K(self) -> torch.Tensor:
        return self.Wk.weight.T[None, None]

    @property
    def W_V(self) -> torch.Tensor:
        return self.Wv.weight.T[None, None]

    @property
    def W_O(self) -> torch.Tensor:  # identity: no output projection
        return torch.eye(self.d, dtype=self.emb.weight.dtype)[None, None]

    @property
    def W_U(self) -> torch.Tensor:  # [d_model, n_classes]
        return self.cls.weight.T

    @property
    def b_U(self) -> torch.Tensor:
        return self.cls.bias

    def parameter_groups(self) -> dict[str, int]:
        """Parameter count per group: embedding, W_Q, W_K, W_V, classifier.

        Returns:
            ``{group: number of parameters}``, in that order.
        """
        return {
            "embedding": self.emb.weight.numel(),
            "W_Q": self.Wq.weight.numel(),
            "W_K": self.Wk.weight.numel(),
            "W_V": self.Wv.weight.numel(),
            "classifier": sum(p.numel() for p in self.cls.parameters()),
        }
