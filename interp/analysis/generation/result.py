"""What :func:`~interp.analysis.generation.generate` returns: the tokens, their log-probabilities,
and how they were made.

Example:
    >>> from interp.models import load_model
    >>> from interp.analysis.generation import generate
    >>> prompt = [[0, 28, 32, 10, 41, 50, 20, 8, 45, 28, 32, 10]]
    >>> g = generate(load_model("induction-2l"), prompt, max_new_tokens=2)
    >>> g.new_tokens.tolist(), list(g.frame().columns)[:4]
    ([[41, 50]], ['prompt', 'step', 'position', 'token_id'])
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd
import torch

from interp.core.protocol import HookedModel


@dataclasses.dataclass(frozen=True)
class Generation:
    """A batch of prompts and their continuations.

    Attributes:
        tokens: ``[batch, prompt_length + steps]`` integer ids: each prompt left-padded to
            ``prompt_length`` columns, then its new tokens (padding after a stop token).
        mask: ``[batch, prompt_length + steps]`` bool, True on real tokens.
        prompt_length: The prompts' columns (the longest prompt's tokens).
        logprobs: ``[batch, steps]``: each new token's log-probability under the model that
            chose it (temperature 1; NaN after a stop).
        logits: ``[batch, steps, d_vocab]`` when asked for (``keep_logits=True``), else None.
        stopped: ``[batch]`` bool: the prompt wrote a stop token.
        pieces: The new tokens as text, one list per prompt.
        attrs: How they were computed (:data:`interp.outputs.frames.SCHEMA`, plus
            ``sampling``, ``interventions`` and ``stop``).
    """

    tokens: torch.Tensor
    mask: torch.Tensor
    prompt_length: int
    logprobs: torch.Tensor
    logits: torch.Tensor | None
    stopped: torch.Tensor
    pieces: list[list[str]]
    attrs: dict[str, Any]

    @property
    def new_tokens(self) -> torch.Tensor:
        """``[batch, steps]``: the generated tokens (padding after a stop)."""
        return self.tokens[:, self.prompt_length :]

    @property
    def lengths(self) -> list[int]:
        """How many tokens each prompt got (its stop token included)."""
        return [int(n) for n in self.mask[:, self.prompt_length :].sum(-1).tolist()]

    @property
    def texts(self) -> list[str]:
        """Each prompt's continuation as one string."""
        return ["".join(p) for p in self.pieces]

    def frame(self) -> pd.DataFrame:
        """The continuations as a tidy table, one row per generated token.

        Returns:
            Columns ``prompt, step, position`` (in its own prompt: the real tokens before
            it), ``token_id, token, logprob``; ``attrs`` as :attr:`attrs`.
        """
        pads = (~self.mask[:, : self.prompt_length]).sum(-1)
        rows = []
        for b, n in enumerate(self.lengths):
            for s in range(n):
                rows.append(
                    {
                        "prompt": b,
                        "step": s,
                        "position": int(self.prompt_length - pads[b] + s),
                        "token_id": int(self.new_tokens[b, s]),
                        "token": self.pieces[b][s],
                        "logprob": float(self.logprobs[b, s]),
                    }
                )
        cols = ["prompt", "step", "position", "token_id", "token", "logprob"]
        df = pd.DataFrame(rows, columns=cols)
        df.attrs.update(self.attrs)
        return df


def token_pieces(model: HookedModel, ids: torch.Tensor, lengths: list[int]) -> list[list[str]]:
    """Each prompt's first ``lengths[b]`` ids of ``ids`` ``[batch, steps]`` as text, one
    string per token (the tokenizer's decoding of it alone; a word for models with a
    vocabulary; the id otherwise)."""
    tok = getattr(model, "tokenizer", None)
    vocab = getattr(getattr(model, "cfg", None), "vocab", None)
    out = []
    for b, n in enumerate(lengths):
        row = [int(i) for i in ids[b, :n].tolist()]
        if tok is not None and hasattr(tok, "decode"):
            out.append([tok.decode([i]) for i in row])
        elif vocab is not None:
            out.append([f" {vocab[i]}" for i in row])
        else:
            out.append([f" {i}" for i in row])
    return out
