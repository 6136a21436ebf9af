"""Synthetic token datasets for probing and training heads.

:func:`repeated_tokens` builds the standard induction probe, with the
segment length and its offset varied per sequence::

    [BOS] prefix (p random tokens) | segment S (L tokens) | S again | filler

Within one sequence, prefix and segment tokens are distinct, so each token of
the second copy has exactly one earlier occurrence and the token that followed
it is unambiguous. Varying ``L`` and ``p`` per sequence matters: when every
sequence repeats with the same period, a two-layer model learns to attend to
the fixed offset ``i - L + 1`` by position alone, which scores well on a naive
induction score without any induction mechanism. Held-out evaluation should
use segment lengths not seen in training (:data:`HELD_OUT_LENGTHS`).

Example:
    >>> data = repeated_tokens(4, d_vocab=64, seq_len=48, segment_lengths=(6, 12), seed=0)
    >>> data.tokens.shape, data.predictable.shape
    (torch.Size([4, 48]), torch.Size([4, 48]))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from interp.core.checks import check_int
from interp.core.errors import InterpError

BOS = 0
# Segment lengths used for training vs held-out evaluation of the induction model.
TRAIN_LENGTHS = (4, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18)
HELD_OUT_LENGTHS = (8, 12, 16)


@dataclasses.dataclass(frozen=True)
class RepeatedTokens:
    """A batch of repeated-segment sequences and where their structure lies.

    Made by :func:`repeated_tokens` and :func:`repeated_random_tokens`.

    Attributes:
        tokens: ``[batch, pos]`` integer ids.
        predictable: ``[batch, pos]`` bool: the token is predictable by copying (the second
            copy of the segment, from its second token on).
        segment_len: ``[batch]``: each sequence's segment length ``L``.
        first_start: ``[batch]``: the position of ``S[0]`` in the first copy.
        second_start: ``[batch]``: the position of ``S[0]`` in the second copy.
        loss_mask: ``[batch, pos]`` bool, True at positions whose *next* token is
            predictable (the ``loss_mask`` the analyses take).
        first_half_mask: ``[batch, pos]`` bool, True at positions predicting first-copy
            tokens ``S[1:]``.
    """

    tokens: torch.Tensor  # [batch, pos] long
    predictable: torch.Tensor  # [batch, pos] bool: token predictable by copying (2nd copy, k >= 1)
    segment_len: torch.Tensor  # [batch]
    first_start: torch.Tensor  # [batch]: position of S[0] in the first copy
    second_start: torch.Tensor  # [batch]: position of S[0] in the second copy

    @property
    def loss_mask(self) -> torch.Tensor:
        """``[batch, pos]`` bool, True at positions whose *next* token is predictable."""
        mask = torch.zeros_like(self.predictable)
        mask[:, :-1] = self.predictable[:, 1:]
        return mask

    @property
    def first_half_mask(self) -> torch.Tensor:
        """``[batch, pos]`` bool, True at positions predicting first-copy tokens S[1:]."""
        pos = torch.arange(self.tokens.shape[1])[None]
        start, L = self.first_start[:, None], self.segment_len[:, None]
        return (pos >= start) & (pos < start + L - 1)

    def __len__(self) -> int:
        return int(self.tokens.shape[0])


def _check_lengths(segment_lengths: Sequence[int] | tuple[int, int]) -> list[int]:
    lengths = list(segment_lengths)
    if not lengths or any(not isinstance(n, int) or n < 2 for n in lengths):
        raise InterpError(f"segment lengths must be integers >= 2, got {segment_lengths!r}")
    return lengths


def repeated_seq_lens(
    d_vocab: int,
    *,
    segment_lengths: Sequence[int] = TRAIN_LENGTHS,
    bos: int | None = BOS,
) -> tuple[int, int]:
    """The shortest and longest ``seq_len`` :func:`repeated_tokens` can draw for a vocabulary.

    With the default ``max_prefix``, the longest segment must fit twice, and a sequence's
    prefix and segment must not run out of distinct tokens.

    Args:
        d_vocab: the vocabulary size.
        segment_lengths: the segment lengths drawn from.
        bos: the BOS id, or ``None``.

    Returns:
        ``(shortest, longest)``; the range is empty (shortest > longest) when the vocabulary
        is too small for any.

    Example:
        >>> repeated_seq_lens(64)
        (37, 54)

    Raises:
        InterpError: segment lengths that are not integers >= 2, or a vocabulary below 2.
    """
    lengths = _check_lengths(segment_lengths)
    d_vocab = check_int(d_vocab, "d_vocab", minimum=2)
    start0 = 0 if bos is None else 1
    content = d_vocab - (0 if bos is None else 1)
    return start0 + 2 * max(lengths), content + start0 + 2 * min(lengths) - max(lengths)


def repeated_tokens(
    n: int,
    *,
    d_vocab: int,
    seq_len: int,
    segment_lengths: Sequence[int] = TRAIN_LENGTHS,
    max_prefix: int | None = None,
    repeats: int | None = 2,
    bos: int | None = BOS,
    seed: int | None = 0,
    generator: torch.Generator | None = None,
) -> RepeatedTokens:
    """Random sequences in which a random-length segment repeats after a random prefix.

    ``[BOS] prefix (p random tokens) | segment S (L tokens) | S again | filler``, with ``L``
    and ``p`` drawn per sequence and the prefix and segment tokens of a sequence distinct
    (module docstring: why both must vary).

    Args:
        n: Number of sequences (at least 1).
        d_vocab: Vocabulary size; content tokens are drawn from ``[1, d_vocab)``
            when a BOS id of 0 is used, else from ``[0, d_vocab)``.
        seq_len: Total length including BOS; the tail after the second copy is
            random filler (not marked predictable).
        segment_lengths: The lengths ``L`` to draw from, uniformly per sequence (integers
            >= 2; default :data:`TRAIN_LENGTHS`).
        max_prefix: Largest prefix ``p`` (default: as long as fits, per sequence,
            for that sequence's segment length).
        repeats: How many copies of the segment (2: the classic probe, random
            filler after); ``None`` repeats it until the sequence ends (the last
            copy may be cut short), which gives training a denser signal.
        bos: BOS token id prepended at position 0, or ``None`` for no BOS.
        seed: Every random draw, from a private generator; the same seed gives the same
            numbers (``None`` is 0; ignored when ``generator`` is given).
        generator: A ``torch.Generator`` to draw from instead (a training loop's own, so
            that successive batches differ).

    Returns:
        A :class:`RepeatedTokens`.

    Example:
        >>> data = repeated_tokens(4, d_vocab=64, seq_len=48, segment_lengths=(6, 12), seed=0)
        >>> data.tokens.shape, data.predictable.shape
        (torch.Size([4, 48]), torch.Size([4, 48]))

    Raises:
        InterpError: for ``n < 1``, ``repeats < 2``, segment lengths that are not integers
            >= 2, a BOS outside the vocabulary, a segment that does not fit twice in
            ``seq_len``, or distinct tokens that would run out (``p + L`` must be below
            the vocabulary).
    """
    if n < 1:
        raise InterpError(f"need at least one sequence, got n={n}")
    if repeats is not None and repeats < 2:
        raise InterpError(f"repeats must be >= 2 (or None to fill), got {repeats}")
    lengths = _check_lengths(segment_lengths)
    start0 = 0 if bos is None else 1
    content = list(range(d_vocab))
    if bos is not None:
        if not 0 <= bos < d_vocab:
            raise InterpError(f"bos id {bos} outside the vocabulary [0, {d_vocab})")
        content.remove(bos)
    longest = max(lengths)
    room = seq_len - start0 - 2 * longest
    if room < 0:
        raise InterpError(
            f"segment length {longest} does not fit twice in seq_len={seq_len} "
            f"(needs {2 * longest + start0}); shorten segments or lengthen sequences"
        )
    cap = seq_len - start0 - 2 * min(lengths) if max_prefix is None else max_prefix
    if min(cap, seq_len - start0 - 2 * min(lengths)) + longest > len(content):
        raise InterpError(
            f"prefix + segment (up to {cap} + {longest}) must not exceed the "
            f"{len(content)} distinct content tokens; lower max_prefix or enlarge d_vocab"
        )
    gen = generator or torch.Generator().manual_seed(0 if seed is None else seed)
    content_t = torch.tensor(content)
    tokens = content_t[torch.randint(len(content), (n, seq_len), generator=gen)]
    predictable = torch.zeros(n, seq_len, dtype=torch.bool)
    L = torch.tensor(lengths)[torch.randint(len(lengths), (n,), generator=gen)]
    # Each sequence's prefix fits its own segment, so copies can end anywhere in the context.
    room_b = torch.clamp(seq_len - start0 - 2 * L, max=cap)
    prefix = (torch.rand(n, generator=gen) * (room_b + 1)).floor().long()
    for b in range(n):
        p, seg = int(prefix[b]), int(L[b])
        distinct = content_t[torch.randperm(len(content), generator=gen)[: p + seg]]
        s1 = start0 + p
        tokens[b, start0:s1] = distinct[:p]
        tokens[b, s1 : s1 + seg] = distinct[p:]
        n_copies = repeats if repeats is not None else -(-(seq_len - s1) // seg)
        for c in range(1, n_copies):
            lo, hi = s1 + c * seg, min(s1 + (c + 1) * seg, seq_len)
            tokens[b, lo:hi] = distinct[p : p + hi - lo]
        end = min(s1 + n_copies * seg, seq_len)
        predictable[b, s1 + seg + 1 : end] = True
        if n_copies > 2:  # from the third copy on, S[0] is predictable too
            predictable[b, s1 + 2 * seg : end] = True
    if bos is not None:
        tokens[:, 0] = bos
    first = start0 + prefix
    return RepeatedTokens(
        tokens=tokens,
        predictable=predictable,
        segment_len=L,
        first_start=first,
        second_start=first + L,
    )


def training_sequences(n: int, *, d_vocab: int, seq_len: int, seed: int = 0) -> torch.Tensor:
    """``n`` sequences of the induction model's training distribution.

    BOS, then random segments of :data:`TRAIN_LENGTHS`, each shown twice, until ``seq_len``
    is full: what ``interp train dictionary --corpus repeated`` trains on.

    Example:
        >>> training_sequences(2, d_vocab=64, seq_len=48, seed=0).shape
        torch.Size([2, 48])

    Args:
        n: Sequences.
        d_vocab: The vocabulary size.
        seq_len: Tokens per sequence.
        seed: Every random draw; the same seed gives the same numbers.

    Returns:
        ``[n, seq_len]`` token ids.

    Raises:
        InterpError: as :func:`repeated_tokens`.
    """
    return repeated_tokens(
        n, d_vocab=d_vocab, seq_len=seq_len, segment_lengths=TRAIN_LENGTHS, repeats=None,
        seed=seed,
    ).tokens  # fmt: skip


def repeated_random_tokens(
    n: int,
    half_len: int,
    *,
    d_vocab: int,
    bos: int | None = BOS,
    seed: int = 0,
    token_ids: torch.Tensor | None = None,
) -> RepeatedTokens:
    """The classic probe: BOS, ``half_len`` random tokens, the same tokens again.

    Tokens in each half are drawn with replacement, as in the ARENA and
    TransformerLens probes (so occasional repeats inside a half exist), from
    the whole vocabulary or, with ``token_ids``, from those ids only (e.g.
    :func:`interp.analysis.senses.words.ordinary_word_ids`: real models behave
    oddly on unused and special tokens).

    Args:
        n: Number of sequences.
        half_len: Length of the random half that repeats (at least 2).
        d_vocab: Vocabulary size; tokens are drawn from ``[1, d_vocab)`` with a BOS id of 0,
            else from ``[0, d_vocab)`` without the BOS id.
        bos: BOS token id prepended at position 0, or ``None`` for no BOS.
        seed: Every random draw; the same seed gives the same numbers.
        token_ids: Ids to draw from instead of the whole vocabulary (any shape; BOS is
            dropped from them).

    Returns:
        A :class:`RepeatedTokens` of ``[n, 1 + 2 * half_len]`` tokens (``2 * half_len``
        without BOS); ``predictable`` marks the second half from its second token on.

    Example:
        >>> data = repeated_random_tokens(2, 4, d_vocab=10, seed=0)
        >>> data.tokens.shape, bool((data.tokens[:, 1:5] == data.tokens[:, 5:]).all())
        (torch.Size([2, 9]), True)

    Raises:
        InterpError: for ``half_len < 2``, a BOS outside the vocabulary, or
            ``token_ids`` that are empty or outside the vocabulary.
    """
    n = check_int(n, "n", minimum=1)
    half_len = check_int(half_len, "half_len")
    if half_len < 2:
        raise InterpError(f"half_len must be >= 2, got {half_len}")
    d_vocab = check_int(d_vocab, "d_vocab", minimum=2)
    if bos is not None and not 0 <= check_int(bos, "bos") < d_vocab:
        raise InterpError(f"bos {bos} is outside the vocabulary [0, {d_vocab})")
    gen = torch.Generator().manual_seed(seed)
    if token_ids is not None:
        ids = torch.as_tensor(token_ids, dtype=torch.long).flatten()
        if bos is not None:
            ids = ids[ids != bos]
        if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= d_vocab:
            raise InterpError(f"token_ids must be non-empty ids in [0, {d_vocab}) besides BOS")
        half = ids[torch.randint(ids.numel(), (n, half_len), generator=gen)]
    else:
        lo = 1 if bos == 0 else 0
        half = torch.randint(lo, d_vocab, (n, half_len), generator=gen)
        if bos is not None and bos != 0:
            half = torch.where(half == bos, (half + 1) % d_vocab, half)
    parts = [half, half]
    start0 = 0
    if bos is not None:
        parts.insert(0, torch.full((n, 1), bos))
        start0 = 1
    tokens = torch.cat(parts, dim=1)
    predictable = torch.zeros_like(tokens, dtype=torch.bool)
    predictable[:, start0 + half_len + 1 :] = True
    first = torch.full((n,), start0)
    return RepeatedTokens(
        tokens=tokens,
        predictable=predictable,
        segment_len=torch.full((n,), half_len),
        first_start=first,
        second_start=first + half_len,
    )
