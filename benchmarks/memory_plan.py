"""Models past this machine, on paper: the toolkit's own memory model for real Llama shapes.

Each model is built from its published configuration on PyTorch's ``meta``
device (shapes only, no memory), so its parameter count is exact. Then the
same functions the analyses plan their chunks with (:mod:`interp.core.memory`,
:func:`interp.engine.edges.cost.eap_bytes`, :func:`interp.engine.chunks.plan_chunks`;
``benchmarks/memory_model.py`` checks them against measured peaks on the
Llama-3.2-1B shape) give, in float32 and in bfloat16:

* the weights;
* one forward pass's peak per prompt (:func:`interp.core.memory.forward_bytes`; logits at
  the last position, as a logit-difference metric reads);
* edge attribution's (EAP's) peak per prompt: the senders' outputs and their
  difference, every receiver's gradient, a backward pass's activations
  (senders and receivers counted as :func:`interp.engine.edges.graph.build_graph`
  counts them);
* how many prompts an EAP chunk holds under a budget, and the chunks of a
  dataset of ``--prompts`` prompts.

The senders' outputs and the receivers' gradients are float32 whatever the
model's precision (the sums that must hold are accumulated in float32).

    python benchmarks/memory_plan.py [--pos 128] [--prompts 64] [--budget-gib 60]
"""

from __future__ import annotations

import argparse
import types

SHAPES = {  # hidden, intermediate, layers, heads, kv heads, vocab, tied embeddings
    "Llama-3.2-1B": (2048, 8192, 16, 32, 8, 128256, True),
    "Llama-3.1-8B": (4096, 14336, 32, 32, 8, 128256, False),
    "Llama-3.1-70B": (8192, 28672, 80, 64, 8, 128256, False),
}
GB = 1e9


def n_params(shape: tuple) -> int:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    h, i, L, H, kv, V, tied = shape
    cfg = LlamaConfig(
        hidden_size=h, intermediate_size=i, num_hidden_layers=L, num_attention_heads=H,
        num_key_value_heads=kv, head_dim=h // H, vocab_size=V, tie_word_embeddings=tied,
    )  # fmt: skip
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    return sum(p.numel() for p in model.parameters())


def config_model(shape: tuple, dtype: str) -> types.SimpleNamespace:
    """A stand-in with only ``cfg``: what the memory model reads."""
    import torch

    h, i, L, H, kv, V, _ = shape
    cfg = types.SimpleNamespace(
        d_model=h, d_mlp=i, n_layers=L, n_heads=H, n_key_value_heads=kv, d_head=h // H,
        d_vocab=V, gated_mlp=True, attn_only=False, dtype=getattr(torch, dtype),
    )  # fmt: skip
    return types.SimpleNamespace(cfg=cfg)


def row(name: str, shape: tuple, args: argparse.Namespace, dtype: str) -> dict:
    from interp.core.memory import forward_bytes
    from interp.engine.chunks import Footprint, plan_chunks
    from interp.engine.edges.cost import eap_bytes

    h, i, L, H, kv, V, _ = shape
    model = config_model(shape, dtype)
    n = n_params(shape)
    senders = 1 + L * (H + 1)  # the embedding, every head and MLP
    receivers = L * (H + 2 * kv + 1) + 1  # query heads, key/value heads, MLP inputs, logits
    eap = eap_bytes(model, senders=senders, receivers=receivers, pos=args.pos, rows=(-1,))
    budget = int(args.budget_gib * 2**30)
    try:
        chunks = plan_chunks(args.prompts, Footprint(0, eap), budget=budget)
        per_chunk, n_chunks = max(c.stop - c.start for c in chunks), len(chunks)
    except Exception:  # noqa: BLE001 - one prompt does not fit the budget
        per_chunk, n_chunks = 0, 0
    return {
        "model": f"{name} {dtype}",
        "params": n,
        "weights GB": n * (4 if dtype == "float32" else 2) / GB,
        "forward GB / prompt": forward_bytes(model, 1, args.pos, rows=(-1,)) / GB,
        "senders x receivers": f"{senders} x {receivers}",
        "EAP GB / prompt": eap / GB,
        f"EAP prompts / chunk ({args.budget_gib:g} GiB)": per_chunk,
        f"EAP chunks of {args.prompts}": n_chunks,
    }


def _cell(v: object) -> str:
    if isinstance(v, float):
        return f"{v:,.2f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pos", type=int, default=128, help="tokens per prompt")
    parser.add_argument("--prompts", type=int, default=64, help="prompts in the dataset")
    parser.add_argument("--budget-gib", type=float, default=60.0, help="memory budget (GiB)")
    args = parser.parse_args()
    rows = [
        row(name, shape, args, dtype)
        for name, shape in SHAPES.items()
        for dtype in ("float32", "bfloat16")
    ]
    print(f"{args.prompts} prompts x {args.pos} tokens, budget {args.budget_gib:g} GiB")
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + " --- |" * len(rows[0]))
    for r in rows:
        print("| " + " | ".join(_cell(v) for v in r.values()) + " |")


if __name__ == "__main__":
    main()
