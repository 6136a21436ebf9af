"""TransformerLens ``TransformerBridge`` models (Hugging Face models with TransformerLens hooks).

A bridge runs the wrapped Hugging Face model, whose blocks are called one after
another from ``model.blocks``. To resume at block ``l`` the engines replace the
``forward`` of blocks ``0 .. l-1`` by stubs that return a kept output (what
block ``l - 1`` returned in a clean pass), so only blocks ``l ..`` compute. The
Hugging Face model still builds its own masks and rotary embeddings, so every
block sees exactly the arguments it sees in a plain run. A model whose
``forward`` takes ``logits_to_keep`` unembeds only the positions a metric reads.

Example:
    >>> import torch
    >>> from interp.models.hf import random_llama
    >>> from interp.runtime import runtime_of
    >>> rt = runtime_of(random_llama(2, vocab=30))
    >>> rt.kind, rt.rows_supported, rt.n_kv_heads
    ('bridge', True, 2)
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from interp.core.errors import InterpError
from interp.core.protocol import HookedModel, is_causal
from interp.runtime.attention import QKGeometry, default_scale, rotary_from_hf
from interp.runtime.base import Hooks, Runtime
from interp.runtime.decoding import (
    attentions,
    cache_alias,
    check_decoding,
    component_slots,
    positions_of,
    unbridged,
)
from interp.runtime.hooking import attached
from interp.runtime.norms import Norm
from interp.runtime.rows import kept_rows, repeat_copies, scatter_rows


@contextmanager
def skipping_blocks(blocks: Any, upto: int, output: Any) -> Iterator[None]:
    """Blocks ``0..upto-1`` return ``output`` (the clean output of block ``upto - 1``) unrun.

    ``object.__setattr__`` puts the stub in each block's instance dict, so
    ``Module.__call__`` finds it first; TransformerBridge components forward
    ordinary attribute writes to the wrapped module, which this avoids.
    """

    def stub(self: Any, *args: Any, **kwargs: Any) -> Any:
        return output

    patched = []
    try:
        for i in range(upto):
            object.__setattr__(blocks[i], "forward", types.MethodType(stub, blocks[i]))
            patched.append(blocks[i])
        yield
    finally:
        for blk in patched:
            object.__delattr__(blk, "forward")


def _sliding_window(hf_attn: Any, config: Any, layer: int) -> int | None:
    """The sliding window of a Hugging Face attention layer, or None: the module's own
    ``sliding_window`` where it keeps one (Gemma-2/3, Qwen2: None on its global layers), else
    the config's, on the layers ``config.layer_types`` marks ``"sliding_attention"`` (every
    layer where it marks none: Mistral). The rows of every QK analysis are checked against
    the model's own mask, so a window read wrong is refused, never used."""
    if hasattr(hf_attn, "sliding_window"):
        window = hf_attn.sliding_window
    else:
        window = getattr(config, "sliding_window", None)
        types = getattr(config, "layer_types", None)
        if window and types is not None and layer < len(types):
            window = window if types[layer] == "sliding_attention" else None
    return int(window) if window else None


# Architectures whose blocks normalise after attention and MLP (post-norm, as BERT).
POST_NORM = ("Bert", "Roberta", "XLMRoberta", "Electra", "DistilBert", "Albert")


class BridgeRuntime(Runtime):
    """``TransformerBridge`` models (module docstring)."""

    kind = "bridge"
    can_resume = True

    @classmethod
    def matches(cls, model: HookedModel) -> bool:
        is_bridge = any(c.__name__ == "TransformerBridge" for c in type(model).__mro__)
        return is_bridge and isinstance(getattr(model, "blocks", None), torch.nn.ModuleList)

    def __init__(self, model: HookedModel):
        super().__init__(model)
        hf = getattr(model, "interp_hf_model", None)
        params = inspect.signature(hf.forward).parameters if hf is not None else {}
        self._rows = "logits_to_keep" in params
        self._positions = "position_ids" in params
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._slots: list | None = None  # where components sit (runtime.decoding)
        self._attentions: list = []
        self._points: dict[str, Any] | None = None  # hook points by name (aliases too)

    @contextmanager
    def hooked(self, hooks: Hooks) -> Iterator[None]:
        """``hooks`` on the bridge's hook points for the duration
        (:func:`interp.runtime.hooking.attached`), the points looked up once per model
        (TransformerLens's own context rebuilds its alias map on every call). A bridge in
        compatibility mode, whose hooks also see their aliases' names, uses that context.

        Args:
            hooks: ``[(hook name, hook)]``.

        Raises:
            KeyError: for a name that is not one of the model's hook points.
        """
        if hooks and getattr(self.model, "compatibility_mode", False):
            with self.model.hooks(fwd_hooks=list(hooks)):
                yield
            return
        with attached(self.model, self.hook_points(), hooks):
            yield

    def hook_points(self) -> dict[str, Any]:
        """The bridge's hook points by name (aliases too), read once per model (its
        ``hook_dict`` is rebuilt on every access).

        Returns:
            ``{hook name: HookPoint}``.
        """
        if self._points is None:
            self._points = dict(self.model.hook_dict)
        return self._points

    @property
    def rows_supported(self) -> bool:
        return self._rows

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
        n = tokens.shape[1]
        kwargs: dict[str, Any] = {}
        keep = kept_rows(rows, n) if self._rows else None
        if keep is not None:
            kwargs["logits_to_keep"] = torch.tensor(keep, dtype=torch.long, device=tokens.device)
        tokens = repeat_copies(tokens, copies)
        out = repeat_copies(state, copies) if start > 0 else None
        with skipping_blocks(self.model.blocks, start, out), self.hooked(hooks):
            logits = self.model(tokens, **kwargs)
        return scatter_rows(logits, keep, n)

    def block_inputs(
        self,
        tokens: torch.Tensor,
        layers: set[int] | Sequence[int],
        *,
        rows: Sequence[int] | None = None,
    ) -> tuple[torch.Tensor, dict[int, Any]]:
        kept: dict[int, Any] = {}
        blocks = self.model.blocks

        def grab(l: int) -> Callable:
            def hook(module: Any, args: Any, out: Any) -> None:
                kept[l] = out

            return hook

        handles = [blocks[l - 1].register_forward_hook(grab(l)) for l in sorted(layers)]
        try:
            return self.run(tokens, rows=rows), kept
        finally:
            for h in handles:
                h.remove()

    @property
    def post_norm(self) -> bool:
        """Blocks that normalise *after* their attention and MLP (BERT and its kind): the
        heads read the block's input itself, and no norm comes before them."""
        arch = str(getattr(self.cfg, "architecture", "") or "")
        return any(arch.startswith(p) for p in POST_NORM)

    def head_input_hook(self, layer: int) -> str:
        """Post-norm blocks' heads read ``hook_resid_pre`` (their ``ln1`` runs after the
        attention); others as :meth:`Runtime.head_input_hook`."""
        if self.post_norm:
            return f"blocks.{layer}.hook_resid_pre"
        return super().head_input_hook(layer)

    def norm(self, stage: str, layer: int | None = None) -> Any:
        """As :meth:`Runtime.norm`; post-norm blocks have no norm before their attention or
        MLP (``ln1``/``ln2`` is None there)."""
        if self.post_norm and stage in ("ln1", "ln2"):
            return None
        return super().norm(stage, layer)

    def qk_geometry(self, layer: int) -> QKGeometry:
        """Read once per layer from the wrapped Hugging Face attention module: its
        ``scaling``, rotary embedding, ``q_norm``/``k_norm``, ``attn_logit_softcapping`` and
        ``sliding_window``."""
        return self.verdict(f"qk geometry {layer}", lambda: self._read_geometry(layer))

    def _read_geometry(self, layer: int) -> QKGeometry:
        attn = self.model.blocks[layer].attn
        hf_attn = getattr(attn, "original_component", None)
        hf = getattr(self.model, "interp_hf_model", None)
        if hf_attn is None or hf is None:
            return super().qk_geometry(layer)
        d_head = int(self.cfg.d_head)
        scale = getattr(hf_attn, "scaling", None)
        if scale is None:
            scale = default_scale(d_head)  # GPT-2, GPT-J: 1/sqrt(d_head), unless told otherwise
            if getattr(getattr(hf, "config", None), "scale_attn_weights", True) is False:
                scale = 1.0
        rotary = None
        if str(getattr(self.cfg, "positional_embedding_type", "")) == "rotary":
            rotary = rotary_from_hf(hf)
        norms = {}
        for side in ("q", "k"):
            mod = getattr(hf_attn, f"{side}_norm", None)
            if mod is not None:
                eps = getattr(mod, "variance_epsilon", getattr(mod, "eps", self.eps))
                norms[side] = Norm(
                    mod, kind="RMS" if "rms" in type(mod).__name__.lower() else "LN", eps=float(eps)
                )
        cap = getattr(getattr(hf, "config", None), "attn_logit_softcapping", None)
        window = _sliding_window(hf_attn, getattr(hf, "config", None), layer)
        causal = is_causal(self.model)
        if window and not causal:
            raise InterpError(
                "this encoder has a sliding window, whose mask the toolkit does not read; "
                "its heads cannot be analysed key by key"
            )
        return QKGeometry(
            scale=float(scale),
            rotary=rotary,
            q_norm=norms.get("q"),
            k_norm=norms.get("k"),
            softcap=float(cap) if cap else None,
            window=int(window) if window else None,
            causal=causal,
        )

    def readout(self, resid: torch.Tensor, *, softcap: bool = True) -> torch.Tensor:
        ln = getattr(self.model, "ln_final", None)
        unembed = getattr(self.model, "unembed", None)
        if callable(getattr(unembed, "forward", None)):
            x = resid.to(self.head_device())
            x = ln(x) if ln is not None else x
            # the wrapped model's own output layer, then its soft cap (its forward applies it)
            return self.capped(unembed(x), softcap).to(resid.device)
        return super().readout(resid, softcap=softcap)

    @property
    def final_softcap(self) -> float | None:
        """The wrapped model's ``final_logit_softcapping`` (Gemma-2), or None."""
        hf = getattr(self.model, "interp_hf_model", None)
        cap = getattr(getattr(hf, "config", None), "final_logit_softcapping", None)
        return float(cap) if cap and float(cap) > 0 else super().final_softcap

    # ------------------------------------------------------------ generation
    @property
    def kv_cache(self) -> bool:
        """Hugging Face's own cache (:mod:`interp.runtime.decoding`), once checked on this
        model (:meth:`decoding`)."""
        return self.decoding() != "none"

    def decoding(self) -> str:
        """How cached passes run, checked once per model against a whole pass on a fixed
        probe (a prompt of 4 tokens, then two cached steps; logits to 1e-4 relative), with a
        hook in every block's attention and with none:
        ``"unbridged"`` (components without a hook run as the wrapped modules),
        ``"bridged"`` (every component runs) or ``"none"`` (no cache: every pass whole)."""
        return self.verdict("kv cache", lambda: check_decoding(self, self._extend))

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
        """As :meth:`Runtime.extend`: with ``keep``, one pass of the Hugging Face model with
        its own ``DynamicCache`` (``past``); without, the bridge's whole forward pass with every
        component running (the reference a cached generation is tested against).

        Raises:
            InterpError: for a cached pass on a model whose cache failed the check.
        """
        mode = self.decoding() if keep else "none"
        if keep and mode == "none":
            raise InterpError(
                f"{type(self.model).__name__}'s key/value cache does not reproduce its own "
                "forward pass on this model; generate without a cache"
            )
        return self._extend(tokens, attention_mask, past, hooks, keep, last, mode == "unbridged")

    # ------------------------------------------------------------ a shared prefix
    @property
    def shares_prefix(self) -> bool:
        """Whether passes that share their first positions can compute only the rest
        (:meth:`run_shared`): the model's key/value cache passed its check."""
        return self._rows and self.decoding() != "none"  # _rows: a wrapped Hugging Face model

    def prefix(self, tokens: torch.Tensor) -> Any:
        """Every layer's keys and values of ``tokens`` ``[batch, shared]`` (Hugging Face's
        ``DynamicCache``), computed once for :meth:`run_shared`.

        Args:
            tokens: The shared first positions' ids.

        Returns:
            The cache of one pass over them.
        """
        mask = torch.ones_like(tokens)
        return self._extend(tokens, mask, None, (), True, True, self.decoding() == "unbridged")[1]

    def run_shared(
        self,
        tokens: torch.Tensor,
        past: Any,
        *,
        hooks: Hooks = (),
        rows: Sequence[int],
        start: int = 0,
        state: Any = None,
        copies: int = 1,
    ) -> torch.Tensor:
        """Logits as :meth:`run` gives them, of a pass whose first positions are those ``past``
        holds (:meth:`prefix`; the pass must not change them): only the later positions of
        ``tokens`` run, each layer attending to the kept keys and values. ``rows`` (the
        positions read) must be later ones; ``state`` is what enters block ``start`` at the
        later positions only; hooks see the later positions only.

        Args:
            tokens: ``[batch, pos]`` ids, the kept positions included.
            past: :meth:`prefix` of ``tokens``' first positions.
            hooks: Hooks of the pass (activations of the later positions).
            rows: The positions read, all at or after the kept ones.
            start: The first block that runs.
            state: What enters block ``start`` at the later positions.
            copies: Copies of the batch in the pass.

        Returns:
            Logits ``[copies * batch, pos, d_vocab]`` at ``rows`` (others as
            :func:`interp.runtime.base.scatter_rows` leaves them).

        Raises:
            InterpError: for a read row among the kept positions.
        """
        from transformers import DynamicCache

        n, shared = tokens.shape[1], past.get_seq_length()
        keep = kept_rows(rows, n)
        if keep is None or keep[0] < shared:
            raise InterpError(f"a pass after a kept prefix of {shared} positions reads row "
                              f"{keep[0] if keep else None}: read later rows")  # fmt: skip
        tiled = DynamicCache(config=self.model.interp_hf_model.config)
        for i, layer in enumerate(past.layers):
            tiled.update(repeat_copies(layer.keys, copies), repeat_copies(layer.values, copies), i)
        new = repeat_copies(tokens[:, shared:], copies)
        mask = torch.ones(new.shape[0], n, dtype=torch.long, device=new.device)
        logits, _ = self._extend(
            new, mask, tiled, hooks, True, False, self.decoding() == "unbridged",
            start=start, state=repeat_copies(state, copies), rows=[r - shared for r in keep],
        )  # fmt: skip
        return scatter_rows(logits, keep, n)

    def _extend(
        self,
        tokens: torch.Tensor,
        mask: torch.Tensor,
        past: Any,
        hooks: Hooks,
        keep: bool,
        last: bool,
        swap: bool,
        *,
        start: int = 0,
        state: Any = None,
        rows: list[int] | None = None,
    ) -> tuple[torch.Tensor, Any]:

        mask = mask.to(tokens.device).long()
        held = mask.shape[1] - tokens.shape[1]
        kwargs: dict[str, Any] = {"attention_mask": mask, "use_cache": keep}
        if self._positions:
            kwargs["position_ids"] = positions_of(mask, held)
        if last and self._rows:
            kwargs["logits_to_keep"] = 1
        elif rows is not None and self._rows:
            kwargs["logits_to_keep"] = torch.tensor(rows, dtype=torch.long, device=tokens.device)
        hf = self.model.interp_hf_model
        hooked = self.hooked(hooks)
        if not keep:
            if past is not None:
                raise InterpError("a pass without a cache cannot extend one")
            with hooked:
                logits = self.model(tokens, **kwargs)
            return (logits[:, -1:] if last else logits), None
        if past is None:
            from transformers import DynamicCache

            past = DynamicCache(config=hf.config)
        kwargs[self._cache_arg] = past
        if self._slots is None:  # found once per model
            self._slots, self._attentions = component_slots(hf), attentions(self.model)
        points = self.hook_points()
        live = {id(points[name]) for name, _ in hooks if name in points}
        skip = skipping_blocks(self.model.blocks, start, state)
        with cache_alias(self._attentions), unbridged(self._slots if swap else (), live):
            with hooked, skip:
                logits = self.model(tokens, **kwargs)
        return (logits[:, -1:] if last else logits), past
