"""One runtime per model: the only code that knows what kind of model it is running.

An engine asks a model's :class:`~interp.runtime.base.Runtime` to resume a
forward pass at a block, to give a block's input, to unembed only the positions
a metric reads, for the norm of any stage (and its vector-Jacobian product),
and to remember its once-per-model exactness verdicts. :func:`runtime_of`
chooses the runtime once per model, the way einops picks a backend once per
tensor type: the first registered kind whose ``matches(model)`` holds, else the
plain kind (every pass whole). A new model family (a post-norm block, a
parallel attention/MLP block) is one new :class:`Runtime` subclass passed to
:func:`register`; no analysis or engine changes.

Kinds, in the order they are tried:

======  =====================================  ============================  =================
kind    models                                 resumes at block ``l`` by     generates with
======  =====================================  ============================  =================
native  ours (:mod:`interp.models.attn_only`)  ``forward_from(resid, l-1)``  its ``KVCache``
bridge  TransformerLens ``TransformerBridge``  stubbing blocks ``0..l-1``    HF's DynamicCache
plain   other TransformerLens-hooked models    (it cannot: passes whole)     whole passes
======  =====================================  ============================  =================

(``generates with``: what :meth:`Runtime.extend` keeps between a generation's passes.)

Example:
    >>> from interp.models import load_model
    >>> runtime_of(load_model("induction-2l")).kind
    'native'
"""

from __future__ import annotations

import weakref
from typing import Any

from interp.core.errors import InterpError
from interp.core.protocol import HookedModel
from interp.runtime.base import Layer, Runtime
from interp.runtime.bridge import BridgeRuntime
from interp.runtime.native import NativeRuntime
from interp.runtime.norms import Norm
from interp.runtime.rows import kept_rows, repeat_copies, scatter_rows

__all__ = [
    "BridgeRuntime",
    "Layer",
    "NativeRuntime",
    "Norm",
    "Runtime",
    "head_weight",
    "kept_rows",
    "per_query_heads",
    "register",
    "repeat_copies",
    "runtime_of",
    "scatter_rows",
]

KINDS: list[type[Runtime]] = [NativeRuntime, BridgeRuntime]
_RUNTIMES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its runtime


def register(kind: type[Runtime]) -> type[Runtime]:
    """Add a model kind, tried before the built-in ones (usable as a class decorator).

    Runtimes already chosen for live models are kept; models seen from now on
    are matched against ``kind`` first.

    Raises:
        TypeError: for something that is not a :class:`Runtime` subclass.
    """
    if not (isinstance(kind, type) and issubclass(kind, Runtime)):
        raise TypeError(f"register takes a Runtime subclass, got {kind!r}")
    if kind not in KINDS:
        KINDS.insert(0, kind)
    return kind


def runtime_of(model: HookedModel) -> Runtime:
    """The runtime of ``model``, chosen once and kept as long as the model lives."""
    try:
        return _RUNTIMES[model]
    except KeyError:
        pass
    except TypeError:  # pragma: no cover - not weak-referenceable: a fresh runtime each time
        return _choose(model)
    rt = _RUNTIMES[model] = _choose(model)
    return rt


def _choose(model: HookedModel) -> Runtime:
    for kind in KINDS:
        if kind.matches(model):
            return kind(model)
    return Runtime(model)


def head_weight(model: HookedModel, name: str) -> Any:
    """``model.<name>`` with one entry per *query* head: ``[n_layers, n_heads, ...]``.

    Grouped-query attention models (e.g. SmolLM2: 9 query heads, 3 key/value
    heads) store ``W_K``/``W_V`` per key/value head; query head ``h`` uses
    key/value head ``h // (n_heads // n_kv_heads)``, so those are repeated.

    Raises:
        InterpError: for a weight whose head count does not divide the query heads'.
    """
    W = getattr(model, name).detach()
    n_heads = int(model.cfg.n_heads)
    if W.shape[1] != n_heads:
        if n_heads % W.shape[1]:
            raise InterpError(f"{name} has {W.shape[1]} heads, not a divisor of {n_heads}")
        W = W.repeat_interleave(n_heads // W.shape[1], dim=1)
    return W


def per_query_heads(x: Any, n_heads: int, dim: int = 2) -> Any:
    """Repeat grouped key/value heads along ``dim`` so there is one per query head."""
    if x.shape[dim] == n_heads:
        return x
    return x.repeat_interleave(n_heads // x.shape[dim], dim=dim)
