"""Indirect-object (name-mover) prompts: templates filled with names, each beside a corrupted twin.

Example:
    >>> len(name_mover_templates("train")) > 0 and len(first_names()) > 10
    True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from interp.core.checks import check_int, check_seed
from interp.core.errors import InterpError
from interp.core.paths import data_dir
from interp.models.pretrained import smollm2_tokenizer

NAME_MOVER_TEMPLATES = "name_mover_templates.csv"
FIRST_NAMES = "first_names.txt"
SPLITS = ("train", "held_out")


@dataclasses.dataclass(frozen=True)
class NameMoverPrompts:
    """Indirect-object prompts, each clean beside a corrupted one of the same length.

    Clean: "When Mary and John went to the store, John gave a drink to" (answer
    the indirect object, `` Mary``). Corrupted: the same prompt with the
    second subject replaced by the indirect object ("..., Mary gave a drink
    to"), so the answer becomes `` John``. The logit difference
    ``logit[io] - logit[s]`` is positive on a clean prompt a model solves, and
    negative on its corrupted twin. Made by :func:`name_mover_prompts`.

    Attributes:
        clean: ``[n, pos]`` integer ids of the clean prompts.
        corrupted: ``[n, pos]`` integer ids of their corrupted twins.
        io_ids: ``[n]``: the indirect object's token (the clean answer).
        s_ids: ``[n]``: the subject's token (the corrupted answer).
        io_pos: ``[n]``: the position of the indirect object's name.
        s1_pos: ``[n]``: the position of the subject's first occurrence.
        s2_pos: ``[n]``: the position of the subject's second occurrence.
        texts: The clean prompts as text.
        corrupted_texts: The corrupted prompts as text.
        templates: The template each prompt was filled from.
    """

    clean: torch.Tensor  # [n, pos]
    corrupted: torch.Tensor  # [n, pos]
    io_ids: torch.Tensor  # [n]: the indirect object (the clean answer)
    s_ids: torch.Tensor  # [n]: the subject (the corrupted answer)
    io_pos: torch.Tensor  # [n]: position of the indirect object's name
    s1_pos: torch.Tensor  # [n]: position of the subject's first occurrence
    s2_pos: torch.Tensor  # [n]: position of the subject's second occurrence
    texts: tuple[str, ...]
    corrupted_texts: tuple[str, ...]
    templates: tuple[str, ...]

    def __len__(self) -> int:
        return int(self.clean.shape[0])


def name_mover_templates(split: str = "train", path: str | None = None) -> list[str]:
    """The templates of ``split`` (``train`` or ``held_out``), ``data/name_mover_templates.csv``.

    Each has ``{A}``, ``{B}`` and ``{S}``: the two names, then the subject
    repeated. The shipped ones are 15 tokens long in SmolLM2's tokenizer.

    Args:
        split: ``'train'`` (default) or ``'held_out'``.
        path: A CSV file with the columns ``split, template``; ``None`` is the shipped file.

    Returns:
        The split's templates, in file order.

    Raises:
        InterpError: for an unknown split, a missing file, or a template
            without the three fields.
    """
    import pandas as pd

    if split not in SPLITS:
        raise InterpError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    file = data_dir() / NAME_MOVER_TEMPLATES if path is None else Path(path)
    if not file.is_file():
        raise InterpError(f"name-mover templates not found at {file}")
    df = pd.read_csv(file, dtype=str, keep_default_na=False)
    out = df[df["split"] == split]["template"].tolist()
    bad = [t for t in out if not all(f in t for f in ("{A}", "{B}", "{S}"))]
    if bad or not out:
        raise InterpError(
            f"{file}: templates need {{A}}, {{B}} and {{S}}; bad: {bad[:1] or 'none in split'}"
        )
    return out


def first_names(path: str | None = None) -> list[str]:
    """The first names of ``data/first_names.txt`` (one a line).

    Args:
        path: A text file with one name a line; ``None`` is the shipped file.

    Returns:
        The names, in file order, blank lines dropped.

    Raises:
        InterpError: for a missing file.
    """
    file = data_dir() / FIRST_NAMES if path is None else Path(path)
    if not file.is_file():
        raise InterpError(f"name list not found at {file}")
    return [line.strip() for line in file.read_text().splitlines() if line.strip()]


def name_mover_prompts(
    n: int = 12,
    *,
    seed: int = 0,
    split: str = "train",
    tokenizer: Any = None,
    templates: Sequence[str] | None = None,
    names: Sequence[str] | None = None,
) -> NameMoverPrompts:
    """``n`` clean/corrupted indirect-object prompt pairs (see :class:`NameMoverPrompts`).

    Templates are used in turn (so each appears ``n / len(templates)``
    times), the order of the two names alternates (ABBA, BABA), and the names
    are drawn without replacement per prompt (seeded). Every name must be one
    token (with its leading space) in ``tokenizer``, and every prompt must have the same
    length; sequences start with the tokenizer's BOS. At least 5 templates per split and 20
    names ship.

    Args:
        n: How many prompt pairs (at least 1; default 12).
        seed: Every random draw (the names); the same seed gives the same numbers.
        split: Which shipped templates: ``'train'`` (default) or ``'held_out'``; ignored
            when ``templates`` are given.
        tokenizer: A Hugging Face tokenizer to encode with; ``None`` is SmolLM2's.
        templates: Templates with ``{A}``, ``{B}`` and ``{S}`` to use instead of the split's.
        names: One-token first names to use instead of the shipped ones (at least two).

    Returns:
        A :class:`NameMoverPrompts`.

    Raises:
        InterpError: for ``n < 1``, a name that is several tokens, fewer than two
            names, or templates whose prompts differ in length.
    """
    n, seed = check_int(n, "n", minimum=1), check_seed(seed)
    if tokenizer is None:
        tokenizer = smollm2_tokenizer()
    templates = list(templates) if templates is not None else name_mover_templates(split)
    names = list(names) if names is not None else first_names()
    if len(names) < 2:
        raise InterpError("name_mover_prompts needs at least two names")
    if not templates:
        raise InterpError("templates is empty; give at least one template with {A}, {B} and {S}")
    ids = {}
    for name in names:
        enc = tokenizer.encode(" " + name, add_special_tokens=False)
        if len(enc) != 1:
            raise InterpError(
                f"the name {name!r} is {len(enc)} tokens for this tokenizer; use one-token names"
            )
        ids[name] = int(enc[0])
    bos = getattr(tokenizer, "bos_token_id", None)
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        template = templates[i % len(templates)]
        a, b = (names[j] for j in torch.randperm(len(names), generator=gen)[:2].tolist())
        io, s = (a, b) if i % 2 == 0 else (b, a)
        clean = template.replace("{A}", a).replace("{B}", b).replace("{S}", s)
        corrupt = template.replace("{A}", a).replace("{B}", b).replace("{S}", io)
        rows.append((template, io, s, clean, corrupt))

    def encode(text: str) -> list[int]:
        return ([bos] if bos is not None else []) + list(
            tokenizer.encode(text, add_special_tokens=False)
        )

    clean_ids = [encode(r[3]) for r in rows]
    corrupt_ids = [encode(r[4]) for r in rows]
    lengths = {len(x) for x in clean_ids + corrupt_ids}
    if len(lengths) != 1:
        raise InterpError(
            f"the prompts tokenize to different lengths {sorted(lengths)}; patching needs one "
            "length: use templates of equal token length for this tokenizer"
        )
    clean_t, corrupt_t = torch.tensor(clean_ids), torch.tensor(corrupt_ids)
    io_ids = torch.tensor([ids[r[1]] for r in rows])
    s_ids = torch.tensor([ids[r[2]] for r in rows])

    def where(tokens: torch.Tensor, target: torch.Tensor, nth: int) -> torch.Tensor:
        hits = tokens == target[:, None]
        return torch.stack([torch.nonzero(h).flatten()[nth] for h in hits])

    return NameMoverPrompts(
        clean=clean_t,
        corrupted=corrupt_t,
        io_ids=io_ids,
        s_ids=s_ids,
        io_pos=where(clean_t, io_ids, 0),
        s1_pos=where(clean_t, s_ids, 0),
        s2_pos=where(clean_t, s_ids, 1),
        texts=tuple(r[3] for r in rows),
        corrupted_texts=tuple(r[4] for r in rows),
        templates=tuple(r[0] for r in rows),
    )
