"""Why a TransformerBridge pass costs more than the plain Hugging Face model's (issue 47).

For each model, the same weights called two ways on the same tokens, under ``no_grad``:
the bridge (``model(tokens)``, what every interp pass runs on a Hugging Face model) and a
plain Hugging Face model (``hf(tokens).logits``). Per shape of tokens: the Python calls one
pass makes (counted by ``cProfile``: deterministic, whatever else runs), the calls by
package, and the median time of each in alternating rounds with their ratio and the largest
difference of the logits.

Models: a random GPT-2-small shape (12 layers, d_model 768, vocabulary 50,257; the plain
model is built first and a deep copy is wrapped) and SmolLM2-135M (the plain model read
from the converted folder the loader keeps).

    python benchmarks/bridge_overhead.py [--rounds 7] [--threads 1] [--cpu-time] [--quick]

``--quick``: the GPT-2 shape only. Timings on a shared 2-core machine are noisy: read the
ratios within one run; ``--cpu-time --threads 1`` times what each spent itself.
"""

from __future__ import annotations

import argparse
import collections
import copy
import cProfile
import pstats
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _util import alternating, clock_of, clock_options  # noqa: E402

CLOCK = time.perf_counter


def gpt2_pair() -> tuple[object, object]:
    """A random GPT-2-small-shaped model, plainly and through the bridge."""
    import transformers as T

    from interp.models.hf import bridge_from_hf

    torch.manual_seed(0)
    cfg = T.GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=128)
    plain = T.GPT2LMHeadModel(cfg).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bridge = bridge_from_hf(copy.deepcopy(plain), architecture_name="gpt2")
    return plain, bridge


def smollm2_pair() -> tuple[object, object]:
    """SmolLM2-135M, plainly (its converted folder) and through the bridge."""
    from transformers import AutoModelForCausalLM

    from interp.models import load_model
    from interp.models.pretrained import ensure_smollm2

    plain = AutoModelForCausalLM.from_pretrained(ensure_smollm2(), local_files_only=True)
    return plain.eval(), load_model("smollm2-135m")


def python_calls(fn: Callable[[], object]) -> tuple[int, collections.Counter]:
    """Python function calls of one call of ``fn`` (after a warm-up), in all and by package."""
    fn()
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    by: collections.Counter = collections.Counter()
    for (path, _, _), (_, calls, *_rest) in pstats.Stats(prof).stats.items():
        tail = path.split("site-packages/")[-1]
        by[tail.split("/")[0] if "site-packages" in path else "other"] += calls
    return sum(by.values()), by


def compare(name: str, plain, bridge, shapes, rounds: int) -> None:
    """Print the calls and times of both ways, per shape of tokens."""
    vocab = int(bridge.cfg.d_vocab)
    for batch, pos in shapes:
        tokens = torch.randint(0, vocab, (batch, pos), generator=torch.Generator().manual_seed(0))

        def via_bridge(tokens: torch.Tensor = tokens) -> torch.Tensor:
            with torch.no_grad():
                return bridge(tokens)

        def via_hf(tokens: torch.Tensor = tokens) -> torch.Tensor:
            with torch.no_grad():
                return plain(tokens).logits

        diff = float((via_bridge() - via_hf()).abs().max())
        n_bridge, by_bridge = python_calls(via_bridge)
        n_hf, _ = python_calls(via_hf)
        ms = alternating({"bridge": via_bridge, "hf": via_hf}, rounds, CLOCK)
        top = ", ".join(f"{k} {v:,}" for k, v in by_bridge.most_common(4))
        print(
            f"{name} {batch} x {pos}: bridge {ms['bridge']:.1f} ms, plain {ms['hf']:.1f} ms, "
            f"{ms['bridge'] / ms['hf']:.3f}x; Python calls a pass {n_bridge:,} against "
            f"{n_hf:,} (bridge's by package: {top}); logits differ by {diff:.1e}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    clock_options(ap)
    ap.add_argument("--quick", action="store_true", help="the GPT-2 shape only")
    args = ap.parse_args()
    global CLOCK
    CLOCK = clock_of(args)
    shapes = [(32, 25), (4, 64)]
    print(f"{torch.get_num_threads()} threads, {'CPU time' if args.cpu_time else 'wall clock'}")
    compare("GPT-2 small shape", *gpt2_pair(), shapes, args.rounds)
    if not args.quick:
        compare("SmolLM2-135M", *smollm2_pair(), shapes, args.rounds)


if __name__ == "__main__":
    main()
