"""Which backend trains the induction model faster: our HookedRootModule class or
TransformerBridge.boot_native with the same sizes? Same batches, same optimiser.

    python benchmarks/train_backends.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from interp.datasets import repeated_tokens  # noqa: E402
from interp.models.attn_only import AttnOnlyTransformer  # noqa: E402
from interp.training.induction import InductionTrainConfig  # noqa: E402


def steps_per_second(model, batches, loss_fn) -> float:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    for tokens in batches[:3]:  # warm-up
        loss_fn(model, tokens).backward()
        opt.step()
        opt.zero_grad()
    t = time.perf_counter()
    for tokens in batches:
        loss = loss_fn(model, tokens)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return len(batches) / (time.perf_counter() - t)


def main(n_steps: int = 40) -> None:
    from transformer_lens.model_bridge import TransformerBridge

    cfg = InductionTrainConfig()
    gen = torch.Generator().manual_seed(0)
    batches = [
        repeated_tokens(
            cfg.batch_size, d_vocab=cfg.d_vocab, seq_len=cfg.n_ctx, repeats=None, generator=gen
        ).tokens
        for _ in range(n_steps)
    ]
    ours = AttnOnlyTransformer(cfg.model_config())
    bridge = TransformerBridge.boot_native(
        dict(
            n_layers=cfg.n_layers,
            d_model=cfg.d_model,
            n_heads=cfg.n_heads,
            d_head=cfg.d_head,
            n_ctx=cfg.n_ctx,
            d_vocab=cfg.d_vocab,
            attn_only=True,
            act_fn=None,
            normalization_type="LN",
            seed=0,
        )
    )
    ours_sps = steps_per_second(ours, batches, lambda m, t: m(t, "loss"))
    bridge_sps = steps_per_second(bridge, batches, lambda m, t: m(t, return_type="loss"))
    print(f"{'backend':<36}{'steps/s':>10}")
    print(f"{'interp AttnOnlyTransformer':<36}{ours_sps:>10.1f}")
    print(f"{'TransformerBridge.boot_native':<36}{bridge_sps:>10.1f}")
    print(f"ratio (ours / bridge): {ours_sps / bridge_sps:.2f}x")


if __name__ == "__main__":
    main()
