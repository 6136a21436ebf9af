"""Real text on every machine, offline: the Python standard library's own source files.

The ``.py`` files of the running interpreter's standard library (code, comments and
docstrings; about 30 MB on CPython 3.11) are English and Python, in distribution for
code-trained models such as SmolLM2, and need no download. The selection is fixed: files
are ordered by the SHA-256 of their path relative to the library (so the order does not
depend on the machine or the file system), every tenth by that hash is held out as the
``'test'`` split, and files are read in that order until enough tokens are collected.
Tests (``test/``, ``idle_test``, ``tests``) and ``site-packages`` are left out.

Text is tokenized with the model's tokenizer; a model without one (our attention-only
models) gets a character-level fallback: the ``d_vocab - 1`` most frequent characters of
the files read, by frequency then code point, each one id, every other character the last
id. The ids are cut into sequences of ``seq_len`` tokens, each starting with the model's
BOS id.

Example:
    >>> from interp.models import load_model
    >>> corpus = python_text(load_model("induction-2l"), n_sequences=4, seq_len=16)
    >>> corpus.tokens.shape, corpus.tokenizer, corpus.name
    (torch.Size([4, 16]), 'characters', 'python-stdlib')
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import platform
import sysconfig
from pathlib import Path
from typing import Any

import torch

from interp.core.checks import check_int
from interp.core.errors import InterpError
from interp.core.protocol import HookedModel, bos_token_id, model_cfg

SKIP_PARTS = {"site-packages", "test", "tests", "idle_test", "__pycache__"}
SPLITS = ("train", "test")


@dataclasses.dataclass(frozen=True)
class TextCorpus:
    """Sequences of a real text corpus, and where they came from.

    Attributes:
        tokens: ``[n_sequences, seq_len]`` integer ids, each row starting with BOS.
        name: the corpus (``'python-stdlib'``).
        split: ``'train'`` or ``'test'``.
        files: the files read, relative to ``root``, in order.
        root: the standard library's folder.
        n_tokens: ids in ``tokens``.
        tokenizer: ``'model'`` or ``'characters'``.
        python_version: the interpreter whose library it is.
    """

    tokens: torch.Tensor
    name: str
    split: str
    files: tuple[str, ...]
    root: str
    n_tokens: int
    tokenizer: str
    python_version: str

    def attrs(self) -> dict[str, Any]:
        """What a report records of the corpus (everything but the tokens).

        Returns:
            A JSON-ready dict.
        """
        out = {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "tokens"
        }
        out["files"] = list(self.files)
        out["n_files"] = len(self.files)
        return out


def stdlib_files(split: str = "train") -> tuple[Path, list[str]]:
    """The standard library's folder and its source files of ``split``, in the fixed order.

    Args:
        split: ``'train'`` (nine files in ten) or ``'test'`` (the rest).

    Returns:
        The folder and the files' paths relative to it.

    Raises:
        InterpError: an unknown split, or a library with no source files.
    """
    if split not in SPLITS:
        raise InterpError(f"split must be one of {SPLITS}, got {split!r}")
    root = Path(sysconfig.get_paths()["stdlib"])
    rel = [
        p.relative_to(root).as_posix()
        for p in root.rglob("*.py")
        if not SKIP_PARTS & set(p.relative_to(root).parts)
    ]
    if not rel:
        raise InterpError(f"no .py files under {root}: this Python ships no library sources")
    keyed = sorted((hashlib.sha256(r.encode()).hexdigest(), r) for r in rel)
    held_out = {r for h, r in keyed if int(h, 16) % 10 == 0}
    return root, [r for _, r in keyed if (r in held_out) == (split == "test")]


def _char_ids(texts: list[str], d_vocab: int) -> list[int]:
    counts = collections.Counter("".join(texts))
    ranked = sorted(counts, key=lambda c: (-counts[c], ord(c)))[: d_vocab - 1]
    first = 1 if d_vocab > 1 else 0  # 0 is BOS for our models
    table = {c: min(first + i, d_vocab - 1) for i, c in enumerate(ranked)}
    return [table.get(c, d_vocab - 1) for c in "".join(texts)]


def python_text(
    model: HookedModel,
    *,
    n_sequences: int,
    seq_len: int,
    split: str = "train",
) -> TextCorpus:
    """Sequences of the Python standard library's source, tokenized for ``model``.

    Args:
        model: a hooked model: ``cfg``, ``run_with_cache``, ``run_with_hooks``, weights
            (its tokenizer, ``d_vocab`` and BOS id are used).
        n_sequences: how many sequences.
        seq_len: tokens per sequence, BOS included (at least 2).
        split: ``'train'`` or ``'test'`` (disjoint files).

    Returns:
        A :class:`TextCorpus`.

    Raises:
        InterpError: no model, a bad count or length, one longer than the model's
            context, or a library too small for the request.
    """
    cfg = model_cfg(model)
    n = check_int(n_sequences, "n_sequences", minimum=1)
    L = check_int(seq_len, "seq_len", minimum=2)
    n_ctx = getattr(cfg, "n_ctx", None)
    if n_ctx is not None and L > n_ctx:
        raise InterpError(f"seq_len={L} exceeds the model's context n_ctx={n_ctx}")
    root, files = stdlib_files(split)
    tok = getattr(model, "tokenizer", None)
    need = n * (L - 1)
    ids: list[int] = []
    texts: list[str] = []
    used: list[str] = []
    for rel in files:
        text = (root / rel).read_text(encoding="utf-8", errors="replace")
        used.append(rel)
        if tok is not None:
            ids.extend(tok(text, add_special_tokens=False, verbose=False)["input_ids"])
        else:
            texts.append(text)
            ids.extend([0] * len(text))  # counted now, mapped to characters below
        if len(ids) >= need:
            break
    if len(ids) < need:
        raise InterpError(
            f"the {split} split holds {len(ids):,} tokens, fewer than {n} x {L - 1}: ask for "
            "fewer or shorter sequences"
        )
    if tok is None:
        ids = _char_ids(texts, int(cfg.d_vocab))
    body = torch.tensor(ids[:need], dtype=torch.long).view(n, L - 1)
    bos = torch.full((n, 1), bos_token_id(model), dtype=torch.long)
    tokens = torch.cat([bos, body], dim=1)
    return TextCorpus(
        tokens=tokens,
        name="python-stdlib",
        split=split,
        files=tuple(used),
        root=str(root),
        n_tokens=int(tokens.numel()),
        tokenizer="model" if tok is not None else "characters",
        python_version=platform.python_version(),
    )
