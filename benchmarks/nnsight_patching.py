"""``patch_heads`` against nnsight's per-head patching loop, in alternating pairs (issue 47).

nnsight is the library many researchers write this loop in: one trace of the corrupted
prompts saving every layer's head outputs (the input of ``attn.c_proj``), one trace of the
clean prompts for the baseline, then one trace per head that writes that head's slice of
the corrupted values into the clean run and reads the metric. ``patch_heads`` computes the
same table (noising: the corrupted run's head output patched into the clean run, the effect
``m(patched) - m(clean)``) in fewer forward-equivalents: each head's pass resumes at its
layer, and heads of one layer share a pass.

nnsight 0.8.1 needs transformers 5.x and keeps torch 2.13.0, but it is not one of our
dependencies: it runs in a side virtualenv (``torch==2.13.0`` first, so pip keeps the CPU
build, then ``nnsight``), made when missing. Both sides load the same random GPT-2 (saved
here with ``save_pretrained``). The child stays up and answers one loop per request, so the
two are timed in turn, pair by pair, each with the same torch threads, nothing else
running in either process. Both read one logit row per prompt: nnsight's trace is given
``logits_to_keep=1`` (Hugging Face's own way to unembed only the last position), and
``patch_heads`` unembeds the metric's row where the runtime can.

It prints every pair's times and ratio, the median ratio, the forward-equivalents
``patch_heads`` counts against nnsight's passes, and the largest difference of the effects
relative to their scale (passes when within 1e-4 of it).

The clean and corrupted prompts share their first ``--shared`` tokens (half by default, as
prompts that differ in a name or a few words do); ``--shared 0`` makes them differ from the
first token, where no pass can skip the shared positions (resume-suffix does not apply).

Usage:
    python benchmarks/nnsight_patching.py [--pairs 7] [--shared 12] [--venv build/nnsight-venv]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import side_venv  # noqa: E402

LAYERS, HEADS, D_MODEL, VOCAB = 4, 8, 256, 50257
PROMPTS, POS = 16, 24
A, B = 11, 12  # the metric: logit(A) - logit(B) at the last position
TOL = 1e-4  # of the effects' scale


def _child(folder: Path) -> None:
    """In the side venv: nnsight's loop on request (a line on stdin: run, print the time)."""
    import nnsight
    import torch
    import transformers as T
    from safetensors.torch import load_file

    torch.set_num_threads(int(sys.argv[sys.argv.index("--threads") + 1]))
    hf = T.GPT2LMHeadModel.from_pretrained(folder).eval()
    model = nnsight.NNsight(hf)
    toks = load_file(str(folder / "tokens.safetensors"))
    clean, corrupted = toks["clean"], toks["corrupted"]
    d_head = D_MODEL // HEADS

    def metric(logits: torch.Tensor) -> torch.Tensor:
        last = logits[:, -1].float()
        return (last[:, A] - last[:, B]).mean()

    def loop() -> torch.Tensor:
        with torch.no_grad():
            saved: list[torch.Tensor] = []  # appended inside the trace (a list built there
            with model.trace(corrupted, logits_to_keep=1):  # is not returned)
                for l in range(LAYERS):
                    saved.append(model.transformer.h[l].attn.c_proj.input.save())
            with model.trace(clean, logits_to_keep=1):
                base = model.output.logits.save()
            effects = torch.zeros(LAYERS, HEADS)
            for l in range(LAYERS):
                for h in range(HEADS):
                    sl = slice(h * d_head, (h + 1) * d_head)
                    with model.trace(clean, logits_to_keep=1):
                        model.transformer.h[l].attn.c_proj.input[:, :, sl] = saved[l][:, :, sl]
                        out = model.output.logits.save()
                    effects[l, h] = metric(out) - metric(base)
        return effects

    print(json.dumps({"ready": nnsight.__version__}), flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        t = time.perf_counter()
        effects = loop()
        s = time.perf_counter() - t
        print(json.dumps({"s": s, "effects": effects.tolist()}), flush=True)


def main(argv: list[str] | None = None) -> int:
    """Time both in alternating pairs; print the table (and write ``--json``); 0 when equal."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=7, help="timed pairs (after one warm-up)")
    parser.add_argument("--venv", default="build/nnsight-venv", help="the side virtualenv")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's)")
    parser.add_argument("--shared", type=int, default=POS // 2,
                        help="leading tokens the clean and corrupted prompts share")  # fmt: skip
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(Path(args.child))
        return 0
    import torch
    import transformers as T
    from safetensors.torch import save_file

    import interp.analysis as An
    from interp.core.metrics import logit_diff_metric
    from interp.models.hf import bridge_from_hf

    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    python = side_venv(Path(args.venv), "nnsight==0.8.1", "nnsight")
    torch.manual_seed(0)
    cfg = T.GPT2Config(n_layer=LAYERS, n_head=HEADS, n_embd=D_MODEL, vocab_size=VOCAB,
                       n_positions=64)  # fmt: skip
    hf = T.GPT2LMHeadModel(cfg).eval()
    g = torch.Generator().manual_seed(1)
    clean = torch.randint(100, VOCAB, (PROMPTS, POS), generator=g)
    corrupted = clean.clone()
    s = args.shared
    corrupted[:, s:] = torch.randint(100, VOCAB, (PROMPTS, POS - s), generator=g)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        hf.save_pretrained(folder)
        save_file({"clean": clean, "corrupted": corrupted}, str(folder / "tokens.safetensors"))
        child = subprocess.Popen(
            [str(python), __file__, "--child", str(folder), "--threads", str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert child.stdin is not None and child.stdout is not None
        version = json.loads(child.stdout.readline())["ready"]

        def theirs() -> tuple[float, list]:
            child.stdin.write("run\n")
            child.stdin.flush()
            got = json.loads(child.stdout.readline())
            return got["s"], got["effects"]

        model = bridge_from_hf(hf, architecture_name="gpt2")
        metric = logit_diff_metric(A, B)

        def ours() -> tuple[float, object]:
            t = time.perf_counter()
            df = An.patch_heads(model, clean, corrupted_tokens=corrupted, metric=metric)
            return time.perf_counter() - t, df

        ours(), theirs()  # warm-up: once-per-model checks, caches, first traces
        pairs = []
        for _ in range(args.pairs):
            a, df = ours()
            b, effects = theirs()
            pairs.append((a, b))
        child.stdin.write("stop\n")
        child.stdin.flush()
        child.wait(timeout=60)
    got = torch.tensor(df.pivot(index="layer", columns="head", values="effect").to_numpy())
    want = torch.tensor(effects)
    scale = float(want.abs().max())
    diff = float((got - want).abs().max()) / max(scale, 1e-12)
    ratios = [b / a for a, b in pairs]
    ok = diff <= TOL
    fe = float(df.attrs["forward_equivalents"])
    print(f"random GPT-2 ({LAYERS} layers x {HEADS} heads, d_model {D_MODEL}, vocab {VOCAB}), "
          f"{PROMPTS} x {POS} tokens ({args.shared} shared), noising every head, {threads} "
          f"torch threads; nnsight {version} in {args.venv}")  # fmt: skip
    print(f"{'pair':>4}{'patch_heads s':>15}{'nnsight s':>11}{'ratio':>8}")
    for i, (a, b) in enumerate(pairs):
        print(f"{i:>4}{a:>15.3f}{b:>11.3f}{b / a:>8.2f}")
    print(f"median ratio {statistics.median(ratios):.2f}x (min {min(ratios):.2f}, max "
          f"{max(ratios):.2f}); patch_heads counts {fe:g} forward-equivalents, nnsight runs "
          f"{LAYERS * HEADS + 2} passes; effects equal to {diff:.1e} of their scale "
          f"({scale:.3g})")  # fmt: skip
    print("PASS: equal effects" if ok else f"FAIL: effects differ by more than {TOL:g}")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(
            nnsight=version, threads=threads, shared=args.shared, pairs=pairs,
            median_ratio=statistics.median(ratios),
            forward_equivalents=fe, nnsight_passes=LAYERS * HEADS + 2, max_rel_diff=diff, ok=ok,
        ), indent=2))  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
