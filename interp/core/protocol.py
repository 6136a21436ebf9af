"""What `interp` needs of a model, and what a model says about itself.

Every model `interp` supports (the toy heads, our attention-only
transformers, TransformerLens ``TransformerBridge`` wrappers of Hugging Face
models) satisfies :class:`HookedModel`: a ``cfg`` with the TransformerLens
size fields, ``run_with_cache`` / ``run_with_hooks`` with TransformerLens
hook names (:mod:`interp.core.hooks`), and the weight properties ``W_E``,
``W_Q`` ... ``W_U``. Analyses are written against this protocol once; the
input checks they run first are in :mod:`interp.core.checks`, and how each kind of
model is run by the engines in :mod:`interp.runtime`.

Example:
    >>> from interp.models import load_model
    >>> model = load_model("induction-2l")
    >>> isinstance(model, HookedModel), model_name(model), is_causal(model)
    (True, 'induction-2l', True)
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from interp.core.errors import InterpError

if TYPE_CHECKING:  # pragma: no cover - typing only; torch loads lazily
    import torch


@runtime_checkable
class HookedModel(Protocol):
    """A model with TransformerLens hook names and weights (see module docstring).

    ``cfg`` has at least ``n_layers``, ``n_heads``, ``d_model``, ``d_head``
    and ``d_vocab`` (and ``n_ctx`` when the context is bounded). Calling the
    model on ``[batch, pos]`` ids returns logits ``[batch, pos, d_vocab]``
    (or the final residual stream for models without an unembedding).
    """

    cfg: Any

    def __call__(self, tokens: Any, *args: Any, **kwargs: Any) -> Any: ...

    def run_with_cache(self, *args: Any, **kwargs: Any) -> Any: ...

    def run_with_hooks(self, *args: Any, **kwargs: Any) -> Any: ...


@dataclasses.dataclass(frozen=True)
class Sizes:
    """A stand-in ``cfg`` carrier for checks that need only sizes (``parse_heads``, no model)."""

    n_layers: int
    n_heads: int

    @property
    def cfg(self) -> Sizes:
        return self


# A model, or sizes alone (``parse_heads`` and the head checks need only ``cfg``'s sizes).
SizedModel = HookedModel | Sizes
# What a lab or the CLI takes for a model: a loaded one, an alias or a folder (``load_model``).
ModelSource = HookedModel | str | os.PathLike[str]


def _not_hooked(model: object) -> InterpError:
    return InterpError(
        f"{type(model).__name__} is not a hooked model: it needs .cfg and .run_with_cache "
        "(use interp.models.load_model, or a transformer_lens TransformerBridge)"
    )


def model_cfg(model: object) -> Any:
    """``model.cfg``, of a model or of a :class:`Sizes` stand-in (checks that need only sizes).

    Raises:
        InterpError: for no model, or an object without a ``cfg``.
    """
    if model is None:
        raise InterpError("no model given: pass a hooked model (interp.models.load_model(...))")
    cfg = getattr(model, "cfg", None)
    if cfg is None:
        raise _not_hooked(model)
    return cfg


def check_model(model: object) -> Any:
    """Return ``model.cfg``, raising unless ``model`` looks like a :class:`HookedModel`.

    Raises:
        InterpError: for no model, an object without ``cfg`` and ``run_with_cache``, or a
            ``cfg`` without integer ``n_layers`` and ``n_heads``.
    """
    cfg = model_cfg(model)
    if not hasattr(model, "run_with_cache"):
        raise _not_hooked(model)
    for field in ("n_layers", "n_heads"):
        if not isinstance(getattr(cfg, field, None), int):
            raise InterpError(f"model.cfg has no integer {field}")
    return cfg


def model_name(model: object) -> str:
    """What tables and reports call ``model``: the name it was loaded by, else its config's."""
    named = getattr(model, "interp_name", None)
    cfg = getattr(model, "cfg", None)
    return str(named or getattr(cfg, "model_name", None) or type(model).__name__)


def positions_label(positions: Any) -> Any:
    """``positions`` (a ``[pos]`` bool mask, ints or None) as table metadata: a list or "all"."""
    if positions is None:
        return "all"
    if hasattr(positions, "dtype") and str(positions.dtype) == "torch.bool":
        return [int(i) for i in positions.nonzero().flatten().tolist()]
    if hasattr(positions, "tolist"):
        return positions.tolist()
    return list(positions) if isinstance(positions, (list, tuple)) else positions


def hook_names(model: HookedModel) -> set[str]:
    """Every hook name the model exposes."""
    names = set(getattr(model, "hook_dict", {}) or {})
    if not names and hasattr(model, "hook_points"):
        names = {h.name for h in model.hook_points()}
    return names


def is_causal(model: HookedModel) -> bool:
    """False only for models whose config says ``attention_dir == "bidirectional"`` (encoders)."""
    return getattr(model.cfg, "attention_dir", "causal") != "bidirectional"


def logits_meaningful(model: HookedModel) -> bool:
    """False for models whose output logits mean nothing (e.g. an encoder without an LM head)."""
    return bool(getattr(model, "interp_logits_meaningful", True))


def bos_token_id(model: HookedModel) -> int:
    """The id a sequence starts with: CLS for encoders, else BOS; 0 without a tokenizer."""
    tok = getattr(model, "tokenizer", None)
    attrs = ("bos_token_id", "cls_token_id")
    if not is_causal(model):
        attrs = attrs[::-1]
    for attr in attrs:
        value = getattr(tok, attr, None) if tok is not None else None
        if value is not None:
            return int(value)
    return 0


def model_n_ctx(model: HookedModel) -> int | None:
    """The model's context length, or None when it is unbounded (toy heads)."""
    return getattr(model.cfg, "n_ctx", None)


def model_device(model: HookedModel) -> torch.device:
    """The device the model's weights live on (CPU for weightless toys)."""
    import torch

    for p in model.parameters() if hasattr(model, "parameters") else ():
        return p.device
    return torch.device(getattr(model.cfg, "device", None) or "cpu")


@contextlib.contextmanager
def eval_mode(model: HookedModel) -> Iterator[None]:
    """Eval mode (gradients allowed) for the duration; the previous mode is restored exactly.

    Only modules that were training are switched and switched back, so a model
    a user left partly in training mode comes back the same.
    """
    modules = list(model.modules()) if hasattr(model, "modules") else []
    training = [m for m in modules if m.training]
    if training:  # eval() sets every submodule; skip it when all are in eval mode already
        model.eval()
    try:
        yield
    finally:
        for m in training:
            m.training = True


@contextlib.contextmanager
def eval_no_grad(model: HookedModel) -> Iterator[None]:
    """:func:`eval_mode` under ``torch.no_grad()`` (analyses that need no gradients)."""
    import torch

    with eval_mode(model), torch.no_grad():
        yield
