"""What the model writes without its induction head: the repeated half continued, greedily.

Each held-out sequence is cut after the first :data:`GIVEN` tokens of its second copy
(the loss curve shows the model misses the copy's first two predictions; from the third
on it copies), and the model continues it for the rest of the segment, once clean and
once with the induction head zero-ablated at every position
(:func:`interp.analysis.generation.generate`, through the key/value cache). A token of
the repeat *survives* when every token before it came out right too: the length of the
correct prefix of the continuation. Copying is what the head does, so without it the
repeat should not survive.

Example:
    >>> from interp.models import load_model
    >>> table = continuation(load_model("induction-2l"), (1, 1), n=4)
    >>> table.groupby("run")["survived"].mean().round(1).to_dict()
    {'L1H1 ablated': 0.0, 'clean': 8.0}
"""

from __future__ import annotations

import pandas as pd

from interp.analysis.generation import HeadAblation, generate
from interp.core.hooks import head_label
from interp.core.protocol import HookedModel
from interp.datasets import HELD_OUT_LENGTHS, repeated_tokens

GIVEN = 3  # tokens of the second copy in the prompt
SEED = 20_003  # distinct from the lab's other held-out batches


def continuation(
    model: HookedModel, head: tuple[int, int], *, n: int = 32, seed: int = 0
) -> pd.DataFrame:
    """One row per sequence and run (``clean``, ``L{l}H{h} ablated``): ``sequence,
    segment_len, run, survived, correct, repeat_tokens`` (the tokens asked for)."""
    cfg = model.cfg
    data = repeated_tokens(
        n, d_vocab=cfg.d_vocab, seq_len=cfg.n_ctx, segment_lengths=HELD_OUT_LENGTHS,
        max_prefix=4, seed=SEED + seed,
    )  # fmt: skip
    prompts, targets = [], []
    for i in range(n):
        start, length = int(data.second_start[i]), int(data.segment_len[i])
        prompts.append(data.tokens[i, : start + GIVEN].tolist())
        targets.append(data.tokens[i, start + GIVEN : start + length].tolist())
    steps = max(len(t) for t in targets)
    runs = {"clean": [], f"{head_label(*head)} ablated": [HeadAblation(heads=[head])]}
    rows = []
    for run, edits in runs.items():
        got = generate(model, prompts, max_new_tokens=steps, interventions=edits).new_tokens
        for i, target in enumerate(targets):
            out = got[i, : len(target)].tolist()
            right = [a == b for a, b in zip(out, target)]
            rows.append(
                {
                    "sequence": i,
                    "segment_len": int(data.segment_len[i]),
                    "run": run,
                    "survived": right.index(False) if False in right else len(right),
                    "correct": sum(right),
                    "repeat_tokens": len(target),
                }
            )
    df = pd.DataFrame(rows)
    df.attrs.update(
        analysis="generate (greedy), the repeated half continued",
        description=f"each held-out sequence cut after {GIVEN} tokens of its second copy and "
        f"continued greedily, clean and with {head_label(*head)} zero-ablated; survived = "
        "tokens of the repeat before the first wrong one",
        ablation="zero",
        seed=seed,
    )
    return df


def survival(df: pd.DataFrame) -> dict[str, float]:
    """Mean tokens that survive per run, and the mean tokens asked for (``of``)."""
    out = {str(k): float(v) for k, v in df.groupby("run")["survived"].mean().items()}
    out["of"] = float(df[df["run"] == "clean"]["repeat_tokens"].mean())
    return out


def summary_row(df: pd.DataFrame, label: str) -> tuple[str, str, str]:
    """The lab summary's row: tokens that survive, clean and without the head ``label``."""
    s = survival(df)
    return (
        f"repeat continued greedily: tokens that survive, clean / without {label}",
        f"{s['clean']:.1f} / {s[f'{label} ablated']:.1f} of {s['of']:.1f}",
        "clean near all; without the induction head near 0",
    )
