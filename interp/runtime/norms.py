"""The norms of a model, under one LayerNorm / RMSNorm rule, with their vector-Jacobian products.

A transformer normalises the residual stream before each attention layer
(``ln1``), before each MLP (``ln2``) and before the unembedding (``ln_final``).
Engines recompute those norms on edited inputs and carry gradients back
through them, so they need each one as a function, fast, and exactly the
model's. :class:`Norm` wraps one norm module with:

* **one rule for its kind**: the model's ``cfg.normalization_type`` (``"LN"``,
  ``"LNPre"``: centred, LayerNorm; ``"RMS"``, ``"RMSPre"``: RMSNorm), or, for a
  model whose config does not say, the module's class name;
* **a closed form**, ``(x - mean?) / sqrt(mean(x^2) + eps) * weight (+ bias)``,
  which batches over any leading dimensions (many receivers at once), checked
  once against the module itself on real inputs; a module that does not match
  (another formula, Gemma's ``1 + weight``) is used as it is, always;
* **a closed-form VJP**, checked once against autograd through the module.

In float16 and bfloat16 the norm of an input is the module's own (a model's
norm rounds where its own code rounds: Llama's normalises in float32, rounds
to the model's dtype and multiplies by the weight there; a closed form in
float32 would differ from it by a rounding); the gain and the VJP, which
analyses and gradients use in float32, are checked against the module to the
tolerance of the model's precision (:mod:`interp.core.precision`).

Example:
    >>> import torch
    >>> from interp.models import load_model
    >>> norm = Norm(load_model("induction-2l").blocks[0].ln1, kind="LN", eps=1e-5)
    >>> x = torch.randn(2, 3, 128)
    >>> bool(torch.allclose(norm(x), norm.module(x), atol=1e-5))
    True
"""

from __future__ import annotations

from typing import Any

import torch

from interp.core.errors import InterpError
from interp.core.precision import is_reduced, rtol

ATOL, RTOL = 1e-5, 1e-5  # the closed form must match the module this closely (float32) to be used
VJP_ATOL, VJP_RTOL = 1e-6, 1e-4  # the closed-form VJP against autograd through the module
VJP_BLOCK = 8  # receivers carried back through a norm at a time (Norm.vjp)
_UNFOLDABLE = torch.empty(0)  # Norm.gain: the module is not weight * x_hat (+ bias)


def _close(
    got: torch.Tensor, want: torch.Tensor, dtype: Any, *, atol: float, rtol32: float
) -> bool:
    """``got`` and ``want`` agree to a float32 claim's tolerance, or in float16 / bfloat16 to
    the model's precision (relative to the largest entry of ``want``)."""
    if not is_reduced(dtype):
        return bool(torch.allclose(got, want, atol=atol, rtol=rtol32))
    scale = max(1.0, float(want.abs().max())) if want.numel() else 1.0
    return bool((got - want).abs().max() <= rtol(dtype, float32=rtol32) * scale)


def is_centred(kind: Any, module: Any) -> bool:
    """LayerNorm (centred) or RMSNorm, by the one rule (module docstring).

    Raises:
        InterpError: for a normalization type that is neither.
    """
    text = str(kind or "").upper()
    if not text:
        text = "RMS" if "rms" in type(module).__name__.lower() else "LN"
    if text.startswith("RMS"):
        return False
    if text.startswith("LN"):
        return True
    raise InterpError(f"unknown normalization type {kind!r}; expected LN or RMS")


def _param(module: Any, *names: str) -> torch.Tensor | None:
    """A norm's weight or bias: bridges name them ``weight``/``bias``, our LayerNorm ``w``/``b``."""
    for n in names:
        v = getattr(module, n, None)
        if isinstance(v, torch.Tensor):
            return v
    return None


class Norm:
    """One norm of a model as a function: ``norm(x)``, :meth:`vjp`, ``weight``, ``bias``."""

    def __init__(self, module: Any, *, kind: Any, eps: float):
        self.module = module
        self.centred = is_centred(kind, module)
        self.kind = str(kind or ("LN" if self.centred else "RMS"))  # as the config names it
        self.eps = float(eps)
        self._closed_ok: dict[tuple[int, ...], bool] = {}  # by input width
        self._vjp_ok: bool | None = None

    @property
    def weight(self) -> torch.Tensor | None:
        """``[d_model]`` (detached), or None for a norm without one."""
        w = _param(self.module, "weight", "w")
        return None if w is None else w.detach()

    @property
    def bias(self) -> torch.Tensor | None:
        """``[d_model]`` (detached), or None (RMSNorm, or a bias-free LayerNorm)."""
        if not self.centred:
            return None
        b = _param(self.module, "bias", "b")
        return None if b is None else b.detach()

    @property
    def gain(self) -> torch.Tensor | None:
        """``[d]`` float32: the elementwise factor after normalising, ``weight`` or (Gemma's
        rule) ``1 + weight``, whichever reproduces the module (checked once on a probe): the
        one gain every analysis folds into weights. None for a norm without a weight.

        Raises:
            InterpError: for a norm with a weight that neither rule reproduces (it is not a
                LayerNorm / RMSNorm with a gain, so folding it would give wrong numbers).
        """
        if not hasattr(self, "_gain"):
            self._gain: torch.Tensor | None = None
            w = self.weight
            if w is not None:
                gen = torch.Generator().manual_seed(0)
                probe = torch.randn(4, w.shape[-1], generator=gen).to(w.device, w.dtype)
                want = self.module(probe).float()
                for g in (w.float(), 1.0 + w.float()):
                    mine = self._normalised(probe) * g
                    if _close(mine, want - self._bias_f(), w.dtype, atol=ATOL, rtol32=RTOL):
                        self._gain = g
                        break
                else:
                    self._gain = _UNFOLDABLE
        if self._gain is _UNFOLDABLE:
            raise InterpError(
                f"the norm {type(self.module).__name__} is neither a LayerNorm nor an RMSNorm "
                "whose gain is its weight or 1 + weight, so it cannot be folded into weights; "
                "this analysis does not support this model"
            )
        return self._gain

    def _bias_f(self) -> torch.Tensor | float:
        b = self.bias
        return 0.0 if b is None else b.float()

    def _normalised(self, x: torch.Tensor) -> torch.Tensor:
        """``(x - mean?) / sqrt(mean(x^2) + eps)`` in float32."""
        return self.centre(x) * self.inverse_scale(x)

    def centre(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` minus its mean over the last dimension for LayerNorm; ``x`` for RMSNorm
        (float32): the linear part of the norm before its scale."""
        xf = x.float()
        return xf - xf.mean(-1, keepdim=True) if self.centred else xf

    def inverse_scale(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., 1]``: ``1 / sqrt(mean(centre(x)^2) + eps)``, the factor a frozen norm
        multiplies every piece of ``x`` by."""
        return torch.rsqrt(self.centre(x).pow(2).mean(-1, keepdim=True) + self.eps)

    def frozen(self, pieces: list[torch.Tensor]) -> list[torch.Tensor]:
        """``pieces`` (``[..., d]`` each, float32) through this norm with its scale frozen at
        their sum's: each centred, times the sum's inverse scale and the gain, the bias added
        to the last, so they sum to the norm of their sum (Gemma-2's sandwich norms on a
        layer's attention and MLP outputs: what each piece writes into the stream).

        Raises:
            InterpError: for a norm that :attr:`gain` cannot fold.
        """
        inv = self.inverse_scale(sum(pieces[1:], pieces[0]))
        gain = 1.0 if self.gain is None else self.gain.to(inv.device)
        out = [self.centre(p) * inv * gain for p in pieces]
        if self.bias is not None:
            out[-1] = out[-1] + self.bias.to(inv.device).float()
        return out

    # ------------------------------------------------------------------ forward
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """The norm of ``x`` (``[..., d_model]``, any leading dims), exactly the module's
        (the module itself in float16 / bfloat16: module docstring)."""
        if is_reduced(x.dtype):
            return self.module(x)
        key = tuple(x.shape[-1:])
        if key not in self._closed_ok:
            probe = x.reshape(-1, x.shape[-1])[:4]
            mine = self._closed(probe)
            self._closed_ok[key] = mine is not None and torch.allclose(
                mine, self.module(probe).float(), atol=ATOL, rtol=RTOL
            )
        if self._closed_ok[key]:
            return self._closed(x).to(x.dtype)
        return self.module(x)

    def _closed(self, x: torch.Tensor) -> torch.Tensor | None:
        weight = _param(self.module, "weight", "w")
        if weight is None:
            return None
        xf = x.float()
        if self.centred:
            xf = xf - xf.mean(-1, keepdim=True)
        scale = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        out = xf * scale * weight.detach().float()
        bias = self.bias
        return out if bias is None else out + bias.float()

    # --------------------------------------------------------------- backward
    def vjp(
        self, x: torch.Tensor, g: torch.Tensor, *, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``[receiver, batch, pos, d_model]``: ``g`` (the gradient at the norm's output, one
        per receiver) carried back through the norm at input ``x`` (``[batch, pos, d_model]``),
        written into ``out`` when given (float32, ``g``'s shape; it may be ``g`` itself).

        The closed form costs a few elementwise passes (the mean and scale of ``x`` are
        shared by every receiver), :data:`VJP_BLOCK` receivers at a time, so its temporaries
        do not grow with the receivers; it is checked once against autograd through the
        module, and a norm that does not match uses autograd throughout."""
        if self._vjp_ok is None:
            slice_x, slice_g = x[:1, :2], g[:2, :1, :2]
            want = self._autograd_vjp(slice_x, slice_g)
            got = self._closed_vjp(slice_x, slice_g)
            self._vjp_ok = got is not None and _close(
                got, want, x.dtype, atol=VJP_ATOL, rtol32=VJP_RTOL
            )
        if self._vjp_ok:
            return self._closed_vjp(x, g, out)
        grad = self._autograd_vjp(x, g)
        return grad if out is None else out.copy_(grad)

    def _autograd_vjp(self, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            leaf = x.detach()[None].expand(g.shape[0], *x.shape).clone().requires_grad_(True)
            (grad,) = torch.autograd.grad(self.module(leaf), leaf, grad_outputs=g.to(leaf.dtype))
        return grad.float()

    def _closed_vjp(
        self, x: torch.Tensor, g: torch.Tensor, out: torch.Tensor | None = None
    ) -> torch.Tensor | None:
        weight = self.weight
        if weight is None:
            return None
        xf = x.float()
        if self.centred:
            xf = xf - xf.mean(-1, keepdim=True)
        scale = (xf.pow(2).mean(-1, keepdim=True) + self.eps).sqrt()  # [batch, pos, 1]
        xhat = xf / scale
        w = weight.float()
        res = torch.empty(g.shape, dtype=torch.float32, device=g.device) if out is None else out
        for lo in range(0, g.shape[0], VJP_BLOCK):  # blocks of receivers: bounded temporaries
            wg = g[lo : lo + VJP_BLOCK].float() * w  # [receiver, batch, pos, d]
            part = wg - xhat * (wg * xhat).mean(-1, keepdim=True)
            if self.centred:
                part -= wg.mean(-1, keepdim=True)
            torch.div(part, scale, out=res[lo : lo + VJP_BLOCK])
        return res
