"""That every rank runs the same work: a hash of each rank's model, prompts and options,
compared before any pass.

The runner splits the prompts among the ranks itself (:mod:`interp.engine.ranks`), so
every rank must be given the same model, the same tokens and the same options. A rank
given its own shard of the tokens, another checkpoint or another option would otherwise
combine into a table that is silently wrong. :func:`check_alike` hashes each part on every
rank, gathers the hashes and refuses, on every rank and before any pass, a run whose ranks
disagree, naming the ranks and the parts.

The hash (:func:`digest`) reads values, not places: a tensor's dtype, shape and contents
(every element up to 2**16 of them; beyond, an even sample of 2**16 and the last), a
module's parameters and buffers by name, a dataclass's fields, a mapping's items, a
sequence's items, a function's qualified name; a device counts by its type only (rank 1's
``cuda:1`` is rank 0's ``cuda:0``), and an object of any other kind by its type's name and
its attributes.

Example:
    >>> import torch
    >>> digest({"tokens": torch.arange(4), "k": 3}) == digest({"k": 3, "tokens": torch.arange(4)})
    True
    >>> digest(torch.arange(4)) == digest(torch.arange(1, 5))
    False
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from interp.core.errors import InterpError
from interp.engine import ranks

FULL = 2**16  # tensors up to this many elements are hashed whole
DEPTH = 8  # how deep into nested objects the hash reads


def digest(value: Any) -> str:
    """A hex hash of ``value``'s contents (module docstring).

    Args:
        value: Anything: tensors, arrays, modules, dataclasses, containers, scalars.

    Returns:
        A 32-character hex string, equal on every process for equal values.
    """
    h = hashlib.blake2b(digest_size=16)
    _feed(h, value, DEPTH, set())
    return h.hexdigest()


def check_alike(analysis: str, parts: Mapping[str, Any]) -> None:
    """Refuse, on every rank, a run whose ranks hold different ``parts`` (a no-op in one
    process).

    Args:
        analysis: The analysis, for the message.
        parts: What must agree, by name (``model``, ``prompts``, ``inputs``).

    Raises:
        InterpError: naming the ranks that differ from rank 0 and in what.
    """
    if not ranks.active():
        return
    mine = {name: digest(value) for name, value in parts.items()}
    every = ranks.gathered(mine, at=f"{analysis}'s agreement check")
    differ = {
        r: [name for name in mine if h.get(name) != every[0].get(name)]
        for r, h in enumerate(every)
        if h != every[0]
    }
    if differ:
        said = "; ".join(
            f"rank {r}'s {' and '.join(names)} {'is' if len(names) == 1 else 'are'} not rank 0's"
            for r, names in differ.items()
        )
        raise InterpError(
            f"{analysis}: the ranks were given different work, so nothing ran ({said}); give "
            "every rank the same model, tokens and options: the runner splits the prompts "
            "among the ranks itself"
        )


def _feed(h: Any, value: Any, depth: int, seen: set[int]) -> None:
    kind = type(value)
    h.update(f"<{kind.__module__}.{kind.__qualname__}>".encode())
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        h.update(repr(value).encode())
        return
    if isinstance(value, torch.device):
        h.update(value.type.encode())
        return
    if isinstance(value, torch.dtype):
        h.update(str(value).encode())
        return
    if isinstance(value, torch.Tensor):
        _tensor(h, value)
        return
    if isinstance(value, np.ndarray):
        _tensor(h, torch.from_numpy(np.ascontiguousarray(value)))
        return
    if depth <= 0 or id(value) in seen:
        return
    seen = seen | {id(value)}
    if isinstance(value, torch.nn.Module):
        for name, t in [*value.named_parameters(), *value.named_buffers()]:
            h.update(name.encode())
            _tensor(h, t)
        return
    if callable(value) and hasattr(value, "__qualname__"):
        h.update(f"{getattr(value, '__module__', '')}.{value.__qualname__}".encode())
        return
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        items: Any = [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    elif isinstance(value, Mapping):
        items = sorted(value.items(), key=lambda kv: repr(kv[0]))
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = list(enumerate(sorted(value, key=repr) if isinstance(value, (set, frozenset))
                               else value))  # fmt: skip
    elif hasattr(value, "__dict__"):
        items = sorted(vars(value).items())
    else:
        items = []
    for key, item in items:
        h.update(repr(key).encode())
        _feed(h, item, depth - 1, seen)


def _tensor(h: Any, t: torch.Tensor) -> None:
    t = t.detach()
    h.update(f"{t.dtype}{tuple(t.shape)}".encode())
    if t.is_meta or t.numel() == 0:
        return
    flat = t.reshape(-1)
    if flat.numel() > FULL:  # an even sample, the last element included
        flat = torch.cat([flat[:: flat.numel() // FULL][:FULL], flat[-1:]])
    h.update(flat.cpu().contiguous().view(torch.uint8).numpy().tobytes())
