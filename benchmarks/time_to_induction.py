"""Time from random init to a held-out induction score above 0.8 (2-core CPU target: <= 15 s).

Prints our trainer's steps and seconds, and the time a plain PyTorch loop
(same model, same batches, no evaluation or progress bar) takes for the same
number of steps, side by side.

    python benchmarks/time_to_induction.py
"""

from __future__ import annotations

import time

import torch

from interp.datasets import repeated_tokens
from interp.models.attn_only import AttnOnlyTransformer
from interp.training.induction import InductionTrainConfig, train_induction


def plain_loop(cfg: InductionTrainConfig, steps: int) -> float:
    model = AttnOnlyTransformer(cfg.model_config())
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    t = time.perf_counter()
    for _ in range(steps):
        tokens = repeated_tokens(
            cfg.batch_size, d_vocab=cfg.d_vocab, seq_len=cfg.n_ctx, repeats=None, generator=gen
        ).tokens
        loss = model(tokens, "loss")
        opt.zero_grad()
        loss.backward()
        opt.step()
    return time.perf_counter() - t


def main() -> None:
    cfg = InductionTrainConfig(eval_every=25)
    result = train_induction(cfg, progress=False, stop_when=lambda m: m["induction"] > 0.8)
    reached = result.history[-1]
    steps = int(reached["step"])
    plain = plain_loop(cfg, steps)
    print(
        f"induction > 0.8 on held-out lengths {cfg.eval_lengths}: "
        f"score {reached['induction']:.3f} at step {steps}"
    )
    print(f"{'':<28}{'steps':>8}{'seconds':>10}")
    print(f"{'interp train_induction':<28}{steps:>8}{reached['seconds']:>10.1f}")
    print(f"{'plain PyTorch loop':<28}{steps:>8}{plain:>10.1f}")
    print(f"ratio (ours / plain): {reached['seconds'] / plain:.2f}x  (ours includes evaluations)")


if __name__ == "__main__":
    main()
