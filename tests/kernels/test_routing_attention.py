"""routing_attention (the PyTorch path on a CPU) against the spec, zoo.kernels.routing_attention_ref
(per cluster, fp64)."""

import pytest
import torch
from zoo.kernels.routing import gather_clusters, scatter_mean

from zoo.kernels import routing_attention, routing_attention_ref


def random_clusters(B, H, n_clusters, w, T, generator):
    """Sorted, distinct positions per cluster; some positions in several clusters, some in none."""
    scores = torch.rand(B, H, n_clusters, T, generator=generator)
    return scores.topk(w, -1).indices.sort(-1).values


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("causal", [True, False])
def test_matches_the_per_cluster_oracle(shared, causal):
    B, H, T, D, n_clusters, w = 2, 3, 24, 8, 4, 7
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, generator=g, requires_grad=True) for _ in range(3))
    q_idx = random_clusters(B, H, n_clusters, w, T, g)
    k_idx = q_idx if shared else random_clusters(B, H, n_clusters, w, T, g)
    if shared:
        k = q  # shared query/key vectors, as the causal Routing Transformer
    got = routing_attention(q, k, v, q_idx, None if shared else k_idx, causal=causal)
    want = routing_attention_ref(q, k, v, q_idx, k_idx, causal=causal)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    grad = torch.randn_like(want)
    inputs = (q, v) if shared else (q, k, v)
    for a, b in zip(
        torch.autograd.grad(got, inputs, grad.float()),
        torch.autograd.grad(want, inputs, grad),
        strict=True,
    ):
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-4, atol=1e-4)


def test_shared_indices_with_separate_keys():
    """``k_idx=None`` shares the indices only: keys that are not the queries are still gathered
    (the op reuses the gathered queries as keys only when ``k is q``)."""
    B, H, T, D, n_clusters, w = 1, 2, 20, 8, 3, 6
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(B, H, T, D, generator=g, requires_grad=True) for _ in range(3))
    q_idx = random_clusters(B, H, n_clusters, w, T, g)
    got = routing_attention(q, k, v, q_idx, None)
    torch.testing.assert_close(
        got.double(), routing_attention_ref(q, k, v, q_idx, q_idx), rtol=1e-5, atol=1e-5
    )
    (dk,) = torch.autograd.grad(got.sum(), k)
    assert dk.abs().sum() > 0


def test_no_query_reads_a_later_key():
    """Structural: the output at position i has zero gradient with respect to every value at a
    position j > i, whatever the clusters (separate query and key indices)."""
    B, H, T, D = 1, 2, 20, 4
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(2, B, H, T, D, generator=g)
    v = torch.randn(B, H, T, D, generator=g, requires_grad=True)
    q_idx = random_clusters(B, H, 3, 8, T, g)
    k_idx = random_clusters(B, H, 3, 8, T, g)
    out = routing_attention(q, k, v, q_idx, k_idx)
    for i in range(T):
        (dv,) = torch.autograd.grad(out[:, :, i].sum(), v, retain_graph=True)
        assert dv[:, :, i + 1 :].abs().sum() == 0, f"position {i} reads the future"


def test_scatter_mean_averages_and_zeros():
    idx = torch.tensor([[[[0, 2], [2, 3]]]])  # position 2 in both clusters, 1 in none
    y = torch.tensor([[[[[1.0], [2.0]], [[4.0], [8.0]]]]])
    out = scatter_mean(y, idx, T=5)
    assert out.flatten().tolist() == [1.0, 0.0, 3.0, 8.0, 0.0]
    x = torch.arange(5.0).view(1, 1, 5, 1)
    assert gather_clusters(x, idx).flatten().tolist() == [0.0, 2.0, 2.0, 3.0]
