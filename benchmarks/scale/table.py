"""What :mod:`scale` reports: the rows of its JSON-lines file, one row's summary, the
Markdown table, and each shape's memory on paper (``--plan``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scale.calls import ANALYSES
from scale.peak import GiB
from scale.shapes import hf_config


def _key(row: dict[str, Any]) -> tuple:
    return tuple(
        row.get(k)
        for k in ("model", "shrink", "analysis", "batch", "pos", "dtype", "device", "memory")
    )


def read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a kill
    return rows


def summary(row: dict[str, Any]) -> str:
    if row.get("status") != "ok":
        return f"FAILED ({row.get('error')}): {row.get('last', '')}"
    if row["analysis"] == "load":
        return (
            f"{row['seconds']:.1f} s, peak {row['peak_gib']:.2f} GiB = "
            f"{row['peak_over_weights']:.2f} x the weights ({row['weights_gib']:.2f} GiB); "
            f"logit gap vs Hugging Face {row['logit_gap']:.1e}"
        )
    fe = row.get("forward_equivalents")
    est = row.get("estimate")
    return (
        f"{row['seconds']:.1f} s = {row['wall_fwd']:.2f} x one forward ({row['forward_s']:.2f} s);"
        f" counted {fe if fe is not None else '-'} fwd-eq; peak +{row['peak_gib']:.2f} GiB "
        f"({row['peak_over_weights']:.2f} x the weights)"
        + (f"; estimate {est['peak_bytes'] / GiB:.2f} GiB" if est and est.get("peak_bytes") else "")
        + (
            f"; one batch differs by {row['one_batch_max_diff']:.1e}"
            if "one_batch_max_diff" in row
            else ""
        )
    )


def _f(x: Any, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def table(path: Path) -> str:
    """The Markdown table of the last result of each measurement in ``path``."""
    latest: dict[tuple, dict[str, Any]] = {}
    for row in read_rows(path):
        latest[_key(row)] = row
    if not latest:
        return f"no results in {path}"
    lines = [
        "| model | tokens | analysis | seconds | x forward | fwd-eq (counted) | peak GiB over "
        "model | peak / weights | estimate GiB (/ measured) | notes |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    order = {a: i for i, a in enumerate(ANALYSES)}
    first: dict[tuple, int] = {}  # models in the order they were run
    for r in latest.values():
        first.setdefault(_key(r)[:2], len(first))
    rows = sorted(latest.values(), key=lambda r: (first[_key(r)[:2]], order.get(r["analysis"], 99)))
    for r in rows:
        shape = r["model"] + (f" / {r['shrink']}" if r.get("shrink", 1) > 1 else "")
        tokens = f"{r['batch']} x {r['pos']} {r['dtype']}"
        head = f"| {shape} | {tokens} | {r['analysis']} |"
        if r.get("status") != "ok":
            why = f"{r.get('error')}: {r.get('last', '')}"[:160].replace("|", "/")
            lines.append(f"{head} failed | | | | | | {why} |")
            continue
        notes = []
        if r["analysis"] == "load":
            gap = _f(r.get("logit_gap"), ".1e")
            notes.append(f"weights {r['weights_gib']:.2f} GiB; logit gap vs HF {gap}")
            lines.append(
                f"{head} {r['seconds']:.1f} | | | {r['peak_gib']:.2f} | "
                f"{r['peak_over_weights']:.2f} | | {'; '.join(notes)} |"
            )
            continue
        est = r.get("estimate") or {}
        if est.get("peak_bytes"):
            ratio = r["estimate_over_measured"]
            est_text = f"{est['peak_bytes'] / GiB:.2f} ({ratio:.2f})"
            notes.append(
                f"estimate {'within' if abs(ratio - 1) <= 0.25 else 'off by more than'} 25%"
            )
        else:
            est_text = "-" if r["analysis"] == "forward" else "missing"
        if est.get("forward_equivalents") is not None:
            notes.append(f"estimated {est['forward_equivalents']:g} fwd-eq")
        if r.get("chunked"):
            notes.append(f"{est['chunks']} chunks" if est.get("chunks") else "budget passed")
        if "one_batch_max_diff" in r:
            notes.append(f"vs one batch {r['one_batch_max_diff']:.1e}")
        notes.append(f"load avg {r['host_before']['loadavg']}-{r['host_after']['loadavg']}")
        for k in ("edges", "edges_from", "faithfulness", "senders", "heads", "head"):
            if k in r:
                notes.append(f"{k} {r[k]:.3f}" if isinstance(r[k], float) else f"{k} {r[k]}")
        lines.append(
            f"{head} {r['seconds']:.1f} | {r['wall_fwd']:.2f} | "
            f"{_f(r.get('forward_equivalents'))} | {r['peak_gib']:.2f} | "
            f"{r['peak_over_weights']:.2f} | {est_text} | {'; '.join(notes)} |"
        )
    return "\n".join(lines)


def plan(args: Any) -> None:
    """Each shape's memory on paper: the weights, one forward's activations
    (:func:`interp.core.memory.forward_bytes`), and what EAP stores (every sender's output and
    every receiver's gradient, ``[batch, pos, d_model]`` each), with the prompts per chunk
    that fit the budget."""
    from types import SimpleNamespace

    import torch
    from transformers import AutoModelForCausalLM

    from interp.core.memory import forward_bytes

    size = torch.empty((), dtype=getattr(torch, args.dtype)).element_size()
    budget = args.memory
    print(
        f"on paper: {args.batch} x {args.pos} tokens, {args.dtype}, budget "
        f"{_f(budget / GiB if budget else None)} GiB over the weights\n"
        "| model | parameters | weights GiB | one forward's activations GiB | EAP's senders + "
        "receivers GiB | EAP prompts per chunk |\n| --- | ---: | ---: | ---: | ---: | ---: |"
    )
    for name in args.models:
        cfg = hf_config(name, args.shrink)
        with torch.device("meta"):
            hf = AutoModelForCausalLM.from_config(cfg)
        params = sum(p.numel() for p in {id(p): p for p in hf.parameters()}.values())
        L, H, KV = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads
        tl = SimpleNamespace(
            n_heads=H, d_model=cfg.hidden_size, d_mlp=cfg.intermediate_size,
            d_vocab=cfg.vocab_size, attn_only=False,
        )  # fmt: skip
        act = forward_bytes(SimpleNamespace(cfg=tl), args.batch, args.pos) * size / 4
        senders, receivers = L * H + L + 1, L * (H + 2 * KV) + L + 1
        eap = (senders + receivers) * args.batch * args.pos * cfg.hidden_size * size
        per_prompt = (eap + act) / args.batch
        chunk = "-" if budget is None else f"{min(args.batch, int(budget // per_prompt))}"
        print(
            f"| {name} | {params / 1e9:.2f}B | {params * size / GiB:.1f} | {act / GiB:.2f} | "
            f"{eap / GiB:.2f} | {chunk} of {args.batch} |"
        )
