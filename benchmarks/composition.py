"""Composition scores for every head pair: interp's Gram-matrix form vs TransformerLens's.

TransformerLens's ``composition_scores`` (what ``all_composition_scores`` uses)
multiplies factored matrices per head pair; :mod:`interp.analysis.heads.composition`
gets the same Frobenius norms from per-head Gram matrices, all pairs in one
matrix product. Printed in one run: both times, the ratio and the largest
difference, for a 12-layer GPT-2-style random model and, when installed,
SmolLM2-135M (270 heads, 72,900 pairs).

    python benchmarks/composition.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _util import best_time  # noqa: E402


def models():
    from interp.models.hf import random_gpt2

    yield "gpt2-style 12L x 8H", random_gpt2(12, d_model=256, n_heads=8, vocab=2000, n_ctx=256)
    try:
        from interp.models import load_model

        yield "smollm2-135m 30L x 9H", load_model("smollm2-135m")
    except Exception as exc:  # noqa: BLE001 - optional model
        print(f"(smollm2-135m skipped: {exc})")


def main() -> None:
    print(f"{'model':<24}{'kind':>5}{'ours s':>9}{'TL s':>9}{'ratio':>9}{'max |diff|':>12}")
    for name, model in models():
        print(_row(name, model, "K"))


def _row(name: str, model, kind: str) -> str:
    from transformer_lens.utilities.matrix import composition_scores as tl_scores

    from interp.analysis.heads.composition import composition_factors, composition_tensor

    with torch.no_grad():
        left, right = composition_factors(model, kind)
        layer = torch.arange(model.cfg.n_layers)
        mask = layer[:, None, None, None] < layer[None, None, :, None]

        def theirs():
            s = tl_scores(left, right, broadcast_dims=True)
            return torch.where(mask, s, torch.zeros_like(s))

        ours_t = best_time(lambda: composition_tensor(model, component=kind), repeat=2)
        theirs_t = best_time(theirs, repeat=1)
        diff = float((composition_tensor(model, component=kind) - theirs()).abs().max())
    return (
        f"{name:<24}{kind:>5}{ours_t:>9.2f}{theirs_t:>9.2f}{theirs_t / ours_t:>8.1f}x{diff:>12.2e}"
    )


if __name__ == "__main__":
    main()
