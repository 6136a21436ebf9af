"""Resolve a ``--model`` argument to a hooked model (shipped alias, checkpoint or local HF dir).

This is the offline subset of model loading: the shipped ``induction-2l``
alias, a checkpoint directory written by ``interp train induction``, or a
local Hugging Face model directory (config.json plus weights; tokenizer files
optional), wrapped in a TransformerBridge. Nothing is downloaded.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from interp.errors import InterpError

ALIASES = ("induction-2l",)


def resolve_model(name: str) -> Any:
    """The model named by ``name`` (see module docstring), in eval mode.

    Raises:
        InterpError: for an unknown name or a directory that is neither kind.
        CheckpointError: for a damaged checkpoint.
    """
    from interp.models.checkpoints import load_induction_model
    from interp.training import CONFIG, WEIGHTS

    if name in ALIASES:
        return load_induction_model()
    path = Path(name)
    if path.is_dir():
        if (path / WEIGHTS).is_file() and (path / CONFIG).is_file():
            import json

            try:
                meta = json.loads((path / CONFIG).read_text())
            except json.JSONDecodeError:
                meta = {}
            if "format_version" in meta:
                return load_induction_model(path)
        if (path / "config.json").is_file():
            return _local_hf(path)
        raise InterpError(
            f"{name!r} is a directory but neither an interp checkpoint nor a "
            "Hugging Face model (no config.json)"
        )
    raise InterpError(
        f"unknown model {name!r}; use one of: {', '.join(ALIASES)}, an interp "
        "checkpoint directory, or a local Hugging Face model directory"
    )


def _local_hf(path: Path) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from interp.models.hf import bridge_from_hf, word_tokenizer

    try:
        hf = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise InterpError(f"cannot load a Hugging Face model from {str(path)!r}: {exc}") from exc
    try:
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, TypeError):
        tok = word_tokenizer(int(hf.config.vocab_size))
    return bridge_from_hf(hf, architecture_name=str(path), tokenizer=tok)
