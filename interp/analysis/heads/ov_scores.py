"""Weight-based head scores for the atlas: OV copying, copy suppression, successorship.

All are read from each head's OV circuit ``E_l W_V W_O W_U`` (Elhage et al.
2021), with ``E_l`` the token embedding through layer ``l``'s ``ln1`` and
``W_U`` scaled by the final norm's gain, as :func:`interp.analysis.ov_circuit`
builds it (biases dropped: the direct path of a token to the logits):

* ``copying``: Elhage et al.'s eigenvalue positivity ``sum(lambda) /
  sum(|lambda|)`` (real parts) of the whole ``d_vocab x d_vocab`` circuit, from
  the ``d_head x d_head`` matrix ``W_O (W_U E_l) W_V`` that has the same
  non-zero eigenvalues (``W_U E_l`` is built once per norm, its gain applied
  per layer), equal to :func:`interp.analysis.copying_scores`;
* ``copying_top1``: the share of sampled tokens whose OV row, over the
  sample, is *highest* at the token itself (as
  :func:`interp.analysis.copying_scores`' ``top1_self_fraction`` over the
  whole vocabulary): how often the head's output raises the token it reads
  above every other, the size that eigenvalue positivity does not give;
* ``copy_suppression``: the share of sampled tokens whose OV row, over the
  sample, is *lowest* at the token itself: the head's output pushes down the
  token it reads, the OV signature McDougall et al. (2024) find in copy
  suppression heads (their test: the token among the 10 most suppressed of
  the vocabulary; here the sample stands for the vocabulary);
* ``successor``: the share of ordinal pairs (``1 -> 2``, ``Monday ->
  Tuesday``, ``January -> February``, ``A -> B``...: :data:`ORDINALS`, with
  and without a leading space, capitalised or not, where the tokenizer has
  both as single tokens) whose source row, over the tokens of its own
  sequence, is highest at the successor (Gould et al. 2024's succession score,
  on the direct path rather than their MLP0-augmented embedding).

Example:
    >>> from interp.models import load_model
    >>> m = load_model("induction-2l")
    >>> cs = copying_eigen(m)  # [layer, head]
    >>> tuple(cs.shape), bool(cs[1, 1] > 0.9)  # the induction head copies
    ((2, 2), True)
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import torch

from interp.analysis.senses.words import ordinary_word_ids
from interp.core.errors import InterpError
from interp.core.protocol import HookedModel, logits_meaningful
from interp.runtime import runtime_of

ORDINALS: dict[str, list[str]] = {
    "numbers": [str(i) for i in range(101)],
    "number words": "zero one two three four five six seven eight nine ten eleven twelve "
    "thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty".split(),
    "ordinals": "first second third fourth fifth sixth seventh eighth ninth tenth".split(),
    "days": "monday tuesday wednesday thursday friday saturday sunday".split(),
    "months": "january february march april may june july august september october "
    "november december".split(),
    "letters": [chr(c) for c in range(ord("a"), ord("z") + 1)],
    "roman": "I II III IV V VI VII VIII IX X".split(),
}
SAMPLE = 512  # tokens sampled for copy suppression and the top token pairs
MIN_PAIRS = 3  # fewer ordinal pairs than this in a vocabulary: no successor score


def _per_query(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    return x if x.shape[0] == n_heads else x.repeat_interleave(n_heads // x.shape[0], dim=0)


class OVCircuits:
    """Each layer's OV pieces, built once: normalised embedding rows, gains, ``W_U E``."""

    def __init__(self, model: HookedModel):
        self.model = model
        self.rt = runtime_of(model)
        self.n_heads = int(model.cfg.n_heads)
        W_U = model.W_U.detach().float()  # [d_model, d_vocab]
        final = self.rt.norm("final")
        if final is not None:
            g = final.gain
            W_U = W_U * g.float()[:, None] if g is not None else W_U
        self.W_U = W_U
        self.W_E = model.W_E.detach().float()
        self._rows: dict[tuple, torch.Tensor] = {}
        self._UE: dict[tuple, torch.Tensor] = {}

    def _key(self, layer: int) -> tuple:
        norm = self.rt.norm("ln1", layer)
        return ("none",) if norm is None else (norm.centred, norm.eps)

    def gain(self, layer: int) -> torch.Tensor | None:
        norm = self.rt.norm("ln1", layer)
        if norm is None:
            return None
        g = norm.gain
        return None if g is None else g.float()

    def rows(self, layer: int) -> torch.Tensor:
        """``[d_vocab, d_model]``: the embedding rows normalised as ``ln1`` does, no gain."""
        key = self._key(layer)
        if key not in self._rows:
            norm = self.rt.norm("ln1", layer)
            X = self.W_E
            self._rows[key] = X if norm is None else norm.centre(X) * norm.inverse_scale(X)
        return self._rows[key]

    def embed(self, layer: int, ids: torch.Tensor | None = None) -> torch.Tensor:
        """``E_l`` (rows ``ids``, or all): the embedding as ``layer``'s heads read it."""
        X = self.rows(layer) if ids is None else self.rows(layer)[ids.to(self.W_E.device)]
        g = self.gain(layer)
        return X if g is None else X * g

    def unembed_embed(self, layer: int) -> torch.Tensor:
        """``W_U E_l [d_model, d_model]`` (gain applied per layer to one product per norm)."""
        key = self._key(layer)
        if key not in self._UE:
            self._UE[key] = self.W_U @ self.rows(layer)
        g = self.gain(layer)
        return self._UE[key] if g is None else self._UE[key] * g[None, :]

    def values(self, layer: int, W_V: torch.Tensor | None = None) -> torch.Tensor:
        """``W_V [head, d_model, d_head]`` (the layer's, or ``W_V`` in its shape), one per query
        head."""
        W = self.rt.layer(layer).W["v"] if W_V is None else W_V
        return _per_query(W.float(), self.n_heads)

    def ov_rows(
        self, layer: int, W_V: torch.Tensor, sources: torch.Tensor, outputs: torch.Tensor
    ) -> torch.Tensor:
        """``[k * head, len(sources), len(outputs)]``: entries of the OV circuits of value
        weights ``W_V [k * head, d_model, d_head]`` (``k`` copies of the layer's heads: the
        atlas stacks its control's shuffles after the real weights) and the layer's ``W_O``."""
        W_O = self.rt.layer(layer).W_O.float()  # [head, d_head, d_model]
        A = torch.einsum("sm,hme->hse", self.embed(layer, sources), W_V)
        B = torch.einsum("hem,mt->het", W_O, self.W_U[:, outputs.to(self.W_U.device)])
        k = W_V.shape[0] // W_O.shape[0]
        return (A.view(k, W_O.shape[0], *A.shape[1:]) @ B).view(W_V.shape[0], *A.shape[1:2], -1)

    def copying(self, layer: int, W_V: torch.Tensor) -> torch.Tensor:
        """``[k * head]``: eigenvalue positivity of each OV circuit (as :meth:`ov_rows`): the
        eigenvalues of ``W_O (W_U E_l) W_V``, the ``d_head x d_head`` matrix with the whole
        circuit's non-zero eigenvalues."""
        W_O = self.rt.layer(layer).W_O.float()
        left = W_O @ self.unembed_embed(layer)  # [head, d_head, d_model], shared by every copy
        k = W_V.shape[0] // W_O.shape[0]
        M = (left @ W_V.view(k, W_O.shape[0], *W_V.shape[1:])).view(
            -1, *left.shape[1:2], W_V.shape[-1]
        )
        eig = torch.linalg.eigvals(M.double())
        denom = eig.abs().sum(-1)
        return torch.where(denom > 0, eig.real.sum(-1) / denom.clamp_min(1e-300), 0.0).float()

    def flops(self, copies: int, n_sample: int, n_ordinals: int) -> float:
        """The FLOPs of every layer's :meth:`copying`, :func:`self_shares` over ``n_sample``
        ids and :func:`successor_scores` over ``n_ordinals`` (0: none), on ``copies`` copies
        of each layer's value weights, and the ``W_U E`` products they share: their matrix
        products, as ``torch.utils.flop_counter`` counts them (the eigenvalues are not)."""
        d, V = self.W_U.shape
        L = int(self.model.cfg.n_layers)
        total = 2.0 * d * V * d * len({self._key(l) for l in range(L)})  # W_U E, once per norm
        for l in range(L):
            h, dh, _ = self.rt.layer(l).W_O.shape
            total += 2.0 * h * dh * d * d + 2.0 * copies * h * dh * d * dh  # copying
            for s in (n_sample, n_ordinals) if n_ordinals else (n_sample,):  # ov_rows
                total += 2.0 * s * d * copies * h * dh + 2.0 * h * dh * d * s
                total += 2.0 * copies * h * s * dh * s
        return total


def copying_eigen(model: HookedModel) -> torch.Tensor:
    """``[n_layers, n_heads]``: eigenvalue positivity of every head's OV circuit (module
    docstring), from ``d_head x d_head`` matrices."""
    ov = OVCircuits(model)
    return torch.stack([ov.copying(l, ov.values(l)) for l in range(int(model.cfg.n_layers))])


def self_shares(
    ov: OVCircuits, layer: int, W_V: torch.Tensor, ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``([k * head], [k * head])``: the share of ``ids`` whose OV row over ``ids`` is highest
    at themselves (``copying_top1``), and the share where it is lowest (``copy_suppression``),
    from one product."""
    M = ov.ov_rows(layer, W_V, ids, ids)  # [head, s, s]
    me = torch.arange(len(ids), device=M.device)
    highest = (M.argmax(-1) == me).float().mean(-1).cpu()
    return highest, (M.argmin(-1) == me).float().mean(-1).cpu()


def ordinal_runs(tokenizer: Any) -> list[list[int]]:
    """Each ordinal sequence as single-token ids, per spelling (with and without a leading
    space, lower-case and capitalised), split where a member is not one token (or is the
    unknown token); runs of at least two, each once."""
    runs: list[list[int]] = []
    seen: set[tuple[int, ...]] = set()
    unknown = getattr(tokenizer, "unk_token_id", None)
    for name, words in ORDINALS.items():
        spellings = {tuple(words)}
        if name != "roman":  # "II".capitalize() is "Ii"
            spellings.add(tuple(w.capitalize() for w in words))
        for spelled in sorted(spellings):
            for prefix in ("", " "):
                run: list[int] = []
                for w in [*spelled, None]:
                    ids = (
                        None
                        if w is None
                        else tokenizer.encode(prefix + w, add_special_tokens=False)
                    )
                    if ids is not None and len(ids) == 1 and ids[0] != unknown:
                        run.append(int(ids[0]))
                        continue
                    if len(run) >= 2 and tuple(run) not in seen:
                        seen.add(tuple(run))
                        runs.append(run)
                    run = []
    return runs


def successor_scores(
    ov: OVCircuits, layer: int, W_V: torch.Tensor, runs: list[list[int]]
) -> torch.Tensor:
    """``[head]``: the share of ordinal pairs whose source row, over its own run's tokens, is
    highest at the successor (module docstring)."""
    union = torch.tensor(sorted({t for run in runs for t in run}))
    where = {int(t): i for i, t in enumerate(union.tolist())}
    M = ov.ov_rows(layer, W_V, union, union)  # [head, u, u]: every run's rows at once
    hits = torch.zeros(W_V.shape[0])
    n = 0
    for run in runs:
        idx = torch.tensor([where[t] for t in run])
        best = M[:, idx[:-1]][:, :, idx].argmax(-1).cpu()  # [head, len - 1]
        hits += (best == torch.arange(1, len(run))).float().sum(-1)
        n += len(run) - 1
    return hits / max(n, 1)


def sample_ids(model: HookedModel, seed: int) -> torch.Tensor:
    """Up to :data:`SAMPLE` token ids (seeded): ordinary words when there is a tokenizer,
    else every id but BOS (0)."""

    if getattr(model, "tokenizer", None) is not None:
        try:
            ids = ordinary_word_ids(model)
        except InterpError:  # a toy tokenizer without words: every id
            ids = torch.arange(1, int(model.cfg.d_vocab))
    else:
        ids = torch.arange(1, int(model.cfg.d_vocab))
    if ids.numel() <= SAMPLE:
        return ids
    gen = torch.Generator().manual_seed(seed)
    return ids[torch.randperm(ids.numel(), generator=gen)[:SAMPLE]].sort().values


def top_token_pairs(
    model: HookedModel,
    *,
    layer: int,
    head: int,
    ids: torch.Tensor,
    offset: int | None,
    top: int = 8,
    circuits: OVCircuits | None = None,
) -> pd.DataFrame:
    """The ``top`` largest entries of a head's direct-path QK circuit (at ``offset`` on a
    rotary model, as :func:`interp.analysis.qk_circuit`) and OV circuit over the tokens
    ``ids``: columns ``circuit`` (``QK``/``OV``), ``first`` (query or source id),
    ``second`` (key or output id), ``value``. No OV rows where the model's logits mean
    nothing. ``circuits`` reuses the products of an earlier call."""
    from interp.analysis.heads.qk.bands import rotary_keys

    ov = circuits or OVCircuits(model)
    lay = runtime_of(model).layer(layer)
    E = ov.embed(layer, ids)
    n_heads = ov.n_heads
    Q = E @ lay.W["q"][head].float()
    K = E @ _per_query(lay.W["k"].float(), n_heads)[head]
    if offset is not None:
        Q, K = rotary_keys(model, layer, Q, K, int(offset))
    mats = {"QK": Q @ K.T}
    if logits_meaningful(model):
        mats["OV"] = ov.ov_rows(layer, ov.values(layer), ids, ids)[head]
    rows = []
    for name, M in mats.items():
        vals, flat = M.flatten().topk(min(top, M.numel()))
        for v, f in zip(vals.tolist(), flat.tolist(), strict=True):
            i, j = divmod(f, M.shape[1])
            rows.append((name, int(ids[i]), int(ids[j]), float(v)))
    return pd.DataFrame(rows, columns=["circuit", "first", "second", "value"])
