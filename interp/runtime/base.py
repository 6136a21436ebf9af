"""What an engine may ask of a model, answered once for every kind (:class:`Runtime`).

The engines edit forward passes: they resume a pass at a block with a residual
stream they hold, read a block's input, unembed only the positions a metric
reads, recompute a norm on an edited input and carry a gradient back through
it, and trust each of these tricks only after checking it once against the
model's own pass. How each is done depends on the kind of model (our
attention-only models resume with ``forward_from``; a ``TransformerBridge``
resumes by stubbing its first blocks; a model that can do neither runs whole);
this class and its subclasses are the only code that knows the kinds.
:func:`interp.runtime.runtime_of` picks one per model, once.

This base class is the plain kind: every pass runs the whole model, and
resuming is refused (:attr:`Runtime.can_resume` is False, so the engines use
their plain loops).

Example:
    >>> from interp.models import load_model
    >>> from interp.runtime import runtime_of
    >>> rt = runtime_of(load_model("induction-2l"))
    >>> rt.kind, rt.can_resume, rt.n_kv_heads
    ('native', True, 2)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from interp.core.errors import InterpError
from interp.core.memory import element_bytes
from interp.core.precision import FROM_MODEL, tolerance
from interp.core.protocol import HookedModel, hook_names, is_causal
from interp.runtime.attention import QKGeometry, default_scale
from interp.runtime.norms import Norm
from interp.runtime.rows import (  # noqa: F401  (kept_rows, repeat_copies, scatter_rows: also from here)
    kept_rows,
    module_device,
    repeat_copies,
    scatter_rows,
)

Hooks = Sequence[tuple[str, Callable]]


@dataclasses.dataclass
class Layer:
    """What recomputing one layer's receivers needs: its norms and head weights."""

    ln1: Norm | None  # None: identity
    ln2: Norm | None
    W: dict[str, torch.Tensor]  # "q": [head, d_model, d_head]; "k"/"v": [kv_head, d_model, d_head]
    b: dict[str, torch.Tensor | None]  # [head, d_head] or None
    W_O: torch.Tensor  # [head, d_head, d_model]


class Runtime:
    """The plain kind, and the interface every kind answers (module docstring)."""

    kind = "plain"
    can_resume = False
    shares_prefix = False  # passes sharing their first positions compute only the rest

    def __init__(self, model: HookedModel):
        self.model = model
        self._norms: dict[tuple[str, int | None], Norm | None] = {}
        self._verdicts: dict[str, Any] = {}

    @classmethod
    def matches(cls, model: HookedModel) -> bool:
        """Whether ``model`` is of this kind (the plain kind takes any model)."""
        return True

    # ------------------------------------------------------------------ sizes
    @property
    def cfg(self) -> Any:
        return self.model.cfg

    @property
    def n_layers(self) -> int:
        return int(self.cfg.n_layers)

    @property
    def d_model(self) -> int:
        return int(self.cfg.d_model)

    @property
    def eps(self) -> float:
        """The norms' epsilon (``cfg.eps``)."""
        return float(getattr(self.cfg, "eps", 1e-5) or 1e-5)

    @property
    def attention_only(self) -> bool:
        """Blocks that add only their attention's output (``cfg.attn_only``)."""
        return bool(getattr(self.cfg, "attn_only", False))

    @property
    def n_kv_heads(self) -> int:
        """Key/value heads a layer (fewer than query heads under grouped-query attention)."""
        blocks = getattr(self.model, "blocks", None)
        attn = getattr(blocks[0], "attn", None) if blocks is not None else None
        W_K = getattr(attn, "W_K", None)
        return int(W_K.shape[0]) if isinstance(W_K, torch.Tensor) else int(self.cfg.n_heads)

    @property
    def has_positional(self) -> bool:
        """Does ``hook_pos_embed`` carry a learned positional embedding (not rotary, not none)?"""
        kind = str(getattr(self.cfg, "positional_embedding_type", "standard") or "standard")
        return "hook_pos_embed" in hook_names(self.model) and kind == "standard"

    @property
    def rows_supported(self) -> bool:
        """Whether :meth:`run` can unembed only some positions (else it unembeds all)."""
        return False

    def unembedded(self, rows: Sequence[int] | None) -> Sequence[int] | None:
        """The rows :meth:`run` unembeds when asked for ``rows`` (``None``: every row), for
        the memory model (:func:`interp.core.memory.logit_bytes`)."""
        return rows if self.rows_supported else None

    def activation_shape(self, name: str, pos: int) -> tuple[int, ...]:
        """The shape of one prompt's activation at hook ``name``, by the hook's kind: a
        residual-width stream ``[pos, d_model]``, per-head vectors ``[pos, head, d_head]``
        (key and value heads on grouped-query models), a ``[head, pos, pos]`` pattern, MLP
        neurons ``[pos, d_mlp]``."""
        cfg = self.cfg
        n_heads = int(cfg.n_heads)
        d_head = int(getattr(cfg, "d_head", 0) or self.d_model // n_heads)
        leaf = name.rsplit(".", 1)[-1]
        if leaf in ("hook_pattern", "hook_attn_scores"):
            return (n_heads, pos, pos)
        if leaf in ("hook_q", "hook_z", "hook_rot_q"):
            return (pos, n_heads, d_head)
        if leaf in ("hook_k", "hook_v", "hook_rot_k"):
            return (pos, self.n_kv_heads, d_head)
        if leaf == "hook_result":
            return (pos, n_heads, self.d_model)
        if leaf in ("hook_pre", "hook_post", "hook_pre_linear"):
            return (pos, int(getattr(cfg, "d_mlp", 0) or 4 * self.d_model))
        if leaf == "hook_scale":
            return (pos, 1)
        return (pos, self.d_model)

    def activation_bytes(self, name: str, pos: int) -> int:
        """Bytes of one prompt's activation at hook ``name`` (:meth:`activation_shape`), in
        the model's dtype."""
        n = 1
        for d in self.activation_shape(name, pos):
            n *= int(d)
        return element_bytes(self.model) * n

    # ------------------------------------------------------------ passes
    def run(
        self,
        tokens: torch.Tensor,
        *,
        hooks: Hooks = (),
        rows: Sequence[int] | None = None,
        start: int = 0,
        state: Any = None,
        copies: int = 1,
    ) -> torch.Tensor:
        """Logits ``[copies * batch, pos, d_vocab]`` of one pass over ``copies`` copies of
        ``tokens`` with ``hooks``; ``start > 0`` resumes at block ``start`` from ``state``
        (what enters that block, from :meth:`block_inputs`, or a residual stream
        ``[batch, pos, d_model]``), the earlier blocks not run. ``rows`` (positions a metric
        reads) may limit the unembedding: other rows are then 0, or the one row read repeated
        (:func:`scatter_rows`).

        Raises:
            InterpError: for ``start > 0`` on a kind that cannot resume.
        """
        if start > 0:
            raise InterpError(
                f"{type(self.model).__name__} cannot resume a forward pass at a block; "
                "call it without cache="
            )
        tokens = repeat_copies(tokens, copies)
        if hooks:
            return self.model.run_with_hooks(tokens, fwd_hooks=list(hooks))
        return self.model(tokens)

    def block_inputs(
        self,
        tokens: torch.Tensor,
        layers: set[int] | Sequence[int],
        *,
        rows: Sequence[int] | None = None,
    ) -> tuple[torch.Tensor, dict[int, Any]]:
        """One clean pass: its logits (unembedded at ``rows`` where :meth:`run` can) and, for
        each ``l`` in ``layers`` (all > 0), what enters block ``l``, ready to resume there
        (:meth:`run` with ``start=l``).

        Raises:
            InterpError: on a kind that cannot resume.
        """
        raise InterpError(f"{type(self.model).__name__} cannot resume a forward pass at a block")

    def readout(self, resid: torch.Tensor, *, softcap: bool = True) -> torch.Tensor:
        """Logits of residual vectors ``[..., d_model]`` through the model's own final norm
        (recomputed on each vector) and unembedding, then its final soft cap
        (:attr:`final_softcap`; ``softcap=False``: the logits before it): what the model
        does after its last block, on the device of the final norm, the logits back on
        ``resid``'s device. :meth:`check_readout` says whether this is the model's output
        head."""
        ln = getattr(self.model, "ln_final", None)
        W_U = self.model.W_U
        x = resid.to(W_U.device)
        x = ln(x) if ln is not None else x
        b = self.unembed_bias()
        out = x @ W_U
        return self.capped(out if b is None else out + b, softcap).to(resid.device)

    @property
    def final_softcap(self) -> float | None:
        """The soft cap on the model's logits (``cap * tanh(logits / cap)``, Gemma-2's
        ``final_logit_softcapping``), or None."""
        cap = getattr(self.cfg, "output_logits_soft_cap", None)
        return float(cap) if cap and float(cap) > 0 else None

    def capped(self, logits: torch.Tensor, softcap: bool = True) -> torch.Tensor:
        """``logits`` through the model's final soft cap (unchanged without one, or when
        ``softcap`` is False)."""
        cap = self.final_softcap if softcap else None
        return logits if cap is None else torch.tanh(logits / cap) * cap

    def check_readout(self, what: str) -> None:
        """Once per model: :meth:`readout` of the last block's output reproduces the model's
        own logits (on a probe of a few tokens), so an analysis that reads the residual
        stream through the final norm and unembedding reads what the model computes.

        Raises:
            InterpError: for a model whose output head is something else (BERT's masked-LM
                head transforms the stream before its unembedding), naming ``what``.
        """
        gap = self.verdict("readout", self._readout_gap)
        if gap is not None:
            raise InterpError(
                f"this model's output head is not its final norm and unembedding (reading the "
                f"last block's output through them misses its logits by {gap:.2g}; a "
                f"masked-LM head transforms the stream first), so {what}, which reads the "
                "stream through them, does not support it"
            )

    def _readout_gap(self) -> float | None:

        n_ctx = getattr(self.cfg, "n_ctx", None) or 8
        probe = (torch.arange(min(8, int(n_ctx))) % int(self.cfg.d_vocab))[None]
        probe = probe.to(module_device(getattr(self.model, "embed", None), self.model))
        name = f"blocks.{self.n_layers - 1}.hook_resid_post"
        kept: dict[str, torch.Tensor] = {}

        def keep(x: torch.Tensor, hook: Any) -> None:
            kept["final"] = x

        with torch.no_grad():
            logits = self.model.run_with_hooks(probe, fwd_hooks=[(name, keep)])
            mine = self.readout(kept["final"])
        if not bool(torch.isfinite(logits).all()):  # NaN would read as "another head"
            raise InterpError(
                f"the model's own logits on a probe of {probe.shape[1]} tokens are NaN or "
                f"infinite; {FROM_MODEL}"
            )
        size = float(logits.float().abs().max())
        gap = float((mine.float() - logits.float()).abs().max())
        return None if gap <= tolerance(logits.dtype, size, float32=1e-4) else gap

    def head_device(self) -> torch.device:
        """The device of the model's output layer (its final norm and unembedding: the last
        of a model split over devices)."""
        return module_device(getattr(self.model, "ln_final", None), self.model)

    def _bias(self, name: str) -> torch.Tensor | None:
        """``model.<name>`` detached; ``None`` where the model has none (bridges raise)."""
        try:
            b = getattr(self.model, name)
        except (AttributeError, InterpError):
            return None
        return None if b is None else b.detach()

    def unembed_bias(self) -> torch.Tensor | None:
        """``b_U`` (``[d_vocab]``), or ``None`` when the model has none."""
        return self._bias("b_U")

    def output_bias(self) -> torch.Tensor | None:
        """The attention output bias ``b_O`` (``[n_layers, d_model]``), or ``None``."""
        return self._bias("b_O")

    def head_input_hook(self, layer: int) -> str:
        """The hook whose value ``layer``'s Q/K/V projections read: the output of its ``ln1``
        (``hook_out`` on bridges, ``hook_normalized`` on our models), else ``hook_resid_pre``."""
        names = hook_names(self.model)
        for cand in (f"blocks.{layer}.ln1.hook_out", f"blocks.{layer}.ln1.hook_normalized"):
            if cand in names:
                return cand
        return f"blocks.{layer}.hook_resid_pre"

    # ------------------------------------------------------------ generation
    @property
    def kv_cache(self) -> bool:
        """Whether :meth:`extend` keeps keys and values between passes (else a generation
        runs every pass over the whole sequence)."""
        return False

    def extend(
        self,
        tokens: torch.Tensor,
        *,
        attention_mask: torch.Tensor,
        past: Any = None,
        hooks: Hooks = (),
        keep: bool = True,
        last: bool = True,
    ) -> tuple[torch.Tensor, Any]:
        """Logits of ``tokens`` ``[batch, new]``, the columns after those ``past`` holds (what
        an earlier call returned; ``None``: nothing before them), and ``past`` extended by
        them (``None`` when ``keep`` is False, or on a kind without a cache: :attr:`kv_cache`).
        ``attention_mask`` ``[batch, past + new]`` is 1 for real tokens and 0 for left
        padding, and a token's position is the count of real tokens before it. ``last``
        returns only the last column's logits (``[batch, 1, d_vocab]``). ``hooks`` fire on
        the new columns only (``hook_pattern``: ``[batch, head, new, past + new]``).

        The plain kind keeps nothing and masks nothing: each pass is the whole sequence.

        Raises:
            InterpError: for ``past`` on a kind without a cache, or padding on this kind.
        """
        if past is not None:
            raise InterpError(f"{type(self.model).__name__} keeps no keys and values")
        if not bool(attention_mask.bool().all()):
            raise InterpError(
                f"{type(self.model).__name__} cannot mask left padding; give prompts of one length"
            )
        logits = self.run(tokens, hooks=hooks)
        return (logits[:, -1:] if last else logits), None

    # ------------------------------------------------------- norms and weights
    def norm(self, stage: str, layer: int | None = None) -> Norm | None:
        """The norm before a layer's attention (``"ln1"``), its MLP (``"ln2"``) or the
        unembedding (``"final"``), or after its attention or MLP (``"ln1_post"``,
        ``"ln2_post"``: Gemma-2's sandwich norms), or None where the model normalises nothing
        there."""
        key = (stage, layer)
        if key not in self._norms:
            if stage == "final":
                module = getattr(self.model, "ln_final", None)
            elif stage in ("ln1", "ln2", "ln1_post", "ln2_post"):
                module = getattr(self.model.blocks[layer], stage, None)
            else:
                raise InterpError(
                    f"unknown norm stage {stage!r}; use ln1, ln2, ln1_post, ln2_post or final"
                )
            kind = getattr(self.cfg, "normalization_type", None)
            if module is None or (stage == "final" and not kind):
                self._norms[key] = None
            else:
                self._norms[key] = Norm(module, kind=kind, eps=self.eps)
        return self._norms[key]

    def layer(self, layer: int) -> Layer:
        """The norms and head weights of ``layer`` (bias-free projections give ``None``)."""
        attn = self.model.blocks[layer].attn
        W = {k: getattr(attn, f"W_{k.upper()}").detach() for k in ("q", "k", "v")}
        b: dict[str, torch.Tensor | None] = {}
        for k in ("q", "k", "v"):
            v = getattr(attn, f"b_{k.upper()}", None)
            b[k] = v.detach() if isinstance(v, torch.Tensor) else None
        return Layer(
            ln1=self.norm("ln1", layer),
            ln2=self.norm("ln2", layer),
            W=W,
            b=b,
            W_O=attn.W_O.detach(),
        )

    def layer_weight(self, name: str, layer: int) -> torch.Tensor:
        """One layer's ``W_O`` (``[head, d_head, d_model]``) or similar, without stacking every
        layer's (the model-wide property copies all of them on bridges)."""
        attn = getattr(self.model.blocks[layer], "attn", None)
        w = getattr(attn, name, None)
        if isinstance(w, torch.Tensor) and w.ndim == 3:
            return w.detach()
        return getattr(self.model, name)[layer].detach()

    def qk_geometry(self, layer: int) -> QKGeometry:
        """How ``layer`` turns projected queries and keys into scores (scale, rotary
        embedding, QK-norms, soft cap) and which keys each query sees (causal or not, a
        sliding window): :mod:`interp.runtime.attention`.

        Raises:
            InterpError: for a rotary model of a kind whose rotation this runtime cannot read.
        """
        kind = str(getattr(self.cfg, "positional_embedding_type", "standard") or "standard")
        if kind == "rotary":
            raise InterpError(
                f"{type(self.model).__name__} applies rotary embeddings this toolkit cannot read "
                "from it; load the model with interp.models.load_model (a TransformerBridge)"
            )
        d_head = int(self.cfg.d_head)
        use = bool(getattr(self.cfg, "use_attn_scale", True))
        given = getattr(self.cfg, "attn_scale", None)
        if not use:
            scale = 1.0
        elif given is not None and float(given) > 0:
            scale = 1.0 / float(given)
        else:
            scale = default_scale(d_head)
        return QKGeometry(scale=scale, causal=is_causal(self.model))

    # ------------------------------------------------------------ verdicts
    def verdict(self, name: str, check: Callable[[], Any]) -> Any:
        """``check()``, run once for this model and remembered (the engines' exactness checks)."""
        if name not in self._verdicts:
            self._verdicts[name] = check()
        return self._verdicts[name]
