"""Head-score functions vs the plain TransformerLens way (run_with_cache of everything).

For the shipped induction model and a 12-layer GPT-2-style random bridge: time
and activation memory held of ``interp.analysis.head_scores`` (reducing hooks on
``hook_pattern`` only) against ``run_with_cache()`` of every hook followed by the
same reduction.

    python benchmarks/score_functions.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _util import best_time, tensor_bytes  # noqa: E402

from interp.analysis.heads.scores import head_scores, probe_tokens  # noqa: E402
from interp.models import load_induction_model  # noqa: E402


def gpt2_bridge(n_layers: int = 12):
    from interp.models.hf import random_gpt2

    return random_gpt2(n_layers, d_model=256, n_heads=8, vocab=2000, n_ctx=256)


def compare(name: str, model, tokens) -> None:
    def ours():
        return head_scores(model, tokens)

    held = {}

    def plain():
        with torch.no_grad():
            _, cache = model.run_with_cache(tokens)
        held["bytes"] = tensor_bytes(cache)
        return head_scores(model, tokens, cache=cache)

    t_ours, t_plain = best_time(ours), best_time(plain)
    print(
        f"{name:<28}{t_ours * 1e3:>10.1f}{t_plain * 1e3:>12.1f}{t_plain / t_ours:>8.2f}x"
        f"{0:>12.1f}{held['bytes'] / 1e6:>14.1f}"
    )


def main() -> None:
    print(
        f"{'model':<28}{'ours ms':>10}{'cache-all ms':>12}{'ratio':>9}"
        f"{'ours MB held':>12}{'cache MB held':>14}"
    )
    ind = load_induction_model()
    compare("induction-2l (batch 64)", ind, probe_tokens(ind, n=64))
    big = gpt2_bridge()
    compare("gpt2-style 12L (batch 16)", big, probe_tokens(big, n=16, half_len=100))


if __name__ == "__main__":
    main()
