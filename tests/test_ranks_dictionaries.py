"""Dictionaries on two processes (issue 45, part 3): real ``torchrun`` ranks, gloo.

Two ranks of one thread each, launched by PyTorch's own launcher, train a dictionary and
read features inside the process group: each rank streams the activations of its own part
of each chunk's prompts, and what a step needs of the whole mini-batch (its mean and
variance, the gradients, the features that fired, the loss) is summed over the ranks
(:mod:`interp.dictionaries.ranks`); each rank's top contexts merge into the token set's
(:mod:`interp.dictionaries.top`). The dictionary after 20 steps equals one process's to
1e-4 of each tensor's scale, and the reading's contexts are one process's, in order.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from ranks_launch import LOOPBACK, launch

TENSORS = ("W_enc", "b_enc", "W_dec", "b_dec")

SCRIPT = textwrap.dedent(
    """
    import pickle, sys, warnings
    warnings.simplefilter("ignore")
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    sys.path.insert(0, sys.argv[2])
    from dictionary_cases import cases
    out = {name: fn() for name, fn in cases().items()}
    from interp.core.errors import InterpError
    from interp.dictionaries import train_dictionary
    try:  # a transcoder trains in one process: refused in the group, on every rank
        train_dictionary(cases.model, cases.tokens, hook="blocks.0.hook_resid_pre",
                         target_hook="blocks.0.hook_attn_out", n_features=8, k=2)
        out["transcoder"] = None
    except InterpError as exc:
        out["transcoder"] = str(exc)
    if dist.get_rank() == 0:
        with open(sys.argv[1], "wb") as f:
            pickle.dump(out, f)
    dist.destroy_process_group()
    """
)

CASES = textwrap.dedent(
    """
    from interp.datasets import repeated_tokens
    from interp.dictionaries import Dictionary, read_features, train_dictionary
    from interp.models import load_model


    def cases():
        m = load_model("induction-2l")
        cases.model = m
        # 10 sequences of 32 positions, 2 epochs of 32-position batches: 20 steps
        t = repeated_tokens(10, d_vocab=64, seq_len=32, seed=0,
                            segment_lengths=(5, 7, 9, 11)).tokens
        cases.tokens = t
        e = repeated_tokens(4, d_vocab=64, seq_len=32, seed=1,
                            segment_lengths=(5, 7, 9, 11)).tokens
        D = Dictionary.random(d_in=128, d_sae=16, architecture="topk", k=4,
                              hook_name="blocks.1.hook_resid_pre", seed=1)

        def train(budget):
            fit = train_dictionary(m, t, hook="blocks.0.hook_attn_out", n_features=64, k=4,
                                   batch_size=32, epochs=2, eval_tokens=e,
                                   memory_budget=budget)
            return {"D": {n: getattr(fit.dictionary, n) for n in
                          ("W_enc", "b_enc", "W_dec", "b_dec")},
                    "report": fit.report.as_dict(), "training": fit.training}

        def read():
            r = read_features(m, t, dictionary=D, top=5, skip_columns=1)
            return {"features": r.features, "contexts": r.contexts,
                    "window_acts": r.window_acts, "window_ids": r.window_ids,
                    "chunks": r.features.attrs["chunks"]}

        return {
            "train, one chunk": lambda: train(None),
            "train, two chunks": lambda: train(2_000_000),
            "read_features": read,
        }
    """
)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """What rank 0 of a 2-process ``torchrun`` gloo group returned, and one process's."""
    return launch(tmp_path_factory.mktemp("ranks_dictionaries"), SCRIPT, "dictionary_cases", CASES)


def _off(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest difference of ``a`` and ``b`` over ``b``'s scale (its largest |value|)."""
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max()) / max(float(b.abs().max()), 1e-12)


def _report_agrees(a: dict, b: dict) -> None:
    # the figures of the two dictionaries, each to 1% of its value (the dead share: of the
    # whole, so one feature of 64 in or out of it fails)
    for key in ("fraction_variance_explained", "l0", "loss_without_error"):
        assert abs(a[key] - b[key]) <= 0.01 * abs(b[key]), (key, a[key], b[key])
    assert abs(a["dead_fraction"] - b["dead_fraction"]) <= 0.01, (a, b)
    assert a["n_tokens"] == b["n_tokens"]


@pytest.mark.parametrize("name", ["train, one chunk", "train, two chunks"])
def test_two_ranks_train_the_one_process_dictionary(two_ranks, name):
    ranked, one = two_ranks
    a, b = ranked[name], one[name]
    assert a["training"]["steps"] == b["training"]["steps"] == 20
    assert a["training"]["chunks"] == b["training"]["chunks"]
    assert a["training"]["ranks"] == 2 and b["training"]["ranks"] == 1
    for n in TENSORS:
        # 20 Adam steps from the same start on the same batches: the ranks' sums of a
        # batch's gradient and statistics round differently (float32, ~1e-7), and Adam's
        # steps carry that on; 1e-4 of the tensor's scale is well above it and far below
        # what a different batch, shuffle or scale would move (those move it by ~1e-2)
        assert _off(a["D"][n], b["D"][n]) <= 1e-4, (name, n, _off(a["D"][n], b["D"][n]))
    # the scale constant and the final loss: one process's to float32 rounding
    assert a["training"]["input_scale"] == pytest.approx(b["training"]["input_scale"], rel=1e-6)
    assert a["training"]["final_loss"] == pytest.approx(b["training"]["final_loss"], rel=1e-4)
    assert a["training"]["final_dead_fraction"] == b["training"]["final_dead_fraction"]
    _report_agrees(a["report"], b["report"])


def test_two_ranks_read_the_one_process_features(two_ranks):
    ranked, one = two_ranks
    a, b = ranked["read_features"], one["read_features"]
    assert a["chunks"] >= 2  # each rank read a chunk
    keys = ["feature", "rank", "sequence", "pos", "token_id", "token", "context"]
    assert a["contexts"][keys].equals(b["contexts"][keys])  # the same contexts, in order
    assert np.array_equal(a["window_ids"], b["window_ids"])
    # activations: the encoder on other chunk shapes rounds differently (float32)
    for x, y in [(a["contexts"]["activation"].to_numpy(), b["contexts"]["activation"].to_numpy()),
                 (a["window_acts"], b["window_acts"])]:  # fmt: skip
        assert np.abs(x - y).max() <= 1e-6 * max(1.0, np.abs(y).max())
    fa, fb = a["features"], b["features"]
    assert fa["n_active"].equals(fb["n_active"])
    num = ["density", "mean_activation", "max_activation"]
    assert np.abs(fa[num].to_numpy() - fb[num].to_numpy()).max() <= 1e-6 * max(
        1.0, np.abs(fb[num].to_numpy()).max()
    )


def test_workers_train_the_one_process_dictionary(tmp_path):
    """``interp train dictionary --workers 2``: two ranks started by ``torch.distributed.run``
    write the dictionary one process writes (within the tolerance above), once: rank 0
    writes the folder and prints."""
    from interp.cli import main
    from interp.dictionaries import load_dictionary

    args = ["train", "dictionary", "--model", "induction-2l", "--hook", "blocks.0.hook_attn_out",
            "--features", "64", "--k", "4", "--corpus", "repeated", "--sequences", "8",
            "--eval-sequences", "4", "--seq-len", "40", "--batch-size", "32",
            "--quiet"]  # fmt: skip
    two, one = tmp_path / "two", tmp_path / "one"
    env = {**os.environ, **LOOPBACK, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-m", "interp", *args, "--out", str(two), "--workers",
                           "2"], capture_output=True, text=True, timeout=600, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count(f"wrote {two}") == 1  # rank 0 alone prints
    assert main([*args, "--out", str(one)]) == 0  # one process, here
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in one.iterdir())
    a, b = load_dictionary(two), load_dictionary(one)
    for n in TENSORS:
        x, y = getattr(a, n), getattr(b, n)
        assert _off(x, y) <= 1e-4, (n, _off(x, y))  # as above
    ca = json.loads((two / "cfg.json").read_text())
    cb = json.loads((one / "cfg.json").read_text())
    ra, rb = ca["metadata"]["report"], cb["metadata"]["report"]
    _report_agrees(ra, rb)
    assert ca["metadata"]["training"]["steps"] == cb["metadata"]["training"]["steps"]


def test_a_transcoder_is_refused_inside_the_group(two_ranks):
    """Transcoders train in one process: inside a process group the call is refused in one
    line that says so, before any pass."""
    said = two_ranks[0]["transcoder"]
    assert said is not None and "training a transcoder runs in one process" in said


def test_ties_go_to_the_earlier_position_whatever_the_chunks():
    """The top contexts are one total order (activation, then place), so merging chunks in
    any split, or ranks' running bests, gives the one order: here on exact ties."""
    from interp.dictionaries.top import Best, chunk_top

    g = torch.Generator().manual_seed(0)
    read = torch.randint(0, 4, (40, 6), generator=g).float()  # many exact ties
    v, i = chunk_top(read, 7)
    key = [sorted(range(40), key=lambda r, f=f: (-read[r, f].item(), r))[:7] for f in range(6)]
    assert i.T.tolist() == key
    for split in ([40], [13, 27], [5, 5, 10, 20], [1] * 40):
        best, at = Best(6, 1), 0
        for n in reversed(split):  # the chunks in any order, as ranks' bests may meet
            lo = 40 - at - n
            cv, ci = chunk_top(read[lo : lo + n], min(7, n))
            best.merge(cv, ci + lo, torch.zeros(*cv.shape, 1, dtype=torch.long),
                       torch.zeros(*cv.shape, 1), 7)  # fmt: skip
            at += n
        assert best.i.T.tolist() == key and torch.equal(best.v, v), split
