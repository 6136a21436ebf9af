"""Circuits on SmolLM2: edge attribution, exact circuit evaluation and path patching.

Printed side by side in one run, on 32 name-mover prompt pairs of 15 tokens
(logit difference IO - S), every cost in forward-pass equivalents (its wall
time over one plain forward of the clean tokens):

* EAP over all ~70,000 edges (target <= 3) and EAP-IG with 5 steps (<= 15);
  beside them the floor of any EAP: one corrupted forward plus one clean
  forward and backward, timed with plain ``torch.autograd``.
* ``evaluate_circuit`` of circuits of 10, 1,000 and 20,000 edges (target <= 2
  each, whatever the size), and a 20-point ``circuit_curve`` (<= 30).
* Exact path patching of every sender of one layer (9 heads and its MLP) to
  the logits: ``path_patch`` against ARENA's loop (a clean and a corrupted
  cache, then one hooked forward per sender with its corrupted - clean
  output added to the final residual stream), with the largest difference.
* Peak resident memory of EAP (sampled every 2 ms, above what was resident
  before it started; target < 4 GB).

    python benchmarks/circuits.py [--device cpu|cuda] [--layer 20]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _util import forward_time, peak_growth, timed  # noqa: E402


def eap_floor(model, clean, corrupted, metric) -> float:
    """One corrupted forward + one clean forward and backward (to the embedding)."""
    embed = model.hook_dict["hook_embed"]

    def run():
        with torch.no_grad():
            model(corrupted)
        grab = {}

        def keep(x, hook):
            x.requires_grad_(True)
            grab["x"] = x
            return x

        with torch.enable_grad():
            logits = model.run_with_hooks(clean, fwd_hooks=[(embed.name, keep)])
            metric(logits, clean).backward()

    run()
    return timed(run, 2)[0]


def main() -> None:
    from interp.analysis import (
        attribute_edges,
        build_graph,
        circuit_curve,
        evaluate_circuit,
        path_patch,
    )
    from interp.analysis.circuits.edge_attribution import score_matrix
    from interp.analysis.circuits.pruning import top_edges
    from interp.core.hooks import hook_name
    from interp.core.metrics import logit_diff_metric
    from interp.datasets import name_mover_prompts
    from interp.models import load_model

    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default=None)
    parser.add_argument("--layer", type=int, default=20)
    args = parser.parse_args()
    model = load_model("smollm2-135m", device=args.device)
    for p in model.parameters():
        p.requires_grad_(False)
    p = name_mover_prompts(32, seed=0, tokenizer=model.tokenizer)
    clean, corrupted = p.clean.to(model.cfg.device), p.corrupted.to(model.cfg.device)
    metric = logit_diff_metric(p.io_ids, p.s_ids)
    graph = build_graph(model)
    kw = dict(corrupted_tokens=corrupted, metric=metric)
    fwd = forward_time(model, clean)
    print(f"one forward of {tuple(clean.shape)} tokens: {fwd:.3f} s; graph: {graph.describe()}")

    floor = eap_floor(model, clean, corrupted, metric)
    attribute_edges(model, clean, **kw)  # warm-up (closed-form norm verdicts, allocator)
    eap_t, eap = timed(lambda: attribute_edges(model, clean, **kw), 2)
    ig_t, _ = timed(lambda: attribute_edges(model, clean, method="eap-ig", steps=5, **kw))
    print(f"EAP, {len(eap):,} edges: {eap_t:7.2f} s = {eap_t / fwd:5.2f} fwd-eq (target <= 3)")
    print(f"EAP-IG, 5 steps:      {ig_t:7.2f} s = {ig_t / fwd:5.2f} fwd-eq (target <= 15)")
    n_s, n_r = len(graph.senders), len(graph.receivers)
    width = clean.numel() * model.cfg.d_model
    left, right = torch.randn(n_s, width), torch.randn(width, n_r)
    product = timed(lambda l=left, r=right: l @ r, 3)[0]
    del left, right
    print(
        f"floor of any EAP: 1 corrupted fwd + 1 clean fwd and bwd (plain autograd) "
        f"{floor:.2f} s = {floor / fwd:.2f} fwd-eq, plus the scores' one product "
        f"[{n_s} x {width:,}] @ [{width:,} x {n_r}] {product:.2f} s = {product / fwd:.2f} fwd-eq"
    )

    from interp.engine.edges.task import begin_edge_task, check_edge_task

    base = timed(
        lambda: begin_edge_task(
            check_edge_task(model, clean, ablation="patch", **kw), base_pass="metric"
        ),
        2,
    )[0]
    print(
        f"circuit baselines (a plain clean forward; the corrupted run with every sender's "
        f"output): {base:.2f} s = {base / fwd:.2f} fwd-eq, once per task"
    )
    scores = score_matrix(graph, eap)
    for n in (10, 1000, 20000):
        mask = top_edges(scores, n)
        evaluate_circuit(model, clean, edges=mask, **kw)
        t, df = timed(lambda mask=mask: evaluate_circuit(model, clean, edges=mask, **kw), 2)
        print(
            f"evaluate_circuit, {n:>6,} edges: {t:6.2f} s = {t / fwd:5.2f} fwd-eq = baselines + "
            f"{(t - base) / fwd:.2f} for the circuit (target <= 2); "
            f"faithfulness {df['faithfulness'].item():.3f}"
        )
    t, curve = timed(lambda: circuit_curve(model, clean, scores=eap, points=20, **kw))
    per = (t - base) / len(curve)
    print(
        f"circuit_curve, {len(curve)} sizes: {t:6.2f} s = {t / fwd:5.2f} fwd-eq (target <= 30); "
        f"the two baselines {base / fwd:.2f}, then {per / fwd:.2f} per circuit"
    )

    layer = args.layer
    senders = [f"L{layer}H{h}" for h in range(model.cfg.n_heads)] + [f"L{layer}.mlp"]
    t_ours, ours = timed(lambda: path_patch(model, clean, senders=senders, **kw))

    def arena():
        with torch.no_grad():
            _, cc = model.run_with_cache(clean)
            _, kc = model.run_with_cache(corrupted)
            final = hook_name("resid_post", model.cfg.n_layers - 1)
            out = []
            for s in senders:
                if s.endswith(".mlp"):
                    name = hook_name("mlp_out", layer)
                    delta = kc[name] - cc[name]
                else:
                    h = int(s.split("H")[1])
                    name = hook_name("z", layer)
                    delta = (kc[name][:, :, h] - cc[name][:, :, h]) @ model.W_O[layer, h]
                logits = model.run_with_hooks(
                    clean, fwd_hooks=[(final, lambda x, hook, d=delta: x + d)]
                )
                out.append(float(metric(logits, clean)))
        return out

    t_arena, ref = timed(arena)
    diff = max(abs(a - b) for a, b in zip(ours.set_index("sender").loc[senders, "patched"], ref))
    print(f"path patching, {len(senders)} senders of layer {layer} -> logits:")
    print(f"  ARENA's loop (2 caches + 1 hooked forward per sender) {t_arena:7.2f} s")
    print(
        f"  interp path_patch                                     {t_ours:7.2f} s   "
        f"{t_arena / t_ours:.1f}x; max difference {diff:.1e}"
    )

    grew = peak_growth(lambda: attribute_edges(model, clean, **kw))
    print(f"EAP peak resident memory above the loaded model: {grew / 2**20:.0f} MiB (< 4 GB)")


if __name__ == "__main__":
    main()
