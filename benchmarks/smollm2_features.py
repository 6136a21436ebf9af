"""Why SmolLM2-135M's induction head L18H6 attends, in dictionary features, with its numbers.

Loads SmolLM2-135M, a residual dictionary at the head's input (the query side) and a writer
dictionary on the attention output of the layer of its previous-token head L16H0 (the key
side), both trained on the offline corpus by ``interp train dictionary`` and kept under the
cache (``interp.core.paths.cache_dir()/dictionaries``), and runs
:func:`interp.experiments.pretrained_heads.features.head_in_features` on held-out text of the
corpus repeated twice after BOS: the head's score on each prompt's induction target split
over (query piece, key piece) pairs (rows summing to the model's score), the top feature
pairs with their meanings read from their own activations, the shares of the error terms and
decoder biases, and the top pair's features removed from each side's input, measured beside
the attribution. Prints the figures (and writes ``--json``).

Usage:
    python benchmarks/smollm2_features.py [--prompts 64] [--half 48] [--checks 8]
        [--query-dictionary DIR] [--key-dictionary DIR ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

TRAIN = (
    "OMP_NUM_THREADS=1 interp train dictionary --model smollm2-135m --corpus python "
    "--hook {hook} --features 4096 --k 32 --sequences 2400 --seq-len 128 --out {out}"
)
NAMES = {"smollm2-135m-resid18": "blocks.18.hook_resid_pre",
         "smollm2-135m-attn16": "blocks.16.hook_attn_out"}  # fmt: skip


def _default(name: str) -> Path:
    from interp.core.paths import cache_dir

    return cache_dir() / "dictionaries" / name


def _missing(folder: Path) -> str | None:
    """One line naming the command that trains ``folder``, when it holds no dictionary."""
    if (folder / "cfg.json").is_file():
        return None
    hook = NAMES.get(folder.name, "<hook>")
    return f"no dictionary at {folder}: train it first with `{TRAIN.format(hook=hook, out=folder)}`"


def _figures(D: object) -> dict:
    """A dictionary's training figures, from its ``cfg.json`` metadata."""
    m = D.metadata  # type: ignore[attr-defined]
    r, c, t = m.get("report", {}), m.get("corpus", {}), m.get("training", {})
    return {
        "hook": D.hook_name, "features": D.d_sae, "k": D.k,  # type: ignore[attr-defined]
        "corpus": c.get("name"), "tokens": c.get("n_tokens"),
        "positions_seen": t.get("positions_seen"), "steps": t.get("steps"),
        "variance_explained": r.get("fraction_variance_explained"), "l0": r.get("l0"),
        "dead_fraction": r.get("dead_fraction"), "clean_loss": r.get("clean_loss"),
        "loss_with_error": r.get("loss_with_error"),
        "loss_without_error": r.get("loss_without_error"), "command": m.get("command"),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Load, analyse, print the figures (and write ``--json``)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--layer", type=int, default=18)
    p.add_argument("--head", type=int, default=6)
    p.add_argument("--query-dictionary", type=Path, default=None,
                   help="residual dictionary at the head's input (default: the cache's "
                   "smollm2-135m-resid18)")  # fmt: skip
    p.add_argument("--key-dictionary", type=Path, action="append", default=None,
                   help="writer dictionary, repeatable (default: the cache's "
                   "smollm2-135m-attn16)")  # fmt: skip
    p.add_argument("--prompts", type=int, default=64, help="held-out repeated prompts")
    p.add_argument("--half", type=int, default=48, help="tokens that repeat, after BOS")
    p.add_argument("--reading-sequences", type=int, default=64,
                   help="held-out sequences the features' meanings are read on")  # fmt: skip
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--stride", type=int, default=32,
                   help="every stride-th held-out sequence (more of its files)")  # fmt: skip
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--checks", type=int, default=8, help="prompts whose top pair is removed")
    p.add_argument("--reach", type=int, default=24,
                   help="most pieces per side removed to reach the pair's features")  # fmt: skip
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    qd = args.query_dictionary or _default("smollm2-135m-resid18")
    kds = args.key_dictionary or [_default("smollm2-135m-attn16")]
    for folder in (qd, *kds):
        line = _missing(folder)
        if line:
            print(line, file=sys.stderr)
            return 2

    import pandas as pd
    import torch

    from interp.datasets import python_text
    from interp.dictionaries import load_dictionary
    from interp.experiments.pretrained_heads.features import head_in_features, repeated_text
    from interp.models import load_model

    torch.set_num_threads(args.threads)
    pd.set_option("display.width", 200)
    pd.set_option("display.max_colwidth", 120)
    load_before = os.getloadavg()
    t = time.perf_counter()
    model = load_model(args.model)
    R, Ws = load_dictionary(qd), [load_dictionary(f) for f in kds]
    load_s = time.perf_counter() - t
    data = repeated_text(model, prompts=args.prompts, half=args.half, stride=args.stride)
    reading = python_text(model, n_sequences=args.reading_sequences * args.stride,
                          seq_len=args.seq_len, split="test").tokens[:: args.stride]  # fmt: skip
    t = time.perf_counter()
    w = head_in_features(model, data, layer=args.layer, head=args.head, query_dictionary=R,
                         key_dictionaries=Ws, reading_tokens=reading, top=args.top,
                         checks=args.checks, reach=args.reach)  # fmt: skip
    analysis_s = time.perf_counter() - t
    per, a = w.per_prompt, w.per_prompt.attrs
    kinds = per["top_query_piece"].astype(str) + " x " + per["top_key_piece"].astype(str)
    err = per["top_query_piece"].str.endswith("error") | per["top_key_piece"].str.endswith("error")
    meaning = w.meanings.set_index(["side", "piece"])

    def says(side: str, piece: str) -> str:
        r = meaning.loc[(side, piece)]
        return (
            f"{piece} [token {r['token']!r} {r['token_share']:.0%}, previous "
            f"{r['previous_token']!r} {r['previous_share']:.0%}, active {r['active']}]"
        )

    figures = {
        "model": args.model, "head": w.label, "prompts": len(per), "half": args.half,
        "stride": args.stride, "reading_sequences": len(reading),
        "mean_score": w.score, "score_gap": a.get("score_gap"),
        "forward_equivalents": a.get("forward_equivalents"),
        "dictionaries": [_figures(D) for D in (R, *Ws)],
        "shares": w.shares, "sides": w.sides.to_dict("records"),
        "top_row_has_error": float(err.mean()),
        "top_rows": kinds.value_counts().head(5).to_dict(),
        "pairs": w.pairs.to_dict("records"), "meanings": w.meanings.to_dict("records"),
        "interventions": w.interventions.to_dict("records"), "agreeing": w.agreeing,
        "load_seconds": load_s, "analysis_seconds": analysis_s,
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
        "torch_threads": torch.get_num_threads(),
    }  # fmt: skip
    for d in figures["dictionaries"]:
        print("dictionary:", ", ".join(f"{k}={v}" for k, v in d.items()))
    print(f"{w.label} on {len(per)} prompts (BOS + 2 x {args.half}): mean score {w.score:.4f}, "
          f"rows vs model's score gap {a.get('score_gap'):.2e}")  # fmt: skip
    print("shares of the summed score:", {k: round(v, 4) for k, v in w.shares.items()})
    print(f"prompts whose top row has an error piece: {err.mean():.1%}; top rows:",
          figures["top_rows"])  # fmt: skip
    for side, part in w.sides.groupby("side", sort=False):
        print(f"{side} side:", ", ".join(f"{r.part} {r.share:.3f}" for r in part.itertuples()))
    print("top (query feature, key feature) pairs:")
    for r in w.pairs.itertuples():
        print(
            f"  {r.value:8.4f} ({r.share:6.2%}, active in {r.active}) "
            f"{says('query', r.query_piece)} x {says('key', r.key_piece)}"
        )
    print("top contexts:")
    for r in w.meanings.itertuples():
        print(f"  {r.side} {r.piece}: {r.contexts}")
    print("removals (top feature pair of each checked prompt; measured vs attribution):")
    print(w.interventions.to_string(index=False))
    print(f"within a tenth: {w.agreeing:.0%} of those measured")
    print(
        f"seconds: load {load_s:.1f}, analysis {analysis_s:.1f} ({torch.get_num_threads()} "
        f"thread(s); load average {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f})"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
