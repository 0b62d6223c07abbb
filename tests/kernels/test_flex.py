"""The FlexAttention backend (zoo.kernels.flex) on a CPU, against the spec (masked_attention_ref,
fp64), and how ZOO_ATTENTION_BACKEND=flex and the auto table choose it (stand-in CUDA tensors)."""

import re
import warnings
from types import SimpleNamespace

import pytest
import torch

import zoo.kernels as kernels
from zoo.attention.functional import attend, route
from zoo.attention.patterns import fixed, local, local_1d, local_2d, strided
from zoo.kernels import BlockSparsePlan, flex, masked_attention_ref, routing_attention_torch

PATTERNS = [
    strided(8),
    strided(8, component=2),
    fixed(16, 4),
    fixed(16, 4, distinct_summaries=True),  # per head
    local(7),
    local_1d(query_block=16, memory=8),
    local_2d(width=12, query_height=2, query_width=6, memory_height=1, memory_width=3),
]


@pytest.fixture
def backend(monkeypatch):
    """Set ZOO_ATTENTION_BACKEND (None: unset) and pretend the GPU has a compute capability."""
    kernels._warn_unverified.cache_clear()

    def set_backend(value, capability=(9, 0)):
        monkeypatch.setattr(kernels, "_capability", lambda device: capability)
        if value is None:
            monkeypatch.delenv("ZOO_ATTENTION_BACKEND", raising=False)
        else:
            monkeypatch.setenv("ZOO_ATTENTION_BACKEND", value)

    return set_backend


def qkv(T, H=3, D=16, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, H, T, D, generator=g, dtype=dtype) for _ in range(3)]


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.name)
@pytest.mark.parametrize(("T", "block"), [(64, 16), (61, 16), (37, 8)])
def test_every_pattern_as_a_block_mask_matches_the_spec(pattern, T, block):
    H = 3
    q, k, v = qkv(T, H)
    layout = pattern.layout(T, block, H if pattern.per_head else None)
    plan = BlockSparsePlan(layout, block, T, mask_mod=pattern.mask_mod)
    got = flex.block_sparse_attention_flex(q, k, v, plan)
    want = masked_attention_ref(q, k, v, pattern.mask(T, H if pattern.per_head else None))
    assert got.dtype == torch.float32 and got.shape == q.shape
    torch.testing.assert_close(got.double(), want, rtol=2e-5, atol=2e-5)


def test_full_blocks_skip_the_mask_and_partial_ones_keep_it():
    """A block wholly allowed is listed as full (Flex skips mask_mod there); the diagonal is
    partial; blocks off the layout are in neither list."""
    T, b = 64, 16
    plan = BlockSparsePlan(local(32).layout(T, b), b, T, mask_mod=local(32).mask_mod)
    mask = flex.block_mask_for(plan, 1, torch.device("cpu"))
    partial = mask.kv_num_blocks[0, 0].tolist()
    full = mask.full_kv_num_blocks[0, 0].tolist()
    # query block 2 (positions 32-47): block 0 partly in the window, block 1 wholly, block 2 causal
    assert (partial[2], full[2]) == (2, 1)
    assert [p + f for p, f in zip(partial, full, strict=True)] == [1, 2, 3, 3]


def test_the_environment_sends_every_pattern_to_flex(backend, monkeypatch):
    """Under ZOO_ATTENTION_BACKEND=flex the engine's routes for windows, image patterns and the
    fixed pattern become the block-sparse op, which runs Flex; outputs equal the default routes."""
    calls = []
    real = flex.block_sparse_attention_flex
    monkeypatch.setattr(flex, "block_sparse_attention_flex", lambda *a: calls.append(1) or real(*a))
    q, k, v = qkv(48)
    for pattern in (local(7), local_1d(query_block=16, memory=8), fixed(16, 4)):
        backend(None)
        assert route(pattern) != "block_sparse"
        default = attend(q, k, v, pattern, block_size=16)
        backend("flex")
        assert route(pattern, flex=True) == "block_sparse"
        torch.testing.assert_close(attend(q, k, v, pattern, block_size=16), default)
    assert calls == [1, 1, 1]


def test_gradients_on_a_cpu_fall_back_with_one_warning_naming_why(backend):
    backend("flex")
    q, k, v = (x.requires_grad_() for x in qkv(32))
    pattern = local(7)
    with pytest.warns(UserWarning, match="no backward pass on a CPU.*running the PyTorch path"):
        out = kernels.block_sparse_attention(
            q, k, v, pattern.layout(32, 16), 16, mask_mod=pattern.mask_mod
        )
    out.sum().backward()
    want = masked_attention_ref(q, k, v, pattern.mask(32))
    torch.testing.assert_close(out.double(), want, rtol=2e-5, atol=2e-5)
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_a_dtype_flex_does_not_take_falls_back(backend):
    backend("flex")
    q, k, v = qkv(32, dtype=torch.float64)
    layout = local(7).layout(32, 16)
    with pytest.warns(
        UserWarning, match="FlexAttention cannot run this call \\(dtype torch.float64"
    ):
        out = kernels.block_sparse_attention(q, k, v, layout, 16, mask_mod=local(7).mask_mod)
    torch.testing.assert_close(out, masked_attention_ref(q, k, v, local(7).mask(32)))


def test_routing_has_no_block_mask_and_runs_the_next_backend(backend):
    backend("flex")
    q, k, v = qkv(32, H=2)
    idx = torch.arange(32).view(1, 1, 4, 8).expand(2, 2, 4, 8)
    with pytest.warns(UserWarning, match="content routing has no BlockMask"):
        out = kernels.routing_attention(q, k, v, idx)
    torch.testing.assert_close(out, routing_attention_torch(q, k, v, idx))


def test_a_model_gives_the_same_logits_through_flex(backend):
    from zoo import create_model

    model = create_model("sparse_transformer_tiny").eval()
    ids = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        backend(None)
        default = model(ids)
        backend("flex")
        got = model(ids)
    logits = getattr(default, "logits", default)
    torch.testing.assert_close(getattr(got, "logits", got), logits, rtol=1e-4, atol=1e-4)


CUDA = SimpleNamespace(is_cuda=True, device="cuda:0")  # what choose reads of a tensor


def test_auto_takes_only_verified_entries_of_the_table(backend, monkeypatch):
    backend(None, (9, 0))
    entry = kernels.FASTEST[((9, 0), "block_sparse_forward")]
    assert entry.backend == "flex" and not entry.verified  # measured faster, not yet verified
    assert kernels.backend(op="block_sparse_forward") == "triton"
    monkeypatch.setitem(
        kernels.FASTEST, ((9, 0), "block_sparse_forward"), kernels.Measured("flex", True, "test")
    )
    assert kernels.choose("block_sparse_forward", CUDA) == "flex"
    assert kernels.choose("block_sparse", CUDA) == "triton" or not kernels._installed("triton")
    assert kernels.choose("block_sparse_forward", torch.zeros(1)) == "torch"  # a CPU: auto


def test_every_table_entry_names_a_backend_an_op_a_gpu_and_a_date():
    for (capability, op), m in kernels.FASTEST.items():
        assert op in kernels.OPS and m.backend in kernels.BACKENDS[1:]
        assert len(capability) == 2
        assert re.search(r"NVIDIA \w+", m.evidence) and re.search(r"20\d\d-\d\d-\d\d", m.evidence)


def test_asking_for_flex_on_a_torch_without_it_is_one_clear_error(backend, monkeypatch):
    backend("flex")
    monkeypatch.setattr(kernels, "_installed", lambda name: name != "flex")
    with pytest.raises(ValueError, match=r"ZOO_ATTENTION_BACKEND=flex but this torch has no Flex"):
        kernels.choose("block_sparse", torch.zeros(1))


def test_unsupported_names_each_refusal():
    plan = SimpleNamespace(b=8)
    t = SimpleNamespace(dtype=torch.float16, is_cuda=True, requires_grad=False, shape=(1, 1, 8, 16))
    assert "block size 8" in flex.unsupported(t, t, t, plan)
    assert flex.unsupported(t, t, t, SimpleNamespace(b=64)) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cpu = torch.zeros(1, 1, 8, 16)
        assert flex.unsupported(cpu, cpu, torch.zeros(1, 1, 8, 8), plan).startswith("v head dim")
