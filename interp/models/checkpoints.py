"""Our checkpoints: a folder with ``model.safetensors`` and ``config.json``, verified on load.

``config.json`` holds ``format_version``, the model config, the training
settings, the seed, the training history and the SHA-256 of the weights.
:func:`save_checkpoint` writes the weights first and the config last, each
atomically, so an interrupted save never leaves a config that points at
missing or partial weights. :func:`load_checkpoint` refuses anything that
does not verify (missing file, bad JSON, hash mismatch, wrong tensors) with a
:class:`~interp.core.errors.CheckpointError` naming the problem.

Example:
    >>> model = load_induction_model()
    >>> model.cfg.n_layers, model.cfg.n_heads
    (2, 2)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from interp.core.errors import CheckpointError, InterpError
from interp.core.paths import INDUCTION_CHECKPOINT, data_dir
from interp.models.attn_only import AttnOnlyConfig, AttnOnlyTransformer
from interp.outputs.files import check_output_dir, sha256_file, write_text, write_with

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
FORMAT_VERSION = 1


def is_checkpoint_dir(path: Path) -> bool:
    """Does ``path`` look like one of our checkpoints (rather than a Hugging Face folder)?

    True when its ``config.json`` names a ``format_version``, or cannot be read
    as JSON while a ``model.safetensors`` sits beside it (a damaged checkpoint
    is still a checkpoint, and is reported as such by :func:`load_checkpoint`).
    """
    cfg = path / CONFIG
    if not cfg.is_file():
        return (path / WEIGHTS).is_file() and not any(path.glob("*.bin"))
    try:
        meta = json.loads(cfg.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return (path / WEIGHTS).is_file()
    return isinstance(meta, dict) and "format_version" in meta


def save_checkpoint(
    model: AttnOnlyTransformer,
    out_dir: str | os.PathLike[str],
    *,
    meta: dict[str, Any] | None = None,
) -> Path:
    """Write ``model.safetensors`` and ``config.json`` into ``out_dir`` atomically.

    The weights are written first and the config last, each atomically, so an interrupted
    save never leaves a config that points at missing or partial weights.

    Args:
        model: A hooked model: here one of ours, an
            :class:`~interp.models.attn_only.AttnOnlyTransformer`.
        out_dir: The checkpoint folder, created if missing.
        meta: Keys stored in the config beside the model config and the weights' SHA-256
            (training settings, history, ...).

    Returns:
        The folder's path.

    Raises:
        InterpError: if ``out_dir`` is a file, lies under one, or is not writable.
    """
    from safetensors.torch import save_file

    out = check_output_dir(out_dir, "checkpoint folder")
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}
    write_with(out / WEIGHTS, lambda p: save_file(state, str(p)))
    config = {
        "format_version": FORMAT_VERSION,
        "model": model.cfg.to_dict(),
        **(meta or {}),
        "weights_sha256": sha256_file(out / WEIGHTS),
    }
    write_text(out / CONFIG, json.dumps(config, indent=2) + "\n")
    return out


def load_checkpoint(path: str | os.PathLike[str]) -> tuple[AttnOnlyTransformer, dict[str, Any]]:
    """Load a checkpoint folder written by :func:`save_checkpoint`, verifying it.

    Args:
        path: The checkpoint folder (``model.safetensors`` and ``config.json``).

    Returns:
        ``(model, meta)``: the :class:`~interp.models.attn_only.AttnOnlyTransformer` in eval
        mode, and the config's contents (``format_version``, ``model``, the training
        settings and history, ``weights_sha256``).

    Raises:
        CheckpointError: when the folder or a file is missing, the config is
            not valid JSON or not a model config, the weights' hash differs from
            the config's (a truncated or corrupt file), or tensors are missing or
            misshapen.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    d = Path(path)
    if not d.is_dir():
        raise CheckpointError(
            f"checkpoint {str(d)!r} not found (expected a folder with "
            f"{WEIGHTS} and {CONFIG}); train one with `interp train induction`"
        )
    for name in (WEIGHTS, CONFIG):
        if not (d / name).is_file():
            raise CheckpointError(f"checkpoint {str(d)!r} is incomplete: it has no {name}")
    try:
        meta = json.loads((d / CONFIG).read_text())
        model_cfg = AttnOnlyConfig.from_dict(meta["model"])
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(
            f"checkpoint config {str(d / CONFIG)!r} is not valid JSON ({exc}); the checkpoint "
            "is damaged: retrain it or restore the file"
        ) from None
    except (KeyError, TypeError, InterpError) as exc:
        raise CheckpointError(f"checkpoint config {str(d / CONFIG)!r} is invalid: {exc}") from None
    digest = sha256_file(d / WEIGHTS)
    if meta.get("weights_sha256") and digest != meta["weights_sha256"]:
        raise CheckpointError(
            f"checkpoint weights {str(d / WEIGHTS)!r} are corrupt or truncated: SHA-256 "
            f"{digest[:12]}... does not match the config's {meta['weights_sha256'][:12]}...; "
            "retrain or restore the file"
        )
    try:
        state = load_file(str(d / WEIGHTS))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read {str(d / WEIGHTS)!r}: {exc}") from None
    model = AttnOnlyTransformer(model_cfg)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"checkpoint tensors do not match its config: missing {missing[:3]}, "
            f"unexpected {unexpected[:3]}"
        )
    for k, v in state.items():
        if tuple(v.shape) != tuple(expected[k].shape):
            raise CheckpointError(
                f"tensor {k} has shape {tuple(v.shape)} but the config implies "
                f"{tuple(expected[k].shape)}"
            )
    model.load_state_dict(state)
    model.eval()
    return model, meta


def load_induction_model(path: str | os.PathLike[str] | None = None) -> AttnOnlyTransformer:
    """The shipped two-layer attention-only induction model (``data/induction-2l``), or ``path``.

    Use :func:`load_checkpoint` for the training history and settings too.

    Args:
        path: A checkpoint folder of ours; ``None`` is the shipped ``induction-2l``.

    Returns:
        The :class:`~interp.models.attn_only.AttnOnlyTransformer`, in eval mode.

    Raises:
        CheckpointError: if the checkpoint is missing, truncated, corrupt or
            does not match its config.
    """
    model, _ = load_checkpoint(path or data_dir() / INDUCTION_CHECKPOINT)
    return model
