"""The atlas's roles: a score must beat its shuffled control *and* reach an effect size.

A head has a role when the role's score passes two tests:

* **significance**: it exceeds the **maximum** over the control heads (the same
  heads with their weights shuffled, :mod:`interp.analysis.heads.atlas.table`): no
  head whose weights carry no structure scores as high;
* **effect size**: it reaches the role's **floor** (:data:`FLOORS`), fixed from
  what the score means, not from how many heads pass. A control of a few
  hundred heads can score near 0 (copy suppression's: 5 of 512 sampled
  tokens), so significance alone labels heads that do the job only a little.

The floors and why:

``previous_token``, ``induction``, ``duplicate_token`` >= 0.3
    a stripe score is the share of a query row's attention on its stripe key
    (one key for previous-token and induction; the earlier copies for
    duplicate-token), over rows of 50 to 100 keys. A head that does the job
    puts a substantial part of its whole row there, not merely more than
    chance: 0.3 is 15 to 30 times what a uniform row gives one key, and
    pretrained heads park much of the rest on the first position (the sink).
``sink`` >= 0.5
    *most* of a query row on key 0: the head's output is then mostly what the
    first position holds (an attention sink, Xiao et al. 2023); below it, the
    head reads the other keys as much as it sinks. A sink is **positional**
    when swapping the first token keeps at least half of its attention
    (``sink_swapped >= sink / 2``: the position carries most of the pull),
    else **content** (the swap took most of it away: the token pulls).
``copying`` >= 0 and ``copying_top1`` >= 0.5
    eigenvalue positivity says only that the OV circuit's eigenvalues lean
    positive; it is scale-free and saturates (shuffled value weights reach
    0.90 on SmolLM2), so it must beat its control (and not be negative), and
    the size of the copying is asked of ``copying_top1``: for *most* sampled
    tokens the head's output raises the token it reads above all the others.
``copy_suppression`` >= 0.5 and ``induction`` as its stripe role asks
    McDougall et al.'s (2024) copy suppression has two halves: the head attends
    to a token earlier in the prompt that the model predicts, and pushes that
    token down. The OV half: for *most* sampled tokens the token the head reads
    is the one it pushes down hardest of the 512, a strong and specific
    suppression (their test: the token among the 10 most suppressed of the
    vocabulary), where a head that merely leans negative does so for a few
    percent. The QK half: on the probe's repeated half the predicted token is
    the next one, whose earlier copy is the induction stripe, so the head must
    also pass the induction role. They find such heads rarely (GPT-2 small:
    L10H7, L11H10). A head with both is listed copy-suppression before
    induction (it refines it).
``successor`` >= 0.5
    for *most* ordinal pairs the successor is the head's top output among its
    sequence's tokens (Gould et al. 2024).

``roles`` lists the roles a head has by ``(score - control mean) / (control max
- control mean)`` (how far above the control's own reach the score goes); ``role``
is the first, or ``"none"``. ``df.attrs["thresholds"]`` holds each score's bar
(the larger of the control's maximum and the floor), ``df.attrs["effect_sizes"]``
both numbers, which one binds and the floor's reason.

Example:
    >>> stats = {"induction": {"max": 0.1, "mean": 0.01, "std": 0.02}}
    >>> effect_sizes(stats)["induction"]["binds"]
    'floor'
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

ROLES = {  # role -> the column it is read from (and ordered by)
    "previous-token": "previous_token",
    "induction": "induction",
    "duplicate-token": "duplicate_token",
    "successor": "successor",
    "copy-suppression": "copy_suppression",
    "copying": "copying",
    "sink": "sink",
}
ALSO = {  # role -> further columns that must pass too
    "copying": ("copying_top1",),
    "copy-suppression": ("induction",),  # the QK half: it attends to the copy
}
FIRST = {"copy-suppression": "induction"}  # role -> a role it comes before (it refines it)
STRIPE_FLOOR = 0.3
MOST = 0.5  # "most": of a row's attention, of the sampled tokens, of the ordinal pairs
STRIPE_WHY = "0.3 of the row's attention on the stripe key, 15-30x a uniform row's share"
FLOORS: dict[str, tuple[float, str]] = {  # column -> (floor, why): the module docstring
    "previous_token": (STRIPE_FLOOR, STRIPE_WHY),
    "induction": (STRIPE_FLOOR, STRIPE_WHY),
    "duplicate_token": (STRIPE_FLOOR, STRIPE_WHY),
    "sink": (MOST, "most of the row's attention on key 0"),
    "copying": (0.0, "not negative; positivity saturates, so copying_top1 gives the size"),
    "copying_top1": (MOST, "most sampled tokens raised most at themselves"),
    "copy_suppression": (
        MOST,
        "most sampled tokens pushed down most at themselves, and the induction role: it "
        "attends to the copy",
    ),
    "successor": (MOST, "most ordinal pairs' top output is the successor"),
}
SPLIT = 0.5  # positional when the swapped first token keeps this share of the sink


def passes(value: float, column: str, stats: dict[str, dict]) -> bool:
    """Whether ``value`` of ``column`` beats its control's maximum and reaches its floor.

    Args:
        value: a head's score.
        column: the score's column (a key of :data:`FLOORS`).
        stats: per column, the control's ``max``, ``mean`` and ``std``.

    Returns:
        False for a NaN score or a column without a control.
    """
    st = stats.get(column)
    if st is None or not np.isfinite(value):
        return False
    return value > st["max"] and value >= FLOORS[column][0]


def effect_sizes(stats: dict[str, dict]) -> dict[str, dict[str, Any]]:
    """Per column with a control: its ``floor``, the ``control_max``, the ``bar`` a score must
    reach (the larger), which of the two ``binds`` and ``why`` the floor is what it is.

    Args:
        stats: per column, the control's ``max``, ``mean`` and ``std``.

    Returns:
        ``{column: {"floor", "control_max", "bar", "binds", "why"}}``.
    """
    out = {}
    for column, st in stats.items():
        floor, why = FLOORS[column]
        binds = "floor" if floor >= st["max"] else "control"
        out[column] = {
            "floor": floor,
            "control_max": st["max"],
            "bar": max(floor, st["max"]),
            "binds": binds,
            "why": why,
        }
    return out


def assign_roles(values: dict[str, Any], stats: dict[str, dict], L: int, H: int) -> list[tuple]:
    """``(role, roles)`` per head in table order (module docstring).

    Args:
        values: per column, scores ``[layer, head]`` (``sink_swapped`` beside ``sink``).
        stats: per column, the control's ``max``, ``mean`` and ``std``.
        L: layers.
        H: heads per layer.

    Returns:
        ``L * H`` pairs: the first role (or ``"none"``) and every role, comma-separated.
    """
    out = []
    for l in range(L):
        for h in range(H):
            passed = []
            for role, col in ROLES.items():
                cols = (col, *ALSO.get(role, ()))
                if not all(c in values and passes(float(values[c][l, h]), c, stats) for c in cols):
                    continue
                st = stats[col]
                reach = st["max"] - st["mean"]  # how far above its mean the control went
                v = float(values[col][l, h])
                z = (v - st["mean"]) / reach if reach > 0 else math.inf
                if role == "sink":
                    kept = float(values["sink_swapped"][l, h]) >= SPLIT * v
                    role = "positional sink" if kept else "content sink"
                passed.append((z, role))
            passed.sort(key=lambda zr: -zr[0])
            names = [r for _, r in passed]
            for role, before in FIRST.items():
                if role in names and before in names and names.index(before) < names.index(role):
                    names.remove(role)
                    names.insert(names.index(before), role)
            out.append((names[0] if names else "none", ", ".join(names)))
    return out


def role_counts(table: Any) -> dict[str, dict[str, int]]:
    """Heads per role: ``"role"`` (each head once, under its first role; ``"none"`` included)
    and ``"roles"`` (every role a head holds), in :data:`ROLES` order.

    Args:
        table: a :func:`interp.analysis.head_atlas` table (its ``role`` and ``roles``).

    Returns:
        ``{"role": {role: heads}, "roles": {role: heads}}``.
    """
    order = [r for r in ROLES if r != "sink"] + ["positional sink", "content sink"]
    first = table["role"].value_counts().to_dict()
    held: dict[str, int] = {}
    for roles in table["roles"].fillna(""):
        for r in filter(None, str(roles).split(", ")):
            held[r] = held.get(r, 0) + 1
    return {
        "role": {n: int(first.get(n, 0)) for n in [*order, "none"]},
        "roles": {n: int(held.get(n, 0)) for n in order},
    }
