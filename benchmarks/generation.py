"""Generation on SmolLM2: ``generate`` with its key/value cache against Hugging Face's ``generate``.

Printed side by side in one run, greedy, ``--tokens`` new tokens after the generation
page's repeated-text prompt (``docs/generation.md``) (one prompt, then a batch of four):

* Hugging Face's ``generate`` on the unwrapped model loaded from the same folder;
* ``interp.analysis.generate`` on the bridge, no intervention (its tokens are checked
  equal to Hugging Face's): target at most 1.1x (issue 47);
* the same with the six induction heads zero-ablated (the three blocks that hold them
  run as the bridge's components, so their hooks fire; the same number of tokens);
* without the cache (every pass the whole sequence), for scale.

Each time is the best of ``--repeat`` rounds, the rounds interleaved so that a busy
machine slows every column alike; the ratios in CPU time (this process's, all threads)
are printed beside them, which other processes on a shared machine disturb less.
Run it alone: ``python benchmarks/generation.py [--tokens 32] [--repeat 3] [--threads N]``.
"""

from __future__ import annotations

import argparse
import time

import torch

HEADS = ["L18H6", "L17H3", "L17H4", "L17H5", "L18H7", "L23H2"]
TEXT = (
    "The old lighthouse keeper climbed the stairs every evening, lit the lamp, and wrote "
    "one line in his book about the ships he saw. "
)
PROMPT = TEXT + TEXT[:40]  # the text, then its start again: induction heads continue it


def measure(model, ref, text: list[str], n: int, repeat: int) -> None:
    """Time each way of generating ``n`` tokens after ``text`` (module docstring)."""
    from interp.analysis.generation import HeadAblation, generate
    from interp.analysis.generation.prompts import pad_id, prompts_of

    p = prompts_of(model, text)

    def hf() -> torch.Tensor:
        with torch.no_grad():
            return ref.generate(
                p.tokens, attention_mask=p.mask.long(), max_new_tokens=n, do_sample=False,
                eos_token_id=None, pad_token_id=pad_id(model),
            )  # fmt: skip

    ablated = [HeadAblation(heads=HEADS)]
    runs = {
        "hf generate": hf,
        "generate": lambda: generate(model, text, max_new_tokens=n).tokens,
        "generate, 6 heads ablated": lambda: (
            generate(model, text, max_new_tokens=n, interventions=ablated).tokens
        ),
        "generate, no cache": lambda: (
            generate(model, text, max_new_tokens=n, kv_cache=False).tokens
        ),
    }
    for fn in runs.values():  # warm up (and the runtime's once-per-model check)
        fn()
    wall = {k: float("inf") for k in runs}
    cpu = {k: float("inf") for k in runs}
    out = {}
    for _ in range(repeat):
        for name, fn in runs.items():
            t, c = time.perf_counter(), time.process_time()
            out[name] = fn()
            wall[name] = min(wall[name], time.perf_counter() - t)
            cpu[name] = min(cpu[name], time.process_time() - c)
    assert torch.equal(out["generate"], out["hf generate"]), "tokens differ from HF's"
    print(f"batch {len(text)} x {p.length} prompt tokens, {n} new tokens, greedy:")
    for name in runs:
        print(
            f"  {name:28s} {wall[name]:7.2f} s  ({wall[name] / wall['hf generate']:.2f}x HF; "
            f"CPU time {cpu[name] / cpu['hf generate']:.2f}x)"
        )


def main() -> None:
    import transformers as T

    from interp.models import load_model
    from interp.models.pretrained import smollm2_cache

    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = load_model("smollm2-135m")
    ref = T.AutoModelForCausalLM.from_pretrained(smollm2_cache()).eval()
    for batch in (1, 4):
        measure(model, ref, [PROMPT] * batch, args.tokens, args.repeat)


if __name__ == "__main__":
    main()
