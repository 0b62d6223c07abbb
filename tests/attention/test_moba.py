"""MoBA (Lu et al. 2025, §2.2): the functional form against its fp64 spec, the paper's rules for
choosing blocks, causality, batch independence, and cached decoding equal to the full forward."""

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo.attention import KVCache, moba_attention
from zoo.attention.mechanisms.moba import MoBAParams, moba_attention_ref, moba_blocks
from zoo.errors import ConfigError


def qkv(B, H, T, D, S=None, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    S = T if S is None else S
    return [
        torch.randn(B, H, n, D, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
        for n in (T, S, S)
    ]


@pytest.mark.parametrize(
    ("T", "S", "block_size", "top_k"),
    [
        (37, 37, 5, 3),
        (64, 64, 8, 2),
        (64, 64, 8, 8),
        (50, 50, 7, 1),
        (1, 41, 4, 3),
        (9, 30, 4, 4),
        (9, 30, 8, 4),
        (1, 30, 8, 4),
    ],
)
def test_equals_the_fp64_spec_in_values_and_gradients(T, S, block_size, top_k):
    q, k, v = qkv(2, 3, T, 8, S)
    got = moba_attention(q, k, v, block_size=block_size, top_k=top_k)
    want = moba_attention_ref(q, k, v, block_size=block_size, top_k=top_k)
    assert got.shape == q.shape and got.dtype == q.dtype and want.dtype == torch.float64
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    grad = torch.randn_like(want)
    for a, b in zip(
        torch.autograd.grad(got, (q, k, v), grad.float()),
        torch.autograd.grad(want, (q, k, v), grad),
        strict=True,
    ):
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-5, atol=1e-5)


def test_a_sequence_within_block_size_times_top_k_gets_dense_causal_attention():
    q, k, v = qkv(1, 2, 32, 8)
    dense = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(moba_attention(q, k, v, block_size=8, top_k=4), dense)
    assert not torch.allclose(moba_attention(q, k, v, block_size=8, top_k=3), dense)


def test_the_own_block_is_always_chosen_and_only_whole_past_blocks_are_eligible():
    q, k, _ = qkv(2, 2, 40, 4)
    blocks = moba_blocks(q, k, block_size=8, top_k=3)  # (B, H, T, 3)
    t = torch.arange(40).view(1, 1, 40)
    assert blocks[..., 0].eq(t // 8).all()  # column 0: the own block
    past = blocks[..., 1:]
    assert ((past < t[..., None] // 8) | (past == -1)).all()  # wholly before the query's block
    assert past[:, :, :8].eq(-1).all()  # the first block has no past: nothing, not padding
    assert past[:, :, 8:16, 0].eq(0).all() and past[:, :, 8:16, 1].eq(-1).all()  # one eligible


def test_the_gate_is_the_dot_product_with_the_mean_key_of_each_block():
    T, b = 32, 8
    k = torch.zeros(1, 1, T, 2)
    k[..., 0:8, 0] = torch.tensor([4.0, -4.0] * 4)  # block 0: mean 0 along x (large keys)
    k[..., 8:16, 0] = 1.0  # block 1: mean 1 along x
    k[..., 16:24, 0] = 0.5
    q = torch.zeros(1, 1, T, 2)
    q[..., 0] = 1.0
    blocks = moba_blocks(q, k, block_size=b, top_k=2)
    assert blocks[0, 0, 24:, 1].eq(1).all()  # the mean, not the largest key, decides
    q[..., 0] = -1.0
    assert moba_blocks(q, k, block_size=b, top_k=2)[0, 0, 24:, 1].eq(0).all()  # no abs, no scale


def test_causal_and_batch_independent_in_a_model():
    torch.manual_seed(0)
    spec = {"name": "moba", "block_size": 4, "top_k": 2}
    model = zoo.create_model("transformer_lm_tiny", attention=spec).eval()
    x = torch.randint(0, 64, (3, 40))
    logits = model(x).logits
    y = x.clone()
    y[:, 25:] = torch.randint(0, 64, (3, 15))
    torch.testing.assert_close(model(y).logits[:, :25], logits[:, :25])  # the future is unseen
    torch.testing.assert_close(model(x[1:2]).logits, logits[1:2])  # a row alone = in a batch


@pytest.mark.parametrize("chunks", [[40], [13, 1, 1, 9, 16], [1] * 40])
def test_cached_decoding_equals_the_full_forward(chunks):
    torch.manual_seed(0)
    spec = {"name": "moba", "block_size": 4, "top_k": 3}
    model = zoo.create_model("transformer_lm_tiny", attention=spec, position="rotary").eval()
    x = torch.randint(0, 64, (2, sum(chunks)))
    full = model(x).logits
    cache, start, pieces = KVCache(model.config.n_layers, 128), 0, []
    for n in chunks:
        pieces.append(model(x[:, start : start + n], past_key_values=cache).logits)
        start += n
    torch.testing.assert_close(torch.cat(pieces, 1), full, rtol=1e-5, atol=1e-5)


def test_generate_with_the_cache_gives_the_tokens_of_the_full_forward():
    torch.manual_seed(0)
    model = zoo.create_model(
        "transformer_lm_tiny", attention={"name": "moba", "block_size": 4, "top_k": 2}
    ).eval()
    prompt = torch.randint(0, 64, (1, 10))
    out = zoo.generate(model, prompt, max_new_tokens=20, temperature=0.0)
    ids = prompt
    for _ in range(20):  # greedy by hand, the whole sequence each step, no cache
        ids = torch.cat([ids, model(ids).logits[:, -1:].argmax(-1)], 1)
    assert torch.equal(out, ids)


def test_per_layer_specs_and_the_saved_form():
    hybrid = [{"name": "moba", "block_size": 4}, "dense"]
    model = zoo.create_model("transformer_lm_tiny", attention=hybrid)
    first, last = (b.attention for b in model.blocks)
    assert (first.block_size, first.top_k) == (4, MoBAParams().top_k)  # defaults filled in
    assert type(last).__name__ == "CausalSelfAttention"
    saved = model.config.to_dict()["attention"]
    assert saved == ({"name": "moba", "block_size": 4, "top_k": 3}, "dense")
    again = type(model.config).from_dict(model.config.to_dict())
    assert again == model.config and again.attention_specs == model.config.attention_specs
    same = zoo.create_model("transformer_lm_tiny", attention=["moba", "moba"]).config
    assert same.attention == {"name": "moba", "block_size": 512, "top_k": 3}  # one entry


@pytest.mark.parametrize(
    ("attention", "match"),
    [
        ({"name": "moba", "blocksize": 4}, "unknown MoBAParams key.*Did you mean 'block_size'"),
        ({"name": "moba", "top_k": 0}, "top_k must be a positive integer"),
        ({"name": "moba", "top_k": 2.5}, "top_k=2.5 must be an integer"),
        ({"block_size": 4}, "give a mechanism name"),
        (["moba"], "attention lists 1 layers but the model has n_layers=2"),
        ({"name": "mobba"}, "unknown attention 'mobba'. Did you mean 'moba'"),
    ],
)
def test_a_bad_spec_is_a_one_line_error(attention, match):
    with pytest.raises(ConfigError, match=match):
        zoo.create_model("transformer_lm_tiny", attention=attention)


def test_bad_functional_arguments_are_errors():
    q, k, v = qkv(1, 1, 8, 4)
    with pytest.raises(ValueError, match="block_size must be a positive integer"):
        moba_attention(q, k, v, block_size=0, top_k=2)
    with pytest.raises(ValueError, match="T <= S"):
        moba_attention(q, k[:, :, :4], v[:, :, :4], block_size=2, top_k=2)
