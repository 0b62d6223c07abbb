"""The Triton kernels against the references and dense attention: outputs and all gradients.

Without a GPU they run in Triton's interpreter (TRITON_INTERPRET=1, set by tests/conftest.py) at small
sizes. With one, the same tests run natively at larger sizes, and bf16 is tested too (the
interpreter handles bf16 as raw bits; see ../shared/TOOLCHAIN.md). Every kernel output is
poisoned with NaN before the kernel writes it, so a tile it never writes fails the test.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from test_routing_attention import random_clusters

import zoo.kernels
from zoo.attention.patterns import causal, fixed, local, strided
from zoo.kernels import (
    BlockSparsePlan,
    block_sparse_attention,
    block_sparse_attention_torch,
    expand_layout,
    masked_attention_ref,
    routing_attention,
    routing_attention_ref,
    routing_attention_torch,
    triton_block_sparse,
    triton_flash,
    triton_routing,
)

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if CUDA else [])
TOL = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}
SCALE = 4 if CUDA else 1  # sequence lengths grow on a GPU


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    """Every kernel output starts as NaN."""

    def empty(shape, like, dtype=None):
        return torch.full(shape, float("nan"), device=like.device, dtype=dtype or like.dtype)

    monkeypatch.setattr(triton_flash, "empty", empty)


def inputs(B, H, T, D, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(B, H, T, D, generator=g).to(DEVICE, dtype).requires_grad_() for _ in range(3)
    ]


def assert_matches(got, want, wrt, dtype, grad_seed=1):
    """``got`` equals ``want`` (fp64 oracle or reference), and so do the gradients of both
    with respect to each tensor of ``wrt`` under the same random output gradient."""
    tol = TOL[dtype]
    assert got.dtype == dtype and not got.isnan().any()
    torch.testing.assert_close(got.double(), want.double(), rtol=tol, atol=tol)
    g = torch.randn(want.shape, generator=torch.Generator().manual_seed(grad_seed)).to(DEVICE)
    g_got = torch.autograd.grad(got, wrt, g.to(got.dtype), retain_graph=True)
    g_want = torch.autograd.grad(want, wrt, g.to(want.dtype), retain_graph=True)
    for name, a, b in zip("qkv", g_got, g_want, strict=True):
        assert not a.isnan().any(), f"d{name} has unwritten (NaN) entries"
        # gradients sum over many terms: scale the tolerance by their size
        atol = tol * max(1.0, b.abs().max().item())
        torch.testing.assert_close(a.double(), b.double(), rtol=tol, atol=atol, msg=f"d{name}")


def run_block_sparse(q, k, v, plan):
    tables = plan.to(q.device).kernel_tables(q.shape[1])
    return triton_block_sparse.block_sparse_attention_triton(
        q, k, v, tables, plan.b, q.shape[-1] ** -0.5
    )


# ---------------------------------------------------------------------------- block-sparse


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("pattern", "T", "block", "D"),
    [
        (strided(16), 64, 16, 64),  # A1: a local window, partial blocks at its edge
        (strided(16, component=2), 75, 16, 64),  # A2: every listed block partial; ragged
        (fixed(32, 8, distinct_summaries=True), 90, 16, 64),  # per-head layouts, ragged
        (local(24), 80, 32, 128),  # head dim 128, larger blocks
        (causal(), 50, 16, 128),  # the dense causal Transformer as one layout
    ],
    ids=["strided-A1", "strided-A2", "fixed-per-head", "local-d128", "dense-d128"],
)
def test_block_sparse_matches_dense_attention_under_the_element_mask(pattern, T, block, D, dtype):
    H, T = 3, T * SCALE
    q, k, v = inputs(2, H, T, D, dtype)
    plan = BlockSparsePlan(pattern.layout(T, block, H), block, T, mask_mod=pattern.mask_mod)
    got = run_block_sparse(q, k, v, plan)
    want = masked_attention_ref(
        q, k, v, pattern.mask(T, H if pattern.per_head else None).to(DEVICE)
    )
    assert_matches(got, want, (q, k, v), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [True, False])
def test_block_sparse_layout_alone_with_empty_rows_per_head(causal, dtype):
    """Whole blocks of an arbitrary per-head layout; one row of blocks is empty in every head and
    one more in head 0 only: their queries get zero outputs and send no gradient anywhere."""
    T, block, H, D = 70 * SCALE, 16, 2, 64
    nb = math.ceil(T / block)
    layout = torch.rand(H, nb, nb, generator=torch.Generator().manual_seed(3)) < 0.5
    layout[:, :, 0] = True  # every other row reads block 0
    layout[:, 1], layout[0, 3] = False, False
    q, k, v = inputs(1, H, T, D, dtype)
    got = run_block_sparse(q, k, v, BlockSparsePlan(layout, block, T, causal=causal))
    mask = expand_layout(layout, block, T)
    if causal:
        mask = mask & torch.ones(T, T, dtype=torch.bool).tril()
    assert_matches(got, masked_attention_ref(q, k, v, mask.to(DEVICE)), (q, k, v), dtype)
    assert got[:, :, block : 2 * block].abs().max() == 0
    assert got[:, 0, 3 * block : 4 * block].abs().max() == 0
    (dq,) = torch.autograd.grad(got.sum(), q)
    assert dq[:, :, block : 2 * block].abs().max() == 0


def test_block_sparse_dense_causal_layout_equals_sdpa():
    T, block = 96 * SCALE, 32
    q, k, v = inputs(2, 2, T, 64, torch.float32)
    nb = math.ceil(T / block)
    plan = BlockSparsePlan(torch.ones(nb, nb, dtype=torch.bool), block, T)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_matches(run_block_sparse(q, k, v, plan), want, (q, k, v), torch.float32)


def test_block_sparse_kernel_equals_the_pytorch_path():
    """The two implementations behind the dispatching op agree (the PyTorch path is the one the
    models were validated on)."""
    pattern, T, block, H = fixed(32, 8), 100, 16, 2
    q, k, v = inputs(1, H, T, 32, torch.float32, seed=5)
    plan = BlockSparsePlan(pattern.layout(T, block, H), block, T, mask_mod=pattern.mask_mod)
    want = block_sparse_attention_torch(q, k, v, plan)
    assert_matches(run_block_sparse(q, k, v, plan), want, (q, k, v), torch.float32)


# ---------------------------------------------------------------------------- kernel tables


def test_tables_list_each_allowed_block_once_in_rows_and_columns():
    T, block = 100, 16
    pattern = strided(16, component=2)
    plan = BlockSparsePlan(pattern.layout(T, block), block, T, mask_mod=pattern.mask_mod)
    t = plan.kernel_tables(1)
    nb = plan.nb
    rows = {(r, int(c)) for r in range(nb) for c in t.row_cols[t.row_ptr[r] : t.row_ptr[r + 1]]}
    cols = {(int(r), c) for c in range(nb) for r in t.col_rows[t.col_ptr[c] : t.col_ptr[c + 1]]}
    allowed = pattern.mask(T)
    want = {
        (r, c)
        for r in range(nb)
        for c in range(nb)
        if allowed[r * block : (r + 1) * block, c * block : (c + 1) * block].any()
    }
    assert rows == cols == want and t.n_blocks == len(want)
    # a periodic pattern stores a handful of distinct tiles, not one per block
    assert t.tiles.shape[0] <= 4 < t.n_blocks


def test_tables_drop_blocks_above_the_diagonal_and_mark_full_blocks():
    T, block, nb = 64, 16, 4
    plan = BlockSparsePlan(torch.ones(nb, nb, dtype=torch.bool), block, T)  # causal
    t = plan.kernel_tables(2)
    assert t.n_blocks == nb * (nb + 1) // 2
    assert t.n_mask_heads == 1  # no mask_mod: the tiles do not depend on the head
    diagonal = t.row_cols.long() == torch.repeat_interleave(torch.arange(nb), torch.arange(1, 5))
    assert (t.row_tile[0][diagonal] >= 0).all() and (t.row_tile[0][~diagonal] == -1).all()
    assert t.tiles.shape[0] == 1  # the lower triangle
    assert torch.equal(t.tiles[0].bool(), torch.ones(block, block, dtype=torch.bool).tril())


# ---------------------------------------------------------------------------- routing


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("shared", "causal", "w", "D"),
    [(True, True, 40, 64), (False, True, 37, 64), (False, False, 21, 128), (True, True, 23, 128)],
    ids=["shared-causal", "separate-causal-ragged", "separate-bidirectional-d128", "shared-d128"],
)
def test_routing_matches_the_per_cluster_oracle(shared, causal, w, D, dtype):
    """Tokens in several clusters get the mean, tokens in none get zeros; with separate indices
    some queries precede all their cluster's keys (zero output)."""
    B, H, n_clusters, T = 2, 2, 3, 64 * SCALE
    w = w * SCALE
    g = torch.Generator().manual_seed(0)
    q, k, v = inputs(B, H, T, D, dtype)
    q_idx = random_clusters(B, H, n_clusters, w, T, g).to(DEVICE)
    k_idx = q_idx if shared else random_clusters(B, H, n_clusters, w, T, g).to(DEVICE)
    got = triton_routing.routing_attention_triton(
        q, k, v, q_idx, None if shared else k_idx, causal=causal, block=16
    )
    # gradients against the PyTorch path (itself tested against the spec) ...
    want = routing_attention_torch(q, k, v, q_idx, None if shared else k_idx, causal=causal)
    assert_matches(got, want, (q, k, v), dtype)
    # ... and outputs against the fp64 spec directly
    exact = routing_attention_ref(
        *(x.detach().cpu() for x in (q, k, v)), q_idx.cpu(), k_idx.cpu(), causal=causal
    )
    torch.testing.assert_close(got.cpu().double(), exact, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("mean", [True, False], ids=["mean", "sum"])
def test_segment_sum_equals_index_add_and_is_deterministic(mean):
    """The scatter back to positions: each position's sum (or mean) over its clusters, zeros
    where it is in none, the same bits on every run."""
    from zoo.kernels.routing import scatter_mean, scatter_sum

    B, H, n_clusters, w, T, D = 2, 3, 4, 20 * SCALE, 48 * SCALE, 32
    g = torch.Generator().manual_seed(0)
    idx = random_clusters(B, H, n_clusters, w, T, g).to(DEVICE)
    y = torch.randn(B, H, n_clusters, w, D, generator=g).to(DEVICE)
    plan = triton_routing.scatter_plan(idx, T)
    got = triton_routing.segment_sum(y, plan, T, mean=mean, dtype=torch.float32)
    want = (scatter_mean if mean else scatter_sum)(y, idx, T)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    counts = torch.zeros(B * H * T, device=DEVICE).index_add_(
        0, plan.flat, torch.ones_like(plan.flat, dtype=torch.float32)
    )
    assert (counts == 0).any() and (counts > 1).any(), "the clusters must cover both cases"
    assert (got.reshape(-1, D)[counts == 0] == 0).all()
    again = triton_routing.segment_sum(y, plan, T, mean=mean, dtype=torch.float32)
    assert torch.equal(got, again)


def test_scatter_plan_is_a_csr_of_the_slots_with_per_program_bounds():
    """The plan lists every slot once, grouped by position in cluster order, and each program's
    bound is the largest count among its rows (so no slot is skipped and the loop stops early)."""
    B, H, n_clusters, w, T = 2, 2, 4, 12, 96
    idx = random_clusters(B, H, n_clusters, w, T, torch.Generator().manual_seed(2)).to(DEVICE)
    plan = triton_routing.scatter_plan(idx, T)
    assert all(x.dtype == torch.int32 for x in plan)
    flat = plan.flat.long()
    counts = torch.bincount(flat, minlength=B * H * T)
    assert torch.equal(plan.offsets.diff().long(), counts)
    order = plan.order.long()
    assert torch.equal(order.sort().values, torch.arange(flat.numel(), device=DEVICE))
    assert (flat[order].diff() >= 0).all(), "slots sorted by position"
    same = flat[order][1:] == flat[order][:-1]
    assert (order[1:][same] > order[:-1][same]).all(), "a position's slots in cluster order"
    rows = triton_routing.SEGMENT_ROWS
    padded = torch.nn.functional.pad(counts, (0, -counts.numel() % rows))
    assert torch.equal(plan.bounds.long(), padded.view(-1, rows).amax(1))
    assert plan.bounds.max() > 1 and plan.bounds.min() < plan.bounds.max()


def test_slot_gradients_equal_the_means_backward_and_delta():
    """Each slot's gradient is its position's gradient over the position's count, and
    ``delta = rowsum(dy * y)``, as autograd through ``scatter_mean`` gives."""
    from zoo.kernels.routing import scatter_mean

    B, H, n_clusters, w, T, D = 2, 2, 3, 20, 36, 32
    g = torch.Generator().manual_seed(4)
    idx = random_clusters(B, H, n_clusters, w, T, g).to(DEVICE)
    y = torch.randn(B, H, n_clusters, w, D, generator=g).to(DEVICE).requires_grad_()
    grad_out = torch.randn(B, H, T, D, generator=g).to(DEVICE)
    (want,) = torch.autograd.grad(scatter_mean(y, idx, T), y, grad_out)
    dy, delta = triton_routing.slot_gradients(
        grad_out, y.detach(), triton_routing.scatter_plan(idx, T)
    )
    torch.testing.assert_close(dy, want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(delta, (want * y).sum(-1), rtol=1e-5, atol=1e-5)


def test_routing_diagonal_shortcut_equals_the_general_walk():
    """Shared indices let the tiles stop at the diagonal; passing the same indices as separate
    keys visits every tile and masks by position. The results must agree."""
    B, H, T, w = 1, 2, 80, 50
    g = torch.Generator().manual_seed(2)
    q, k, v = inputs(B, H, T, 64, torch.float32)
    q_idx = random_clusters(B, H, 2, w, T, g).to(DEVICE)
    shared = triton_routing.routing_attention_triton(q, k, v, q_idx, block=16)
    general = triton_routing.routing_attention_triton(q, k, v, q_idx, q_idx.clone(), block=16)
    assert_matches(shared, general, (q, k, v), torch.float32)


# ---------------------------------------------------------------------------- dispatch


def test_cpu_tensors_take_the_pytorch_path(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("a CPU tensor reached a Triton kernel")

    monkeypatch.setattr(triton_block_sparse, "block_sparse_attention_triton", fail)
    monkeypatch.setattr(triton_routing, "routing_attention_triton", fail)
    q, k, v = (x.cpu() for x in inputs(1, 2, 32, 16, torch.float32))
    assert not zoo.kernels.use_triton(q)
    block_sparse_attention(q, k, v, torch.ones(2, 2, dtype=torch.bool), 16)
    routing_attention(q, k, v, torch.arange(32).view(1, 1, 2, 16).expand(1, 2, 2, 16))


def test_dispatch_sends_supported_inputs_to_the_kernels(monkeypatch):
    """With the Triton path switched on (as on CUDA), the public ops return the kernels' results:
    a plan from a model goes through its kernel tables, the routing op through its kernel."""
    monkeypatch.setattr(zoo.kernels, "choose", lambda op, x: "triton")
    calls = []
    for module, name in [
        (triton_block_sparse, "block_sparse_attention_triton"),
        (triton_routing, "routing_attention_triton"),
    ]:
        original = getattr(module, name)

        def spy(*args, _original=original, _name=name, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, name, spy)
    pattern, T = local(20), 48
    q, k, v = inputs(1, 2, T, 32, torch.float32)
    plan = BlockSparsePlan(pattern.layout(T, 16), 16, T, mask_mod=pattern.mask_mod)
    got = block_sparse_attention(q, k, v, plan)
    assert_matches(
        got, masked_attention_ref(q, k, v, pattern.mask(T).to(DEVICE)), (q, k, v), torch.float32
    )
    q_idx = random_clusters(1, 2, 2, 24, T, torch.Generator().manual_seed(0)).to(DEVICE)
    got = routing_attention(q, k, v, q_idx)
    assert_matches(got, routing_attention_torch(q, k, v, q_idx), (q, k, v), torch.float32)
    assert calls == ["block_sparse_attention_triton", "routing_attention_triton"]


def test_unsupported_inputs_fall_back_to_the_pytorch_path_with_a_warning(monkeypatch):
    monkeypatch.setattr(zoo.kernels, "choose", lambda op, x: "triton")
    q, k, v = inputs(1, 1, 16, 16, torch.float32)
    with pytest.warns(UserWarning, match="block_size 8 is not one of .*PyTorch path"):
        got = block_sparse_attention(q, k, v, torch.ones(2, 2, dtype=torch.bool), 8)
    want = block_sparse_attention_torch(q, k, v, torch.ones(2, 2, dtype=torch.bool), 8)
    torch.testing.assert_close(got, want)
    q24 = torch.randn(1, 1, 16, 24)
    with pytest.warns(UserWarning, match="head dim 24 is not one of"):
        routing_attention(q24, q24, q24, torch.arange(16).view(1, 1, 1, 16))


def test_package_imports_without_triton(tmp_path):
    """`import zoo.kernels` and the reference ops work where Triton cannot be imported."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import torch, zoo.kernels as K\n"
        "q = torch.randn(1, 1, 32, 16)\n"
        "K.block_sparse_attention(q, q, q, torch.ones(2, 2, dtype=torch.bool), 16)\n"
        "assert not any(m.startswith('zoo.kernels.triton') for m in sys.modules)\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        # merged strided heads: the block-sparse route on every device (the fixed pattern takes
        # the segment route on a CPU, where the interpreter runs)
        ("sparse_transformer_tiny", {"block_size": 16, "pattern": "strided"}),
        ("routing_transformer_tiny", {}),
    ],
)
def test_models_through_the_kernels_equal_the_pytorch_path(monkeypatch, name, overrides):
    """A whole model, logits and every parameter's gradient, with the Triton path switched on
    (the plans come from the model's own plan cache) against the PyTorch path."""
    import zoo

    model = zoo.create_model(name, **overrides).to(DEVICE).eval()  # eval: k-means would move
    x = torch.randint(0, 256, (2, 64), generator=torch.Generator().manual_seed(0)).to(DEVICE)

    def run():
        model.zero_grad()
        torch.manual_seed(0)
        out = model(x)
        logits = getattr(out, "logits", out)
        (logits * torch.linspace(-1, 1, logits.shape[-1], device=DEVICE)).sum().backward()
        return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    want, want_grads = run()
    monkeypatch.setattr(zoo.kernels, "choose", lambda op, x: "triton")
    calls = []
    kernel = "block_sparse_attention_triton" if "sparse" in name else "routing_attention_triton"
    module = triton_block_sparse if "sparse" in name else triton_routing
    original = getattr(module, kernel)
    monkeypatch.setattr(module, kernel, lambda *a, **k: calls.append(1) or original(*a, **k))
    got, got_grads = run()
    assert calls, "the model never reached the kernel"
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    for n, g in want_grads.items():
        torch.testing.assert_close(got_grads[n], g, rtol=1e-4, atol=1e-4, msg=n)
