"""Lower precision that stays right: load memory, exactness gaps, and rankings in bfloat16.

Printed in one run:

* **Load peak.** A random-weight Llama folder (float32 safetensors, as
  ``save_pretrained`` writes) loaded in bfloat16, each load in a fresh process
  after a warm-up load of a tiny folder (imports paid): the peak resident
  memory above that, over the bfloat16 weights, for Hugging Face's own
  ``from_pretrained`` (memory-maps the float32 file while it converts) and for
  ``load_model`` (:mod:`interp.models.weights`: converts a piece at a time).
  Target: at most 1.5x. ``--size 1b`` builds the Llama-3.2-1B shape (1.24B
  parameters, 4.9 GB on disk, about a minute) and also measures the exactness
  gaps below on it; the default is a scaled-down shape (155M, the same share of
  weights in the embedding, 21%).
* **Exactness gaps.** Every claim of :mod:`interp.core.precision` measured in units of
  ``eps(dtype) * magnitude`` (the rule allows ``ULPS = 16``): the edge engine's
  probes (every receiver recomputed with a zero edit; every edge corrupted
  against the corrupted run), the resumed sweep against the plain loop, DLA rows
  against the model's logit difference, QK rows against its scores, on random
  grouped-query Llamas (2 and 4 layers) and ``induction-2l`` in bfloat16.
* **Rankings.** Spearman correlation between bfloat16 and float32 of (a) EAP
  scores over *every* edge of the graph and (b) zero-ablation effects of every
  head, on the circuits benchmark's task (SmolLM2-135M, name-mover prompts,
  logit difference IO - S; ``--prompts``), on ``induction-2l`` (repeated random
  tokens, loss; corrupted prompts break the first copy) and on a random
  grouped-query Llama (random tokens, a logit difference). Target >= 0.95.
  Beside each: how many of float32's top 20 are in bfloat16's top 20, and the
  forward time ratio bfloat16 / float32 (CPUs without bfloat16 units are slower).

    python benchmarks/precision.py [--size small|1b] [--prompts 16] [--skip-load | --load-only]
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _util import forward_time  # noqa: E402

SIZES = {  # hidden, intermediate, layers, heads, kv heads, vocab
    "small": (1024, 4096, 8, 16, 4, 32064),
    "1b": (2048, 8192, 16, 32, 8, 128256),
}

CHILD = """
import ctypes, gc, json, sys, threading, time
import torch
from interp.models import load_model
from transformers import AutoModelForCausalLM

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

how, folder, tiny = sys.argv[1:4]
load = (lambda d: load_model(d, dtype="bfloat16")) if how == "interp" else (
    lambda d: AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16))
load(tiny)
gc.collect(); ctypes.CDLL("libc.so.6").malloc_trim(0)
base = rss(); peak = [base]; done = threading.Event()

def watch():
    while not done.is_set():
        peak[0] = max(peak[0], rss()); time.sleep(0.002)

threading.Thread(target=watch, daemon=True).start()
t = time.perf_counter(); model = load(folder); t = time.perf_counter() - t
done.set()
w = sum(p.numel() * p.element_size() for p in model.parameters())
print(json.dumps({"weights": w, "extra": peak[0] - base, "seconds": t}))
"""


GAPS = """
import json, sys
sys.path.insert(0, sys.argv[2])
from precision import gaps
from interp.models import load_model
print(json.dumps(gaps(load_model(sys.argv[1], dtype="bfloat16"), 1000)))
"""


def llama_folder(path: Path, size: tuple[int, ...]) -> int:
    """A random-weight Llama folder (float32, tied embeddings); its parameter count."""
    from transformers import LlamaConfig, LlamaForCausalLM

    h, i, L, H, kv, V = size
    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=h, intermediate_size=i, num_hidden_layers=L, num_attention_heads=H,
        num_key_value_heads=kv, head_dim=h // H, vocab_size=V, tie_word_embeddings=True,
        bos_token_id=0, eos_token_id=1, pad_token_id=1, interp_tokenizer="word",
    )  # fmt: skip
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(path)
    n = sum(p.numel() for p in model.parameters())
    del model
    return n


def load_peaks(size: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        big, tiny = Path(tmp) / "big", Path(tmp) / "tiny"
        n = llama_folder(big, SIZES[size])
        llama_folder(tiny, (64, 128, 2, 4, 2, 100))
        print(f"bfloat16 load of a random Llama folder ({size}: {n / 1e6:.0f}M parameters):")
        for how in ("transformers", "interp"):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, how, str(big), str(tiny)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            r = json.loads(out.stdout.strip().splitlines()[-1])
            name = "from_pretrained (mmap)" if how == "transformers" else "load_model"
            print(
                f"  {name:24s} peak {r['extra'] / 1e9:5.2f} GB above the warm process = "
                f"{r['extra'] / r['weights']:.2f}x the bfloat16 weights ({r['weights'] / 1e9:.2f} "
                f"GB); {r['seconds']:.1f} s"
            )
        if size != "small":  # the exactness gaps at this size too (the probes that refused EAP)
            out = subprocess.run(
                [sys.executable, "-c", GAPS, str(big), str(Path(__file__).parent)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            g = json.loads(out.stdout.strip().splitlines()[-1])
            cells = ", ".join(f"{k} {v:.2f}" for k, v in g.items())
            print(f"  exactness gaps in bfloat16 at {size} (eps * magnitude): {cells}")


def llama_pair(layers: int, init: float = 0.02):
    """A random grouped-query Llama bridge in float32 and its bfloat16 twin (same weights)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from interp.models.hf import bridge_from_hf

    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=50, max_position_embeddings=64, bos_token_id=0,
        eos_token_id=1, pad_token_id=1, initializer_range=init,
    )  # fmt: skip
    hf = LlamaForCausalLM(cfg)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in hf.parameters():  # move norms and biases off 1 and 0
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    half = copy.deepcopy(hf).to(torch.bfloat16)
    arch = "meta-llama/Llama-3.2-1B"
    return bridge_from_hf(hf, architecture_name=arch), bridge_from_hf(half, architecture_name=arch)


def gaps(model, vocab: int) -> dict[str, float]:
    """Each claim's gap in units of eps(dtype) * its magnitude (module docstring)."""
    from interp.analysis import direct_logit_attribution, qk_attribution
    from interp.core.precision import ULPS
    from interp.engine.edges import run as edges
    from interp.engine.edges.graph import build_graph
    from interp.engine.edges.run import EdgeRun
    from interp.engine.sweeps import paths
    from interp.engine.sweeps.sites import site
    from interp.runtime import runtime_of

    eps = torch.finfo(next(model.parameters()).dtype).eps
    gen = torch.Generator().manual_seed(0)
    clean, corrupted = (torch.randint(2, vocab, (3, 10), generator=gen) for _ in range(2))
    rt, graph = runtime_of(model), build_graph(model)
    parts = edges.layer_parts(rt)

    def rel(got, want):
        return float((got.float() - want.float()).abs().max()) / (
            eps * max(1.0, float(want.float().abs().max()))
        )

    out = {}
    with torch.no_grad():
        a, b = clean[:1, :6], corrupted[:1, :6]
        c_out, c_logits = edges.sender_outputs(rt, graph, a, parts=parts)
        k_out, k_logits = edges.sender_outputs(rt, graph, b, parts=parts)
        force = torch.as_tensor(graph.valid, dtype=torch.float32)[None]
        zero = edges.run(rt, a, EdgeRun(graph, parts, force, c_out, c_out, 1))
        every = edges.run(rt, a, EdgeRun(graph, parts, force, k_out, None, 1))
        out["edges: recomputed"] = rel(zero, c_logits)
        out["edges: every edge"] = rel(every, k_logits)
        last, probe = [site("z", rt.n_layers - 1, head=0)], clean[:1, :8]
        resumed = paths.ResumeBlocks(rt, probe, {rt.n_layers - 1}).run([last], None, None)
        out["sweep: resumed"] = rel(resumed[0], paths.loop_pass(rt, probe, [last], None)[0])
    dla = direct_logit_attribution(model, clean, answer=5, wrong=9)
    size = dla.attrs["remainder_tol"] / (ULPS * eps)  # the magnitude the claim names
    out["dla: rows vs logit diff"] = abs(dla["value"].sum() - dla.attrs["total"]) / (eps * size)
    qk = qk_attribution(model, clean, layer=rt.n_layers - 1, head=1)
    out["qk: rows vs scores"] = qk.attrs["score_gap"] / eps
    return out


def spearman(a, b) -> float:
    return float(a.rank().corr(b.reindex(a.index).rank()))


def top_overlap(a, b, k: int = 20) -> int:
    return len(set(a.abs().nlargest(k).index) & set(b.abs().nlargest(k).index))


def compare(name: str, pair, tokens, corrupted, metric) -> None:
    """Spearman of EAP over every edge and of zero-ablation over every head, bf16 vs f32."""
    from interp.analysis import ablate_heads, attribute_edges

    f32, b16 = pair
    ratio = forward_time(b16, tokens, 2) / forward_time(f32, tokens, 2)
    eap = [
        attribute_edges(m, tokens, corrupted_tokens=corrupted, metric=metric).set_index("label")[
            "estimate"
        ]
        for m in pair
    ]
    abl = [ablate_heads(m, tokens, metric=metric).set_index("label")["effect"] for m in pair]
    print(
        f"  {name}: EAP over {len(eap[0]):,} edges Spearman {spearman(*eap):.4f} (top-20 overlap "
        f"{top_overlap(*eap)}); zero ablation of {len(abl[0])} heads Spearman "
        f"{spearman(*abl):.4f} (top-20 overlap {top_overlap(*abl)}); bf16/f32 forward time "
        f"{ratio:.1f}x"
    )


def main() -> None:
    from interp.core.metrics import logit_diff_metric, loss_metric
    from interp.core.precision import ULPS
    from interp.datasets import name_mover_prompts, repeated_tokens
    from interp.models import load_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=list(SIZES), default="small")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--skip-load", action="store_true")
    parser.add_argument("--load-only", action="store_true")
    args = parser.parse_args()
    if not args.skip_load:
        load_peaks(args.size)
    if args.load_only:
        return

    print(f"exactness gaps in bfloat16, in eps * magnitude (the rule allows {ULPS}):")
    models = {f"llama {L} layers": (llama_pair(L)[1], 50) for L in (2, 4)}
    models["induction-2l"] = (load_model("induction-2l", dtype="bfloat16"), 64)
    for name, (model, vocab) in models.items():
        print(f"  {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in gaps(model, vocab).items()))

    print("rankings, bfloat16 against float32:")
    smol = load_model("smollm2-135m")
    pair = (smol, load_model("smollm2-135m", dtype="bfloat16"))
    p = name_mover_prompts(args.prompts, seed=0, tokenizer=smol.tokenizer)
    compare(
        f"SmolLM2-135M, {args.prompts} name-mover prompts, logit diff IO - S",
        pair, p.clean, p.corrupted, logit_diff_metric(p.io_ids, p.s_ids),
    )  # fmt: skip
    data = repeated_tokens(16, d_vocab=64, seq_len=32, segment_lengths=(8, 12), seed=1)
    corrupt = data.tokens.clone()
    corrupt[:, 1:12] = torch.randint(1, 64, (16, 11), generator=torch.Generator().manual_seed(3))
    ind = tuple(load_model("induction-2l", dtype=d) for d in ("float32", "bfloat16"))
    compare(
        "induction-2l, 16 repeated sequences, loss", ind, data.tokens, corrupt,
        loss_metric(data.loss_mask),
    )  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    clean, corrupted = (torch.randint(2, 50, (8, 12), generator=gen) for _ in range(2))
    answers = [torch.randint(2, 50, (8,), generator=gen) for _ in range(2)]
    compare(
        "random GQA Llama, 3 layers, logit diff", llama_pair(3), clean, corrupted,
        logit_diff_metric(*answers),
    )  # fmt: skip


if __name__ == "__main__":
    main()
