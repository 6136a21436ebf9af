"""Heads as the user names them, checked against the model's sizes.

``heads`` is an iterable of ``(layer, head)`` pairs or ``"L1H4"`` labels (numpy
and torch integers accepted); ``None`` is every head. A bare string, an int, a
triple or floats are refused, because each would otherwise be read in some
surprising way. These checks need only ``model.cfg``'s sizes, so a
:class:`~interp.core.protocol.Sizes` stands in for a model not yet loaded.

Example:
    >>> from interp.core.protocol import Sizes
    >>> parse_heads(Sizes(n_layers=2, n_heads=4), ["L1H3", (0, 2)])
    [(1, 3), (0, 2)]
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Iterable
from typing import Any

from interp.core.errors import InterpError
from interp.core.protocol import SizedModel, model_cfg


def check_layer(model: SizedModel, layer: Any) -> int:
    """``layer`` as an int, raising unless it indexes into the model.

    numpy and torch integers are accepted; floats, bools and ``None`` are not.

    Example:
        >>> from interp.core.protocol import Sizes
        >>> check_layer(Sizes(n_layers=2, n_heads=4), 1)
        1

    Raises:
        InterpError: for a layer that is not an integer (a type error, e.g. ``"1"``), or
            one out of range.
    """
    cfg = model_cfg(model)
    _check_integer("layer", layer)
    if not 0 <= int(layer) < cfg.n_layers:
        raise InterpError(
            f"layer {_show(layer)} out of range: the model has layers 0..{cfg.n_layers - 1}"
        )
    return int(layer)


def check_layer_head(model: SizedModel, layer: Any, head: Any) -> tuple[int, int]:
    """``(layer, head)`` as ints, raising unless both are given and index into the model:
    the one check of every tool that reads one head.

    numpy and torch integers are accepted; floats, bools and ``None`` are not.

    Example:
        >>> from interp.core.protocol import Sizes
        >>> check_layer_head(Sizes(n_layers=2, n_heads=4), 1, 3)
        (1, 3)

    Raises:
        InterpError: for a layer or head that is missing (``None``) or not an integer
            (a type error, e.g. ``"1"``), or one out of range.
    """
    layer = check_layer(model, layer)
    cfg = model_cfg(model)
    _check_integer("head", head)
    if not 0 <= int(head) < cfg.n_heads:
        raise InterpError(
            f"head {_show(head)} out of range: the model has heads 0..{cfg.n_heads - 1}"
        )
    return layer, int(head)


def _check_integer(what: str, value: Any) -> None:
    if value is None:
        raise InterpError(f"{what} must be an integer, got None; pass {what}=<index> (one {what})")
    if isinstance(value, bool) or not _is_int(value):
        raise InterpError(
            f"{what} must be an integer, got {type(value).__name__} {value!r}"
            + (
                f"; pass {what}={value.strip()}"
                if isinstance(value, str) and value.strip().isdigit()
                else ""
            )
        )


def _is_int(x: Any) -> bool:
    try:
        operator.index(x)
    except TypeError:
        return False
    return True


def _show(x: Any) -> str:
    return str(operator.index(x)) if _is_int(x) and not isinstance(x, bool) else repr(x)


HEADS_FORMS = "(layer, head) pairs or 'L<layer>H<head>' labels, e.g. [(1, 4), 'L0H7']"


def _one_head(model: SizedModel, item: Any) -> tuple[int, int]:
    if isinstance(item, str):
        s = item.strip().upper()
        try:
            if not s.startswith("L") or "H" not in s:
                raise ValueError
            l_str, h_str = s[1:].split("H")
            pair: Any = (int(l_str), int(h_str))
        except ValueError:
            raise InterpError(
                f"head label {item!r} is not of the form L<layer>H<head>; heads are {HEADS_FORMS}"
            ) from None
    elif isinstance(item, (tuple, list)) and len(item) == 2:
        if not all(_is_int(x) and not isinstance(x, bool) for x in item):
            raise InterpError(f"head {item!r} must hold two integers; heads are {HEADS_FORMS}")
        pair = item
    else:
        raise InterpError(f"cannot read {item!r} as a head; heads are {HEADS_FORMS}")
    return check_layer_head(model, pair[0], pair[1])


def parse_heads(model: SizedModel, heads: Any) -> list[tuple[int, int]]:
    """Heads as ``(layer, head)`` int pairs, in the order given; all heads (layer-major) if None.

    Duplicates are collapsed with a warning. A bare string, an int, a triple
    or floats are refused, because each would otherwise be read in some
    surprising way (a string is an iterable of characters).

    Raises:
        InterpError: for anything that is not an iterable of heads, a head out
            of range, or no heads at all.
    """
    cfg = model_cfg(model)
    if heads is None:
        return [(l, h) for l in range(cfg.n_layers) for h in range(cfg.n_heads)]
    if isinstance(heads, (str, bytes)):
        raise InterpError(
            f"heads must be a list of heads, not the string {heads!r}; "
            f"pass [{heads!r}] for one head (heads are {HEADS_FORMS})"
        )
    if not isinstance(heads, Iterable) or isinstance(heads, dict):
        raise InterpError(f"heads must be a list of heads, got {heads!r}; heads are {HEADS_FORMS}")
    out: list[tuple[int, int]] = []
    dupes: list[str] = []
    for item in heads:
        pair = _one_head(model, item)
        if pair in out:
            dupes.append(f"L{pair[0]}H{pair[1]}")
        else:
            out.append(pair)
    if not out:
        raise InterpError(f"no heads given; heads are {HEADS_FORMS}, or None for every head")
    if dupes:
        warnings.warn(
            f"duplicate heads {', '.join(dupes)} were given more than once; each is used once",
            UserWarning,
            stacklevel=3,
        )
    return out
