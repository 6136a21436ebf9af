"""EAP's one product of every sender's difference with every receiver's gradient, in blocks
that skip the senders a receiver cannot read, equals the dense product on a real graph."""

import torch

import interp.engine.edges.gradients as gradients
from interp.analysis import build_graph
from interp.models import load_model


def test_blocked_products_equal_the_dense_product(monkeypatch):
    graph = build_graph(load_model("induction-2l"))
    S, R = graph.valid.shape
    gen = torch.Generator().manual_seed(0)
    diff = torch.randn(S, 2, 5, 64, generator=gen)
    G = torch.randn(R, 2 * 5 * 64, generator=gen)
    valid = torch.as_tensor(graph.valid)
    dense = (diff.flatten(1) @ G.T) * valid
    monkeypatch.setattr(gradients, "BLOCK_ROWS", 4)  # several blocks on a small graph
    blocks = gradients._triangle_blocks(valid)
    assert len(blocks) > 1 and blocks[0][0] == 0 and blocks[-1][1] == R
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))  # every receiver once
    assert sum((hi - lo) * n for lo, hi, n in blocks) < S * R  # work skipped
    for lo, hi, n in blocks:  # no block drops a sender one of its receivers reads
        assert not valid[n:, lo:hi].any()
    got = gradients.score_edges(graph, G, diff)
    assert (got - dense).abs().max() <= 1e-5 * dense.abs().max()  # summation order only


def test_receivers_out_of_graph_order_take_one_dense_block():
    shuffled = torch.tensor([[True, True], [True, False]])  # prefixes of 2, then 1 sender
    assert gradients._triangle_blocks(shuffled) == [(0, 2, 2)]
