"""sae-lens round trip: our folders load in sae-lens, sae-lens folders load here, and encode agrees.

sae-lens 6.x pins TransformerLens < 4, so it cannot share our virtualenv. This script makes a
side virtualenv (``torch==2.13.0`` first, so pip keeps the CPU build, then ``sae-lens``),
and then, for each architecture (relu = sae-lens ``standard``, topk, jumprelu):

1. **ours -> sae-lens**: a dictionary built here (random weights, non-zero biases, the
   decoder bias subtracted from the input) is saved with :meth:`Dictionary.save`, loaded by
   ``sae_lens.SAE.load_from_disk`` in the side venv, and both encode the same inputs;
2. **sae-lens -> ours**: sae-lens builds an SAE of the same architecture (random weights,
   and for topk ``rescale_acts_by_decoder_norm=True`` with decoder rows of unequal norms),
   saves it with ``save_model``, and :func:`load_dictionary` reads it here; both encode.

The child runs only sae-lens and torch (this file with ``--child``: nothing from ``interp``
is imported there). Activations travel as safetensors files. It prints the largest
difference of the activations (and of the reconstructions) each way, and passes when every
one is within 1e-5 (float32 matrix products of the same numbers in another order).

Usage:
    python benchmarks/sae_lens_roundtrip.py [--venv build/sae-lens-venv] [--json out.json]
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

ARCHS = ("relu", "topk", "jumprelu")
SAE_LENS_ARCH = {"relu": "standard", "topk": "topk", "jumprelu": "jumprelu"}
D_IN, D_SAE, K, N = 48, 192, 8, 256
TOL = 1e-5


def _child(work: Path) -> None:
    """In the side venv: load our folders, save sae-lens ones, encode the shared inputs."""
    import sae_lens
    import torch
    from sae_lens import (
        SAE,
        JumpReLUSAE,
        JumpReLUSAEConfig,
        StandardSAE,
        StandardSAEConfig,
        TopKSAE,
        TopKSAEConfig,
    )
    from safetensors.torch import load_file, save_file

    x = load_file(str(work / "x.safetensors"))["x"]
    out: dict[str, torch.Tensor] = {}
    for arch in ARCHS:
        sae = SAE.load_from_disk(work / f"ours_{arch}", device="cpu")
        with torch.no_grad():
            acts = sae.encode(x)
            out[f"ours_{arch}_acts"] = acts
            out[f"ours_{arch}_recon"] = sae.decode(acts)
    g = torch.Generator().manual_seed(1)
    for arch in ARCHS:
        common = dict(d_in=D_IN, d_sae=D_SAE, apply_b_dec_to_input=True, dtype="float32")
        if arch == "relu":
            sae = StandardSAE(StandardSAEConfig(**common))
        elif arch == "topk":
            sae = TopKSAE(TopKSAEConfig(k=K, rescale_acts_by_decoder_norm=True, **common))
        else:
            sae = JumpReLUSAE(JumpReLUSAEConfig(**common))
        with torch.no_grad():
            for name, p in sae.named_parameters():
                p.copy_(torch.randn(p.shape, generator=g) * (0.3 if name != "W_dec" else 1.0))
            # decoder rows of norms 0.5..1.5 (trained ones are near 1); for topk the
            # rescaling by these norms must be folded into our encoder and decoder right
            sae.W_dec.div_(sae.W_dec.norm(dim=-1, keepdim=True))
            sae.W_dec.mul_(torch.rand(D_SAE, 1, generator=g) + 0.5)
            if arch == "jumprelu":
                sae.threshold.copy_(torch.rand(D_SAE, generator=g) * 0.5)
            sae.cfg.metadata.hook_name = "blocks.0.hook_resid_pre"
            sae.save_model(work / f"theirs_{arch}")
            acts = sae.encode(x)
            out[f"theirs_{arch}_acts"] = acts
            out[f"theirs_{arch}_recon"] = sae.decode(acts)
    save_file({k: v.contiguous() for k, v in out.items()}, str(work / "sae_lens_out.safetensors"))
    (work / "sae_lens_version.txt").write_text(sae_lens.__version__)


def _ours(arch: str, seed: int):
    import torch

    from interp.dictionaries import Dictionary

    g = torch.Generator().manual_seed(seed)
    W_dec = torch.randn(D_SAE, D_IN, generator=g)
    W_dec = W_dec / W_dec.norm(dim=-1, keepdim=True)
    return Dictionary(
        torch.randn(D_IN, D_SAE, generator=g) * 0.3,
        torch.randn(D_SAE, generator=g) * 0.3,
        W_dec,
        torch.randn(D_IN, generator=g) * 0.3,
        architecture=arch,
        hook_name="blocks.0.hook_resid_pre",
        k=K if arch == "topk" else None,
        threshold=torch.rand(D_SAE, generator=g) * 0.5 if arch == "jumprelu" else None,
        apply_b_dec_to_input=True,
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

    from interp.dictionaries import load_dictionary

    python = side_venv(Path(args.venv), "sae-lens", "sae_lens")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        x = torch.randn(N, D_IN, generator=torch.Generator().manual_seed(0))
        save_file({"x": x}, str(work / "x.safetensors"))
        ours = {a: _ours(a, seed=10 + i) for i, a in enumerate(ARCHS)}
        for arch, D in ours.items():
            D.save(work / f"ours_{arch}")
        t = time.perf_counter()
        subprocess.run([str(python), __file__, "--child", str(work)], check=True)
        child_s = time.perf_counter() - t
        theirs = load_file(str(work / "sae_lens_out.safetensors"))
        version = (work / "sae_lens_version.txt").read_text()
        with torch.no_grad():
            for arch in ARCHS:
                for way, D in (
                    ("ours -> sae-lens", ours[arch]),
                    ("sae-lens -> ours", load_dictionary(work / f"theirs_{arch}")),
                ):
                    key = "ours" if way.startswith("ours") else "theirs"
                    acts = D.encode(x)
                    want = theirs[f"{key}_{arch}_acts"]
                    rows.append(
                        dict(
                            architecture=arch,
                            way=way,
                            active=float((want != 0).float().sum(-1).mean()),
                            largest_activation=float(want.abs().max()),
                            encode_max_abs_diff=float((acts - want).abs().max()),
                            decode_max_abs_diff=float(
                                (D.decode(acts) - theirs[f"{key}_{arch}_recon"]).abs().max()
                            ),
                        )
                    )
    ok = all(r["encode_max_abs_diff"] <= TOL and r["decode_max_abs_diff"] <= TOL for r in rows)
    print(f"sae-lens {version} (side venv {args.venv}; child {child_s:.1f} s), torch "
          f"{torch.__version__}; d_in={D_IN}, d_sae={D_SAE}, {N} inputs, "
          f"tolerance {TOL:g}")  # fmt: skip
    print(f"{'architecture':<13}{'way':<19}{'mean L0':>8}{'max act':>9}{'encode max|diff|':>18}"
          f"{'decode max|diff|':>18}")  # fmt: skip
    for r in rows:
        print(f"{r['architecture']:<13}{r['way']:<19}{r['active']:>8.1f}"
              f"{r['largest_activation']:>9.2f}{r['encode_max_abs_diff']:>18.2e}"
              f"{r['decode_max_abs_diff']:>18.2e}")  # fmt: skip
    print("PASS: encode and decode agree both ways" if ok else "FAIL: a difference above 1e-5")
    if args.json:
        Path(args.json).write_text(
            json.dumps(dict(sae_lens=version, tolerance=TOL, rows=rows, ok=ok), indent=2)
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
