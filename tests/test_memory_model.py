"""The memory model's terms scale as the code that holds them does (no timing, no measuring).

``benchmarks/memory_model.py`` checks the estimates against measured peaks on
models of realistic size; here, cheaply, that each term grows with what it
counts: batch, prompt length, rows read, senders, copies.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from interp import analysis as A
from interp.core.memory import (
    HEAP_KEPT,
    Dims,
    backward_bytes,
    block_bytes,
    forward_bytes,
    logit_bytes,
    saved_bytes,
    stream_bytes,
)
from interp.core.metrics import logit_diff_metric
from interp.engine.edges.cost import edge_footprint
from interp.engine.edges.task import check_edge_task
from interp.engine.sweeps.cost import sweep_footprint as footprint
from interp.engine.sweeps.sites import head_edits
from interp.models import load_model
from interp.models.hf import random_llama
from interp.runtime import runtime_of


@pytest.fixture(scope="module")
def llama():
    return random_llama(3, d_model=32, n_heads=4, n_kv_heads=2, vocab=16)


@pytest.fixture(scope="module")
def native():
    return load_model("induction-2l")


def _tokens(model, b, p, seed=0):
    vocab = int(model.cfg.d_vocab)
    return torch.randint(2, vocab, (b, p), generator=torch.Generator().manual_seed(seed))


def test_forward_terms_grow_with_batch_length_and_rows(llama, native):
    d = Dims.of(llama)
    assert (d.n_heads, d.n_kv_heads, d.mlp_width) == (4, 2, 3)  # gated MLP: gate, up, product
    assert stream_bytes(llama, 16) == 2 * stream_bytes(llama, 8) == 16 * 32 * 4
    assert stream_bytes(llama, 8, element=2) == stream_bytes(llama, 8) // 2
    assert forward_bytes(llama, 6, 8) == 3 * forward_bytes(llama, 2, 8)  # linear in batch
    # attention's scores grow with the square of the length: more than twice at twice the length
    assert block_bytes(llama, 64) > 2 * block_bytes(llama, 32)
    # a pass stopped before the unembedding: a block's transients, live and kept by the heap
    assert forward_bytes(llama, 1, 8, rows=()) == (1 + HEAP_KEPT) * block_bytes(llama, 8)
    # a bridge unembeds only the rows a metric reads; the native model unembeds every row
    bridge, ours = runtime_of(llama).unembedded((-1,)), runtime_of(native).unembedded((-1,))
    assert logit_bytes(llama, 8, rows=bridge) * 8 == logit_bytes(llama, 8)
    assert logit_bytes(native, 8, rows=ours) == logit_bytes(native, 8)
    gap = forward_bytes(llama, 2, 8) - forward_bytes(llama, 2, 8, rows=bridge)
    assert gap == 2 * 7 * 16 * 4  # 7 rows of the 16-token vocabulary, float32, each prompt


def test_a_backward_pass_holds_every_layers_saved_activations_and_the_logits_gradient(llama):
    deeper = random_llama(6, d_model=32, n_heads=4, n_kv_heads=2, vocab=16)
    assert saved_bytes(deeper, 8) == 2 * saved_bytes(llama, 8)  # per layer
    # the logits' gradient is [pos, vocab] whatever the rows: only the logits shrink
    full, one = backward_bytes(llama, 1, 8), backward_bytes(llama, 1, 8, rows=(-1,))
    assert full - one == logit_bytes(llama, 8) - logit_bytes(llama, 8, rows=(-1,))
    assert one > saved_bytes(llama, 8) + logit_bytes(llama, 8)


def test_eap_per_prompt_bytes_grow_linearly_with_pos_and_senders():
    # many heads with their own keys and values, a tiny vocabulary: the gradient matrix
    # phase (every sender's difference and every receiver's gradient) is EAP's peak
    model = random_llama(8, d_model=64, n_heads=16, n_kv_heads=16, vocab=8)
    metric = logit_diff_metric(2, 3)

    def eap(pos, graph=None):
        tokens, corrupted = _tokens(model, 2, pos), _tokens(model, 2, pos, seed=1)
        task = check_edge_task(
            model, tokens, corrupted_tokens=corrupted, metric=metric, ablation="patch"
        )
        if graph is not None:
            task.graph = graph(task.graph)
        return task, edge_footprint(task, "eap").per_prompt

    def kept(pos):  # the backward's per-layer tensors, which the allocator keeps resident
        grads = backward_bytes(model, 1, pos, rows=runtime_of(model).unembedded(metric.rows))
        return HEAP_KEPT * (grads - logit_bytes(model, pos, (-1,)))

    task, at8 = eap(8)
    _, at16 = eap(16)
    assert at16 - kept(16) == 2 * (at8 - kept(8))  # the stores: linear in the prompt's length
    assert at16 > 2 * at8  # the kept attention patterns grow with its square
    more = dataclasses.replace(task.graph, senders=task.graph.senders * 2)
    _, doubled = eap(8, graph=lambda g: more)
    f = stream_bytes(model, 8, element=4)  # a sender's output, float32
    assert doubled - at8 == len(task.graph.senders) * f  # one more difference per sender
    # EAP-IG's later steps also hold a backward pass beside the matrix
    assert edge_footprint(task, "eap-ig").per_prompt >= at8


def test_sweep_copies_are_the_edits_that_resume_at_one_block(native):
    tokens = _tokens(native, 2, 8)
    one_layer = footprint(native, 8, head_edits([(1, 0), (1, 1)]))
    two_layers = footprint(native, 8, head_edits([(0, 0), (1, 0), (1, 1)]))
    assert one_layer.most_copies == 2 and two_layers.most_copies == 2
    # the residual stream entering each block an edit resumes at (layer 0 needs none)
    assert two_layers.per_prompt - one_layer.per_prompt == 0
    assert footprint(native, 8, head_edits([(0, 0)])).per_prompt == 0
    est = A.ablate_heads(native, tokens, heads=[(1, 0), (1, 1)], estimate=True)
    assert est.footprint.most_copies == 2


def test_path_patching_to_the_logits_runs_no_block(llama):
    tokens, corrupted = _tokens(llama, 2, 8), _tokens(llama, 2, 8, seed=1)
    metric = logit_diff_metric(2, 3)
    to_logits = A.path_patch(
        llama, tokens, corrupted_tokens=corrupted, metric=metric, senders=["L1H0"],
        estimate=True,
    )  # fmt: skip
    to_heads = A.path_patch(
        llama, tokens, corrupted_tokens=corrupted, metric=metric, senders=["L0H0"],
        receivers=["L2H0.q"], estimate=True,
    )  # fmt: skip
    # a copy that edits only the logits' input: its edit, the edited stream, the read rows
    assert to_logits.footprint.per_copy < forward_bytes(llama, 1, 8, rows=metric.rows)
    assert to_heads.footprint.per_copy > forward_bytes(llama, 1, 8, rows=metric.rows)


# the engines' cost modules: the only places a Footprint is built (issue 44)
COST_MODULES = {"engine/footprints.py", "engine/sweeps/cost.py", "engine/edges/cost.py"}


def test_footprints_are_built_only_in_the_engines_cost_modules():
    import ast
    from pathlib import Path

    pkg = Path(A.__file__).resolve().parents[1]
    builders = set()
    for path in pkg.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)
                if name == "Footprint":
                    builders.add(path.relative_to(pkg).as_posix())
    assert builders == COST_MODULES, sorted(builders ^ COST_MODULES)
