"""Native Sparse Attention (zoo/attention/mechanisms/nsa.py; Yuan et al. 2025, §3): the fast path
against the fp64 spec, causality, batch independence, empty branches, the block choice, cached
decoding and the model through the registry."""

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo.attention import KVCache, LayerKVCache
from zoo.attention.mechanisms import attention_names, nsa
from zoo.attention.mechanisms.nsa import (
    NSAKeys,
    NSAParams,
    NSASelfAttention,
    compressed_attention,
    nsa_attention,
    nsa_blocks,
)
from zoo.attention.mechanisms.nsa_reference import nsa_attention_ref
from zoo.errors import ConfigError

# l, d, l', n, initial, local, w: d < l with l' = l, l' < l, l' > l, l = l' = d
CASES = [
    dict(compress_block=8, compress_stride=4, select_block=8, n_selected=3, n_initial=1,
         n_local=1, window=6),
    dict(compress_block=8, compress_stride=4, select_block=4, n_selected=4, n_initial=1,
         n_local=2, window=5),
    dict(compress_block=4, compress_stride=2, select_block=8, n_selected=3, n_initial=1,
         n_local=1, window=7),
    dict(compress_block=4, compress_stride=4, select_block=4, n_selected=3, n_initial=0,
         n_local=1, window=3),
]  # fmt: skip
TOL = dict(atol=1e-5, rtol=1e-5)


def _inputs(p: NSAParams, T: int, S: int, separate_q_cmp: bool, B: int = 2, H: int = 2, D: int = 8):
    n_cmp = max(0, (S - p.compress_block) // p.compress_stride + 1)
    q = torch.randn(B, H, T, D)
    kv = [torch.randn(B, H, n, D) for n in (n_cmp, n_cmp, S, S, S, S)]
    gates = torch.rand(B, H, T, 3)
    q_cmp = torch.randn(B, H, T, D) if separate_q_cmp else None
    leaves = [x for x in (q, *kv, gates, q_cmp) if x is not None]
    for x in leaves:
        x.requires_grad_(True)
    return q, NSAKeys(*kv), gates, q_cmp, leaves


@pytest.mark.parametrize("chunk", [nsa.CHUNK, 4])  # queries per piece of the compressed branch
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("T, S", [(29, 29), (5, 5), (7, 30), (1, 23)])
def test_the_fast_path_is_the_fp64_spec_values_and_gradients(case, T, S, chunk, monkeypatch):
    monkeypatch.setattr(nsa, "CHUNK", chunk)
    torch.manual_seed(case * 100 + T + S)
    p = NSAParams(**CASES[case])
    q, kv, gates, q_cmp, leaves = _inputs(p, T, S, separate_q_cmp=case % 2 == 0)
    out = nsa_attention(q, kv, gates, p, q_cmp=q_cmp)
    ref = nsa_attention_ref(q, kv, gates, p, q_cmp=q_cmp)
    assert out.dtype == torch.float32 and ref.dtype == torch.float64
    torch.testing.assert_close(out.double(), ref, **TOL)
    grad = torch.randn_like(out)
    fast = torch.autograd.grad(out, leaves, grad, allow_unused=True)
    spec = torch.autograd.grad(ref, leaves, grad.double(), allow_unused=True)
    for x, a, b in zip(leaves, fast, spec, strict=True):
        if x.numel() == 0:
            continue
        torch.testing.assert_close(a, b, **TOL)


def _compress_ref(phi, k: torch.Tensor) -> torch.Tensor:
    """``phi`` block by block in fp64: ``W2 GELU(W1 flatten(K[i d : i d + l] + pos))``."""
    l, d = phi.block, phi.stride
    w1, b1 = phi.fc1.weight.double(), phi.fc1.bias.double()
    w2, b2 = phi.fc2.weight.double(), phi.fc2.bias.double()
    tokens, i = [], 0
    while i * d + l <= k.shape[2]:
        block = k[:, :, i * d : i * d + l].double() + phi.pos.double()  # (B, H, l, D)
        tokens.append(F.linear(F.gelu(F.linear(block.flatten(-2), w1, b1)), w2, b2))
        i += 1
    return torch.stack(tokens, 2) if tokens else k.new_zeros(*k.shape[:2], 0, k.shape[3]).double()


def _module_ref(attn: NSASelfAttention, x: torch.Tensor) -> torch.Tensor:
    """The module's forward from its weights, written out: projections split by hand, rotary on
    the query and the selected and window keys only, ``phi`` block by block, the fp64 spec."""
    B, T, C = x.shape
    H, D = attn.n_heads, attn.d_head

    def heads(y):
        return y.reshape(B, T, H, D).transpose(1, 2)

    q = heads(attn.q_proj(x))
    kv = [heads(y) for y in attn.kv_proj(x).chunk(2 if attn.params.shared_kv else 6, -1)]
    kv = kv * 3 if attn.params.shared_kv else kv  # k_cmp, v_cmp, k_slc, v_slc, k_win, v_win
    gates = torch.sigmoid(attn.gate(x)).reshape(B, T, H, 3).transpose(1, 2)
    q_cmp = q
    if attn.rotary is not None:
        q, kv[2], kv[4] = attn.rotary(q), attn.rotary(kv[2]), attn.rotary(kv[4])
    keys = NSAKeys(_compress_ref(attn.compress_k, kv[0]), _compress_ref(attn.compress_v, kv[1]),
                   *kv[2:])  # fmt: skip
    y = nsa_attention_ref(q, keys, gates, attn.params, q_cmp=q_cmp)  # (B, H, T, D) fp64
    w, b = attn.out_proj.weight.double(), attn.out_proj.bias.double()
    return F.linear(y.transpose(1, 2).reshape(B, T, C), w, b)


def _module(case: int, shared_kv: bool, rotary: bool, seed: int = 0) -> NSASelfAttention:
    torch.manual_seed(seed)
    return NSASelfAttention(16, 2, NSAParams(**CASES[case], shared_kv=shared_kv), rotary=rotary)


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("shared_kv, rotary", [(False, False), (False, True), (True, True),
                                               (True, False)])  # fmt: skip
def test_the_module_is_its_written_out_spec_values_and_weight_gradients(case, shared_kv, rotary):
    attn = _module(case, shared_kv, rotary, seed=case)
    x = torch.randn(2, 27, 16)
    out, ref = attn(x), _module_ref(attn, x)
    torch.testing.assert_close(out.double(), ref, **TOL)
    grad = torch.randn_like(out)
    params = [p for _, p in attn.named_parameters()]
    fast = torch.autograd.grad(out, params, grad)
    spec = torch.autograd.grad(ref, params, grad.double())
    for (name, _), a, b in zip(attn.named_parameters(), fast, spec, strict=True):
        assert a.abs().sum() > 0, f"{name} gets no gradient"
        torch.testing.assert_close(a, b, **TOL, msg=lambda m, n=name: f"{n}: {m}")


def test_the_compressed_branch_uses_the_unturned_query_and_keys():
    attn = _module(0, shared_kv=True, rotary=True)
    x = torch.randn(1, 12, 16)
    q, q_cmp, kv, _ = attn.project(x, start=5)
    plain = attn.q_proj(x).view(1, 12, 2, 8).transpose(1, 2)
    torch.testing.assert_close(q_cmp, plain)
    torch.testing.assert_close(q, attn.rotary(plain, 5))
    torch.testing.assert_close(kv[2], attn.rotary(kv[0], 5))  # shared: selected = turned cmp
    assert not torch.allclose(q, q_cmp)


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("rotary", [False, True])
def test_an_input_never_changes_the_outputs_before_it(case, rotary):
    attn = _module(case, shared_kv=False, rotary=rotary)
    x = torch.randn(1, 26, 16)
    base = attn(x)
    l = attn.params.compress_block
    # l - 1: the last position of the first compressed token
    for s in sorted({0, l - 2, l - 1, l, 11, 25}):
        x2 = x.clone()
        x2[:, s] += 10 * torch.randn(16)
        out = attn(x2)
        torch.testing.assert_close(out[:, :s], base[:, :s], atol=1e-6, rtol=0)
        assert not torch.allclose(out[:, s], base[:, s])


def test_a_compressed_token_is_seen_from_its_last_position_on():
    p = NSAParams(**CASES[0])  # l = 8, d = 4
    q, kv, _, _, _ = _inputs(p, 20, 20, separate_q_cmp=False)
    _, prob = compressed_attention(q, kv.k_cmp, kv.v_cmp, 20, p)  # (B, H, T, N)
    for i in range(kv.k_cmp.shape[2]):
        last = i * 4 + 7
        assert (prob[:, :, :last, i] == 0).all()
        assert (prob[:, :, last:, i] > 0).all()


def test_a_row_is_what_it_is_alone_in_a_batch():
    attn = _module(1, shared_kv=False, rotary=True)
    x = torch.randn(3, 21, 16)
    batch = attn(x)
    for b in range(3):
        torch.testing.assert_close(attn(x[b : b + 1])[0], batch[b], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("case", [0, 2])
def test_a_query_with_no_compressed_token_gets_exactly_zero_from_that_branch(case):
    p = NSAParams(**CASES[case])
    l = p.compress_block
    q, kv, _, _, leaves = _inputs(p, 15, 15, separate_q_cmp=False)
    o, prob = compressed_attention(q, kv.k_cmp, kv.v_cmp, 15, p)
    assert torch.equal(o[:, :, : l - 1], torch.zeros_like(o[:, :, : l - 1]))
    assert (o[:, :, l - 1 :].abs().sum(-1) > 0).all() and (prob[:, :, : l - 1] == 0).all()
    only_cmp = torch.zeros(2, 2, 15, 3)
    only_cmp[..., 0] = 1.0
    out = nsa_attention(q, kv, only_cmp, p)
    assert torch.equal(out[:, :, : l - 1], torch.zeros_like(out[:, :, : l - 1]))
    out.sum().backward()
    assert all(x.grad is None or x.grad.isfinite().all() for x in leaves)
    short = _inputs(p, l - 1, l - 1, separate_q_cmp=False)[:2]  # no compressed token at all
    assert short[1].k_cmp.shape[2] == 0
    o, _ = compressed_attention(short[0], short[1].k_cmp, short[1].v_cmp, l - 1, p)
    assert torch.equal(o, torch.zeros_like(o))


def test_forced_blocks_are_chosen_once_and_missing_blocks_are_not_padded():
    # l = l' = d = 4: importance is p_cmp; token 0 (the initial block) and the query's own block
    # score highest, so a top-n over all blocks plus the forced ones would repeat them
    p = NSAParams(compress_block=4, compress_stride=4, select_block=4, n_selected=4, n_initial=1,
                  n_local=1, window=4)  # fmt: skip
    S = 24
    prob = torch.arange(1.0, 7.0).expand(1, 1, S, 6).clone()  # later blocks more important
    prob[..., 0] = 100.0
    blocks = nsa_blocks(prob / prob.sum(-1, keepdim=True), S, p)[0, 0]  # (T, n)
    for t in range(S):
        own = t // 4
        chosen = [b for b in blocks[t].tolist() if b >= 0]
        assert len(chosen) == len(set(chosen)) == min(4, own + 1), (t, chosen)
        assert {0, own} <= set(chosen) and max(chosen) <= own
        assert blocks[t].tolist()[len(chosen) :] == [-1] * (4 - len(chosen))
    assert sorted(blocks[23].tolist()) == [0, 3, 4, 5]  # forced 0 and 5, then the top two of 1-4
    assert sorted(blocks[5].tolist()) == [-1, -1, 0, 1]  # two eligible blocks: no padding block
    assert sorted(blocks[2].tolist()) == [-1, -1, -1, 0]


def test_ties_go_to_the_earlier_block():
    p = NSAParams(compress_block=8, compress_stride=4, select_block=4, n_selected=2, n_initial=0,
                  n_local=1, window=4)  # fmt: skip
    blocks = nsa_blocks(torch.zeros(1, 1, 12, 2), 12, p)[0, 0]  # no importance anywhere
    assert blocks[11].tolist() == [2, 0]


def test_one_ulp_of_importance_outranks_an_earlier_block():
    p = NSAParams(compress_block=4, compress_stride=4, select_block=4, n_selected=2, n_initial=0,
                  n_local=1, window=4)  # fmt: skip
    prob = torch.full((1, 1, 1, 6), 0.1)  # l = l' = d: the importance is p_cmp itself
    prob[..., 0] = 0.25
    prob[..., 3] = torch.nextafter(torch.tensor(0.25), torch.tensor(1.0))
    assert nsa_blocks(prob, 24, p)[0, 0, 0].tolist() == [5, 3]  # own block, then the larger


@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_blocks_chosen_chunk_by_chunk_are_those_of_the_whole_p_cmp(case, monkeypatch):
    p = NSAParams(**CASES[case])
    q, kv, _, _, _ = _inputs(p, 37, 40, separate_q_cmp=False)
    out, prob = compressed_attention(q, kv.k_cmp, kv.v_cmp, 40, p)  # one chunk, p_cmp whole
    monkeypatch.setattr(nsa, "CHUNK", 5)
    seen = []

    def choose(part, pos):  # the reduce nsa_attention hands the chunks
        seen.append(part.shape[2])
        return nsa._choose(nsa._importance(part, 40, p), pos, p)

    out_c, blocks = compressed_attention(q, kv.k_cmp, kv.v_cmp, 40, p, choose)
    assert len(seen) > 2 and sum(seen) == 37
    assert torch.equal(blocks, nsa_blocks(prob, 40, p))
    torch.testing.assert_close(out_c, out, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("shared_kv, rotary", [(False, True), (True, False), (True, True)])
def test_cached_decoding_is_the_full_forward(case, shared_kv, rotary):
    attn = _module(case, shared_kv, rotary)
    x = torch.randn(2, 29, 16)
    full = attn(x)
    cache = LayerKVCache(64)
    steps = torch.cat([attn(x[:, t : t + 1], cache) for t in range(29)], 1)
    torch.testing.assert_close(steps, full, **TOL)
    cache, chunks, t = LayerKVCache(64), [], 0
    for n in (3, 1, 6, 2, 9, 8):  # across compressed, selection and window boundaries
        chunks.append(attn(x[:, t : t + n], cache))
        t += n
    torch.testing.assert_close(torch.cat(chunks, 1), full, **TOL)


SMALL = {"name": "nsa", "compress_block": 8, "compress_stride": 4, "select_block": 8,
         "n_selected": 3, "window": 8}  # fmt: skip


@pytest.mark.parametrize("position", ["learned", "rotary"])
def test_the_model_decodes_with_a_cache_as_it_reads_the_whole_sequence(position):
    torch.manual_seed(0)
    model = zoo.create_model("transformer_lm_tiny", attention=SMALL, position=position).eval()
    ids = torch.randint(0, 256, (2, 37))
    with torch.no_grad():
        full = model(ids).logits
        out = model(ids[:, :11], use_cache=True)
        logits = [out.logits]
        for t in range(11, 37):
            out = model(ids[:, t : t + 1], past_key_values=out.past_key_values)
            logits.append(out.logits)
        torch.testing.assert_close(torch.cat(logits, 1), full, **TOL)
        cache = KVCache(model.config.n_layers, model.config.max_seq_len)
        halves = [model(ids[:, :20], past_key_values=cache).logits,
                  model(ids[:, 20:], past_key_values=cache).logits]  # fmt: skip
        torch.testing.assert_close(torch.cat(halves, 1), full, **TOL)


def test_the_model_trains_forward_and_backward():
    assert "nsa" in attention_names()
    torch.manual_seed(0)
    model = zoo.create_model("transformer_lm_tiny", attention=SMALL)
    attn = model.blocks[0].attention
    assert isinstance(attn, NSASelfAttention) and attn.params == NSAParams(**{
        k: v for k, v in SMALL.items() if k != "name"})  # fmt: skip
    ids = torch.randint(0, 256, (2, 40))
    out = model(ids, labels=ids)
    assert out.logits.shape == (2, 40, 256) and out.loss.isfinite()
    out.loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.isfinite().all(), name
    for p in (attn.compress_k.pos, attn.compress_v.fc1.weight, attn.gate.weight):
        assert p.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "params, message",
    [
        (dict(compress_stride=3, compress_block=8), "compress_stride=3 must divide compress_b"),
        (dict(compress_stride=16, select_block=24), "must divide select_block=24"),
        (dict(n_selected=2), r"n_selected=2 must be at least n_initial \+ n_local = 3"),
        (dict(window=0), "window must be a positive integer, got 0"),
        (dict(n_local=0), "n_local must be a positive integer"),
        (dict(n_initial=-1), "n_initial must be an integer >= 0"),
        (dict(compress_block=32.0), "compress_block=32.0 must be an integer"),
        (dict(shared_kv="yes"), "shared_kv='yes' must be true or false"),
    ],
)
def test_bad_params_are_a_clear_config_error(params, message):
    with pytest.raises(ConfigError, match=message):
        NSAParams(**params)
    with pytest.raises(ConfigError, match=message):
        zoo.create_model("transformer_lm_tiny", attention={"name": "nsa", **params})


def test_defaults_are_the_papers_and_n_initial_may_be_zero():
    p = NSAParams()
    assert (p.compress_block, p.compress_stride, p.select_block, p.n_selected, p.n_initial,
            p.n_local, p.window, p.shared_kv) == (32, 16, 64, 16, 1, 2, 512, False)  # fmt: skip
    assert NSAParams(n_initial=0).n_initial == 0
