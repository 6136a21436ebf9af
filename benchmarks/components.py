"""Direct logit attribution and component patching on SmolLM2, against the plain ways.

Printed side by side in one run, on the name-mover prompts (12 clean /
corrupted pairs of 15 tokens, logit difference IO - S):

* DLA of all 270 heads, 30 MLPs and the embeddings: wall time in forward-pass
  equivalents (its time over one plain forward of the same tokens); target
  at most 1.3.
* The residual stream patched at every layer and position (30 x 15 cells):
  ``patch_components(component="resid_pre", by="layer_position")`` against
  TransformerLens's ``patching.get_act_patch_resid_pre`` and against the
  plain loop (a clean run plus one ``run_with_hooks`` per cell), with the
  largest difference between them.

    python benchmarks/components.py [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _util import forward_time  # noqa: E402


def main() -> None:
    from transformer_lens import patching as tlp

    from interp.analysis import direct_logit_attribution, patch_components
    from interp.core.metrics import logit_diff_metric
    from interp.datasets import name_mover_prompts
    from interp.models import load_model

    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default=None)
    args = parser.parse_args()
    model = load_model("smollm2-135m", device=args.device)
    p = name_mover_prompts(12, seed=0, tokenizer=model.tokenizer)
    clean, corrupted = p.clean.to(model.cfg.device), p.corrupted.to(model.cfg.device)
    metric = logit_diff_metric(p.io_ids, p.s_ids)
    fwd = forward_time(model, clean)
    print(f"one forward of {tuple(clean.shape)} tokens: {fwd:.3f} s")

    t = time.perf_counter()
    for _ in range(3):
        dla = direct_logit_attribution(model, clean, answer=p.io_ids, wrong=p.s_ids)
    dla_t = (time.perf_counter() - t) / 3
    print(
        f"DLA, every head, MLP and embedding: {dla_t:.3f} s = {dla_t / fwd:.2f} forward-equiv. "
        f"(target <= 1.3); rows sum to {dla['value'].sum():.4f}, the model's own "
        f"{dla.attrs['total']:.4f}"
    )

    layers = range(model.cfg.n_layers)
    L, P = len(layers), clean.shape[1]
    with torch.no_grad():
        _, cache = model.run_with_cache(clean, names_filter=lambda name: "hook_resid_pre" in name)

    def m(logits):
        return metric(logits, corrupted)

    t = time.perf_counter()
    tl = tlp.get_act_patch_resid_pre(model, corrupted, cache, m).flatten()
    tl_t = time.perf_counter() - t

    t = time.perf_counter()
    with torch.no_grad():
        model(clean)  # the loop's clean run
        loop = []
        for l in layers:
            name = f"blocks.{l}.hook_resid_pre"
            for q in range(P):

                def hook(x, hook, q=q, name=name):
                    x = x.clone()
                    x[:, q] = cache[name][:, q]
                    return x

                loop.append(float(m(model.run_with_hooks(corrupted, fwd_hooks=[(name, hook)]))))
    loop_t = time.perf_counter() - t

    t = time.perf_counter()
    ours = patch_components(
        model, clean, corrupted_tokens=corrupted, component="resid_pre", by="layer_position",
        metric=metric, direction="denoising",
    )  # fmt: skip
    ours_t = time.perf_counter() - t
    mine = torch.tensor(ours["patched"].to_numpy())
    diff_tl = float((mine - tl.cpu().double()).abs().max())
    diff_loop = float((mine - torch.tensor(loop, dtype=torch.double)).abs().max())
    print(f"patching resid_pre, {L} layers x {P} positions = {L * P} cells:")
    print(f"  TransformerLens get_act_patch_resid_pre  {tl_t:8.1f} s")
    print(f"  plain loop (run_with_hooks per cell)     {loop_t:8.1f} s")
    print(
        f"  interp patch_components                  {ours_t:8.1f} s   "
        f"{tl_t / ours_t:.2f}x TL, {loop_t / ours_t:.2f}x loop; max difference "
        f"{diff_tl:.1e} (TL), {diff_loop:.1e} (loop); path {ours.attrs['engine']}"
    )


if __name__ == "__main__":
    main()
