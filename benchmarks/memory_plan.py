"""The memory model of docs/scale.md, computed for real Llama shapes (no weights are read).

Each model is built from its published configuration on PyTorch's ``meta``
device (shapes only, no memory), so its parameter count is exact. Then:

* **weights**: parameters x 4 bytes (float32) or x 2 (bfloat16 / float16);
* **forward activations per token**: :func:`interp.memory.forward_bytes`'s model
  (the logits, a few residual-width tensors, the MLP's hidden layer and one
  layer's attention scores and pattern, at a context of ``--pos`` tokens),
  at 4 bytes (its own assumption) and at 2 (bfloat16 activations);
* **EAP per token of a prompt** (``attribute_edges(method="eap")``): the
  senders' outputs of the base run and their differences, ``2 x senders x
  d_model x 4`` (kept in float32 whatever the model's precision), the
  receivers' gradients ``receivers x d_model x 4``, and the backward pass's
  saved activations, estimated as ``(10 d_model + 4 d_mlp + 2 n_heads pos)``
  values per layer in the model's precision (queries, keys, values, the
  attention output and pattern, the MLP's gate, up and activation, the norms'
  inputs); senders and receivers counted as :func:`interp.engine.graph.build_graph`
  counts them (the embedding, every head and MLP; every query head, key/value
  head and MLP input, and the logits).

    python benchmarks/memory_plan.py [--pos 2048]
"""

from __future__ import annotations

import argparse
import types

SHAPES = {  # hidden, intermediate, layers, heads, kv heads, vocab, tied embeddings
    "Llama-3.2-1B": (2048, 8192, 16, 32, 8, 128256, True),
    "Llama-3.1-8B": (4096, 14336, 32, 32, 8, 128256, False),
    "Llama-3.1-70B": (8192, 28672, 80, 64, 8, 128256, False),
}


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


def row(name: str, shape: tuple, pos: int) -> dict:
    from interp.memory import forward_bytes

    h, i, L, H, kv, V, _ = shape
    n = n_params(shape)
    cfg = types.SimpleNamespace(d_model=h, d_mlp=i, n_heads=H, d_vocab=V, attn_only=False)
    fwd32 = forward_bytes(types.SimpleNamespace(cfg=cfg), 1, pos) / pos
    senders = 1 + L * (H + 1)
    receivers = L * (H + 2 * kv + 1) + 1
    stores = (2 * senders + receivers) * h * 4
    backward = L * (10 * h + 4 * i + 2 * H * pos) * 2
    return {
        "model": name,
        "params": n,
        "float32 GB": n * 4 / 1e9,
        "bfloat16 GB": n * 2 / 1e9,
        "forward MB/token f32": fwd32 / 1e6,
        "forward MB/token bf16": fwd32 / 2e6,
        "senders": senders,
        "receivers": receivers,
        "EAP stores MB/token": stores / 1e6,
        "EAP backward MB/token bf16": backward / 1e6,
        "EAP MB/token": (stores + backward) / 1e6,
    }


def _cell(v: object) -> str:
    if isinstance(v, float):
        return f"{v:,.2f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pos", type=int, default=2048, help="context length of a prompt")
    args = parser.parse_args()
    rows = [row(name, shape, args.pos) for name, shape in SHAPES.items()]
    print(f"context {args.pos} tokens")
    for key in rows[0]:
        cells = [_cell(r[key]) for r in rows]
        print(f"| {key:28s} | " + " | ".join(f"{c:>15s}" for c in cells) + " |")


if __name__ == "__main__":
    main()
