"""sae-lens transcoder round trip: our transcoder folders load in sae-lens, and back.

sae-lens 6.x pins TransformerLens < 4, so it runs in a side virtualenv (as in
``benchmarks/sae_lens_roundtrip.py``: ``torch==2.13.0`` first, then ``sae-lens``). For each
sae-lens transcoder architecture (``transcoder`` = relu, ``skip_transcoder``,
``jumprelu_transcoder``, ``jumprelu_skip_transcoder``):

1. **ours -> sae-lens**: a transcoder built here (random weights, non-zero biases and
   thresholds, d_in != d_out) is saved with :meth:`Transcoder.save`, loaded by
   ``sae_lens.SAE.load_from_disk`` in the side venv, and both encode and run ``forward``
   on the same inputs (a skip transcoder's forward includes ``x @ W_skip.T``);
2. **sae-lens -> ours**: sae-lens builds a transcoder of the same architecture (random
   weights), saves it with ``save_model``, and :func:`load_transcoder` reads it here.

Our ``topk_transcoder`` (what ``train_dictionary(target_hook=...)`` makes) has no class in
sae-lens 6.54; the child records what ``load_from_disk`` says of it.

The child imports only sae-lens and torch. It prints the largest differences each way and
passes when every one is within 1e-5 (float32 products of the same numbers in another order).

Usage:
    python benchmarks/sae_lens_transcoder_roundtrip.py [--venv build/sae-lens-venv] [--json f]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import side_venv  # noqa: E402

# sae-lens name -> (our architecture, skip)
ARCHS = {
    "transcoder": ("relu", False),
    "skip_transcoder": ("relu", True),
    "jumprelu_transcoder": ("jumprelu", False),
    "jumprelu_skip_transcoder": ("jumprelu", True),
}
D_IN, D_OUT, D_SAE, N = 48, 40, 192, 256
TOL = 1e-5
HOOK_IN, HOOK_OUT = "blocks.0.ln2.hook_normalized", "blocks.0.hook_mlp_out"


def _child(work: Path) -> None:
    """In the side venv: load our folders, save sae-lens ones, run both on the inputs."""
    import sae_lens
    import torch
    from sae_lens import SAE
    from sae_lens.saes.transcoder import (
        JumpReLUSkipTranscoder,
        JumpReLUSkipTranscoderConfig,
        JumpReLUTranscoder,
        JumpReLUTranscoderConfig,
        SkipTranscoder,
        SkipTranscoderConfig,
        Transcoder,
        TranscoderConfig,
    )
    from safetensors.torch import load_file, save_file

    classes = {
        "transcoder": (Transcoder, TranscoderConfig),
        "skip_transcoder": (SkipTranscoder, SkipTranscoderConfig),
        "jumprelu_transcoder": (JumpReLUTranscoder, JumpReLUTranscoderConfig),
        "jumprelu_skip_transcoder": (JumpReLUSkipTranscoder, JumpReLUSkipTranscoderConfig),
    }
    x = load_file(str(work / "x.safetensors"))["x"]
    out: dict[str, torch.Tensor] = {}
    notes: dict[str, str] = {}
    g = torch.Generator().manual_seed(1)
    for arch, (cls, cfg_cls) in classes.items():
        sae = SAE.load_from_disk(work / f"ours_{arch}", device="cpu")
        notes[f"ours_{arch}"] = (
            f"{type(sae).__name__}, hook_name_out={sae.cfg.metadata.hook_name_out}"
        )
        with torch.no_grad():
            out[f"ours_{arch}_acts"] = sae.encode(x)
            out[f"ours_{arch}_out"] = sae(x)
        theirs = cls(
            cfg_cls(
                d_in=D_IN, d_sae=D_SAE, d_out=D_OUT, dtype="float32", apply_b_dec_to_input=False
            )
        )
        with torch.no_grad():
            for name, p in theirs.named_parameters():
                p.copy_(torch.randn(p.shape, generator=g) * (0.3 if name != "W_dec" else 1.0))
            if hasattr(theirs, "threshold"):
                theirs.threshold.copy_(torch.rand(D_SAE, generator=g) * 0.5)
        theirs.cfg.metadata.hook_name = HOOK_IN
        theirs.cfg.metadata.hook_name_out = HOOK_OUT
        theirs.save_model(work / f"theirs_{arch}")
        with torch.no_grad():
            out[f"theirs_{arch}_acts"] = theirs.encode(x)
            out[f"theirs_{arch}_out"] = theirs(x)
    try:
        SAE.load_from_disk(work / "ours_topk_transcoder", device="cpu")
        notes["topk_transcoder"] = "loaded"
    except Exception as e:  # noqa: BLE001 - recorded, whatever sae-lens raises
        notes["topk_transcoder"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    save_file({k: v.contiguous() for k, v in out.items()}, str(work / "sae_lens_out.safetensors"))
    (work / "notes.json").write_text(json.dumps(dict(version=sae_lens.__version__, **notes)))


def _ours(arch: str, skip: bool, seed: int):
    import torch

    from interp.dictionaries import Transcoder

    g = torch.Generator().manual_seed(seed)
    W_dec = torch.randn(D_SAE, D_OUT, generator=g)
    return Transcoder(
        torch.randn(D_IN, D_SAE, generator=g) * 0.3,
        torch.randn(D_SAE, generator=g) * 0.3,
        W_dec / W_dec.norm(dim=-1, keepdim=True),
        torch.randn(D_OUT, generator=g) * 0.3,
        architecture=arch,
        hook_name=HOOK_IN,
        hook_name_out=HOOK_OUT,
        k=8 if arch == "topk" else None,
        threshold=torch.rand(D_SAE, generator=g) * 0.5 if arch == "jumprelu" else None,
        W_skip=torch.randn(D_OUT, D_IN, generator=g) * 0.1 if skip else None,
        metadata={"model_name": "roundtrip"},
    )


def main(argv: list[str] | None = None) -> int:
    """Run the round trip; print the table (and write ``--json``); 0 when all agree."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", default="build/sae-lens-venv", help="the side virtualenv")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(Path(args.child))
        return 0
    import torch
    from safetensors.torch import load_file, save_file

    from interp.dictionaries import load_transcoder

    python = side_venv(Path(args.venv), "sae-lens", "sae_lens")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        x = torch.randn(N, D_IN, generator=torch.Generator().manual_seed(0))
        save_file({"x": x}, str(work / "x.safetensors"))
        ours = {a: _ours(*ARCHS[a], seed=10 + i) for i, a in enumerate(ARCHS)}
        for arch, T in ours.items():
            T.save(work / f"ours_{arch}")
        _ours("topk", False, seed=20).save(work / "ours_topk_transcoder")
        t = time.perf_counter()
        subprocess.run([str(python), __file__, "--child", str(work)], check=True)
        child_s = time.perf_counter() - t
        theirs = load_file(str(work / "sae_lens_out.safetensors"))
        notes = json.loads((work / "notes.json").read_text())
        with torch.no_grad():
            for arch in ARCHS:
                for way, T in (
                    ("ours -> sae-lens", ours[arch]),
                    ("sae-lens -> ours", load_transcoder(work / f"theirs_{arch}")),
                ):
                    key = "ours" if way.startswith("ours") else "theirs"
                    acts, want = T.encode(x), theirs[f"{key}_{arch}_acts"]
                    assert (T.hook_name, T.hook_name_out) == (HOOK_IN, HOOK_OUT)
                    rows.append(
                        dict(
                            architecture=arch,
                            way=way,
                            active=float((want != 0).float().sum(-1).mean()),
                            largest_output=float(theirs[f"{key}_{arch}_out"].abs().max()),
                            encode_max_abs_diff=float((acts - want).abs().max()),
                            forward_max_abs_diff=float(
                                (T(x) - theirs[f"{key}_{arch}_out"]).abs().max()
                            ),
                        )
                    )
    ok = all(r["encode_max_abs_diff"] <= TOL and r["forward_max_abs_diff"] <= TOL for r in rows)
    print(f"sae-lens {notes['version']} (side venv {args.venv}; child {child_s:.1f} s), torch "
          f"{torch.__version__}; d_in={D_IN}, d_out={D_OUT}, d_sae={D_SAE}, {N} inputs, "
          f"tolerance {TOL:g}")  # fmt: skip
    print(f"{'architecture':<26}{'way':<19}{'mean L0':>8}{'max out':>9}"
          f"{'encode max|diff|':>18}{'forward max|diff|':>19}")  # fmt: skip
    for r in rows:
        print(f"{r['architecture']:<26}{r['way']:<19}{r['active']:>8.1f}"
              f"{r['largest_output']:>9.2f}{r['encode_max_abs_diff']:>18.2e}"
              f"{r['forward_max_abs_diff']:>19.2e}")  # fmt: skip
    for arch in ARCHS:
        print(f"sae-lens read ours_{arch} as {notes[f'ours_{arch}']}")
    print(f"our topk_transcoder in sae-lens: {notes['topk_transcoder']}")
    print("PASS: encode and forward agree both ways" if ok else "FAIL: a difference above 1e-5")
    if args.json:
        Path(args.json).write_text(
            json.dumps(dict(notes=notes, tolerance=TOL, rows=rows, ok=ok), indent=2)
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
