"""Find a word's tokens in a sentence, for models with a real (Hugging Face) tokenizer.

A word is matched as a whole word, case-insensitively, in the text; its tokens
are the ones whose character spans overlap it (the tokenizer's offset
mapping), so a word that splits into several tokens (``moneylender`` ->
``money``, ``l``, ``ender``) is found too. Analyses read the word at its
**last** token: in a causal model that is the first position that has seen
the whole word.

Example:
    >>> from interp.models.hf import random_gpt2
    >>> model = random_gpt2(2, vocab=30)  # word-level tokens t0 .. t29
    >>> w = encode_word(model, "t5 t7 t9 t3", word="t9", clue="t5")
    >>> w.str_tokens[w.word_pos], w.word_pos, w.clue_pos
    ('t9', 3, (1,))
"""

from __future__ import annotations

import dataclasses
import re

import torch

from interp.core.checks import check_int
from interp.core.errors import InterpError
from interp.core.protocol import HookedModel, check_model, is_causal, model_n_ctx


@dataclasses.dataclass(frozen=True)
class WordTokens:
    """One sentence's tokens with the positions of its target word and clue word.

    Made by :func:`encode_word`.

    Attributes:
        text: The sentence.
        word: The target word, as asked for.
        tokens: ``[1, pos]`` integer ids, as ``model.to_tokens(text)`` gives them.
        word_pos: The target word's last token (the first position that has seen it all).
        word_positions: All the target word's tokens.
        clue_pos: The clue's tokens (empty when no clue was asked for).
        str_tokens: Each token as a string.
        truncated: Whether the text was cut to the model's context.
        n_tokens: How many tokens (``pos``).
    """

    text: str
    word: str
    tokens: torch.Tensor  # [1, pos]
    word_pos: int
    word_positions: tuple[int, ...]
    clue_pos: tuple[int, ...]
    str_tokens: tuple[str, ...]
    truncated: bool = False

    @property
    def n_tokens(self) -> int:
        return int(self.tokens.shape[1])


def _spans(text: str, word: str) -> list[tuple[int, int]]:
    if not word or not word.strip():
        raise InterpError("the word to find is empty")
    pattern = r"(?<!\w)" + re.escape(word.strip()) + r"(?!\w)"
    return [m.span() for m in re.finditer(pattern, text, flags=re.IGNORECASE)]


def _token_positions(offsets: list[tuple[int, int]], span: tuple[int, int]) -> list[int]:
    start, end = span
    return [i for i, (a, b) in enumerate(offsets) if b > a and a < end and b > start]


def encode_word(
    model: HookedModel,
    text: str,
    *,
    word: str,
    clue: str | None = None,
    occurrence: int = -1,
    truncate: bool = False,
) -> WordTokens:
    """Tokenize ``text`` as ``model.to_tokens`` does and locate ``word`` (and ``clue``) in it.

    A word is matched as a whole word, case-insensitively; its tokens are the ones whose
    character spans overlap it (the tokenizer's offset mapping), so a word that splits into
    several tokens is found too. The clue is its nearest match before the word; a causal
    model must have one (it cannot see a later clue), a bidirectional model may use the
    first match after the word instead.

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``), with a fast Hugging Face tokenizer. It is not
            run.
        text: The sentence.
        word: The target word to find.
        clue: A clue word to find too (``None``: none).
        occurrence: Which match of ``word`` to use, as a list index (default ``-1``, the
            last).
        truncate: Keep the first ``n_ctx`` tokens of text longer than the model's context
            (still an error if the word or the clue would be cut off); default ``False``,
            an error.

    Returns:
        A :class:`WordTokens`.

    Raises:
        InterpError: for a model without a fast tokenizer, empty text or an empty word, a
            word or clue that does not occur in the text (naming it), an occurrence that
            does not exist, a clue after the word in a causal model, text longer than the
            context without ``truncate`` (or a word or clue that truncation cuts off), or a
            tokenizer whose ids differ from ``model.to_tokens``.
    """
    check_model(model)
    tok = getattr(model, "tokenizer", None)
    if tok is None or not getattr(tok, "is_fast", False):
        raise InterpError(
            "finding words needs a model with a fast Hugging Face tokenizer "
            "(interp.models.load_model gives one)"
        )
    if not isinstance(text, str) or not text.strip():
        raise InterpError("text must be a non-empty string")
    occurrence = check_int(occurrence, "occurrence")
    spans = _spans(text, word)
    if not spans:
        raise InterpError(f"the word {word!r} does not occur in the sentence {text!r}")
    try:
        span = spans[occurrence]
    except IndexError:
        raise InterpError(
            f"the word {word!r} occurs {len(spans)} time(s) in {text!r}; "
            f"occurrence {occurrence} does not exist"
        ) from None
    enc = tok(text, return_offsets_mapping=True)
    n_ctx = model_n_ctx(model)
    truncated = n_ctx is not None and len(enc["input_ids"]) > n_ctx
    if truncated:
        if not truncate:
            raise InterpError(
                f"the text is {len(enc['input_ids'])} tokens, longer than the model's context "
                f"of {n_ctx}; shorten it or pass truncate=True to keep the first n_ctx tokens"
            )
        enc = tok(text, return_offsets_mapping=True, truncation=True, max_length=n_ctx)
    ids, offsets = list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
    reference = model.to_tokens(text)[0].tolist() if hasattr(model, "to_tokens") else ids
    if reference != ids:
        raise InterpError(
            "the tokenizer's ids differ from model.to_tokens(text) for this text; "
            "cannot map characters to positions reliably"
        )
    cut = f"truncating to {n_ctx} tokens cuts off {{!r}}; shorten the text instead"
    positions = _token_positions(offsets, span)
    if truncated and max(b for _, b in offsets) < span[1]:
        positions = []  # the word is (partly) beyond the kept tokens
    if not positions:
        raise InterpError(cut.format(word) if truncated else f"no token covers {word!r}")
    clue_positions: list[int] = []
    if clue is not None:
        causal = is_causal(model)
        found = [c for c in _spans(text, clue) if c[1] <= span[0] or c[0] >= span[1]]
        if not found:
            raise InterpError(f"the clue {clue!r} does not occur in {text!r} (apart from the word)")
        before = [c for c in found if c[1] <= span[0]]
        if causal and not before:
            raise InterpError(
                f"the clue {clue!r} comes after the word {word!r} in {text!r}; a causal model "
                "only sees the left context, so put the clue before the word"
            )
        # the nearest occurrence: the last one before the word, else the first after it
        clue_positions = _token_positions(offsets, before[-1] if before else found[0])
        if not clue_positions:
            raise InterpError(cut.format(clue))
    str_tokens = tuple(model.to_str_tokens(torch.tensor(ids)))
    return WordTokens(
        text=text,
        word=word,
        tokens=torch.tensor([ids], dtype=torch.long),
        word_pos=positions[-1],
        word_positions=tuple(positions),
        clue_pos=tuple(clue_positions),
        str_tokens=str_tokens,
        truncated=truncated,
    )


def ordinary_word_ids(model: HookedModel, *, min_chars: int = 3) -> torch.Tensor:
    """``[n]`` ids of the tokenizer's ordinary word tokens: ASCII letters only, no specials.

    A leading space marker (``Ġ``, ``▁`` or a space) is allowed; word pieces
    (``##ing``), bytes, digits, punctuation and unused or special tokens are
    not. Random probes drawn from these ids stay in the distribution real
    models were trained on; MiniLM, for one, shows its previous-token head
    only on such tokens.

    Args:
        model: A hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (``interp.core.protocol.HookedModel``), with a tokenizer. It is not run.
        min_chars: The fewest letters a word token has, its space marker aside (default 3).

    Returns:
        ``[n]`` integer ids, ascending.

    Raises:
        InterpError: for a model without a tokenizer, or a vocabulary with no such tokens.
    """
    check_model(model)
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        raise InterpError("this model has no tokenizer; pass token ids explicitly")
    special = set(getattr(tok, "all_special_ids", []) or [])
    pieces = tok.convert_ids_to_tokens(list(range(int(model.cfg.d_vocab))))
    ids = []
    for i, piece in enumerate(pieces):
        if piece is None or i in special:
            continue
        word = piece.lstrip("Ġ▁ ")
        if len(word) >= min_chars and word.isascii() and word.isalpha():
            ids.append(i)
    if not ids:
        raise InterpError("the tokenizer has no ordinary word tokens")
    return torch.tensor(ids)
