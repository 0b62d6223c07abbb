"""Which path CUDA tensors take (ZOO_ATTENTION_BACKEND and the verified GPUs), tested on a CPU with
stand-in CUDA tensors."""

import importlib.util
from types import SimpleNamespace

import pytest
import torch

import zoo.kernels as kernels

CUDA = SimpleNamespace(is_cuda=True, device="cuda:0")  # what use_triton reads of a tensor


@pytest.fixture
def gpu(monkeypatch):
    """Pretend the current GPU has the given compute capability."""

    def set_capability(major, minor):
        monkeypatch.setattr(kernels, "_capability", lambda device: (major, minor))

    monkeypatch.delenv("ZOO_ATTENTION_BACKEND", raising=False)
    kernels._warn_unverified.cache_clear()
    return set_capability


def test_a_verified_gpu_takes_triton_by_default(gpu):
    gpu(9, 0)
    assert (9, 0) in kernels.VERIFIED
    assert kernels.backend() == "triton"
    assert kernels.use_triton(CUDA)


def test_an_unverified_gpu_takes_the_pytorch_path_and_says_so_once(gpu):
    gpu(8, 0)
    with pytest.warns(UserWarning, match="not verified on GPUs of compute capability 8.0"):
        assert not kernels.use_triton(CUDA)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not kernels.use_triton(CUDA)  # no second warning


@pytest.mark.parametrize(
    "env, capability, want",
    [
        ("triton", (8, 0), True),
        ("torch", (9, 0), False),
        ("TORCH ", (9, 0), False),
        ("", (9, 0), True),
    ],
)
def test_the_environment_variable_overrides(gpu, monkeypatch, env, capability, want):
    gpu(*capability)
    monkeypatch.setenv("ZOO_ATTENTION_BACKEND", env)
    assert kernels.use_triton(CUDA) is want


@pytest.mark.parametrize("env", ["auto", "triton", "torch"])
def test_cpu_tensors_never_take_triton(gpu, monkeypatch, env):
    gpu(9, 0)
    monkeypatch.setenv("ZOO_ATTENTION_BACKEND", env)
    assert not kernels.use_triton(torch.zeros(1))


def test_a_bad_value_is_one_clear_error(gpu, monkeypatch):
    gpu(9, 0)
    monkeypatch.setenv("ZOO_ATTENTION_BACKEND", "cuda")
    with pytest.raises(
        ValueError, match="ZOO_ATTENTION_BACKEND='cuda' is not one of auto, triton, flex, torch"
    ):
        kernels.use_triton(CUDA)


def test_asking_for_triton_without_it_installed_is_an_error(gpu, monkeypatch):
    gpu(9, 0)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n: None if n == "triton" else real(n))
    assert not kernels.use_triton(CUDA)  # auto: quietly the PyTorch path
    monkeypatch.setenv("ZOO_ATTENTION_BACKEND", "triton")
    with pytest.raises(ValueError, match="Triton is not installed"):
        kernels.use_triton(CUDA)


def test_the_ops_follow_the_choice(gpu, monkeypatch):
    """The public op calls the kernel exactly when choose says so."""
    from zoo.kernels import triton_block_sparse

    calls = []
    monkeypatch.setattr(
        triton_block_sparse, "block_sparse_attention_triton", lambda *a: calls.append(1) or a[0]
    )
    q, k, v = (torch.randn(1, 2, 32, 16) for _ in range(3))
    layout = torch.ones(2, 2, dtype=torch.bool)
    for choice in ("torch", "triton"):
        monkeypatch.setattr(kernels, "choose", lambda op, x, choice=choice: choice)
        kernels.block_sparse_attention(q, k, v, layout, 16)
    assert calls == [1]
