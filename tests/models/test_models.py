"""Registry-driven tests: every registered model, shrunk to a tiny size."""

import pytest
import torch

import zoo
from zoo.models.registry import get_preset


def tiny_model(name: str, strictly_causal: bool = False) -> torch.nn.Module:
    """``name`` at its family's tiny size (``model_cls.tiny_config``). ``strictly_causal`` switches
    top-w and random routing to causal routing: those two modes let a future token change past
    routing by design (tested and measured in tests/models/test_routing_transformer.py), so the
    generic causality tests use causal mode."""
    preset = get_preset(name)
    config = preset.model_cls.tiny_config(preset.config)
    if strictly_causal and getattr(config, "routing", "causal") != "causal":
        config = config.replace(routing="causal")
    torch.manual_seed(0)
    model = preset.model_cls(config)
    head = getattr(model, "lm_head", None)
    if head is not None and not head.weight.any():
        # zero-initialised output logits (Sparse Transformer §6) would hide every gradient and
        # every dependence on the input: give them weights so the tests can see both
        with torch.no_grad():
            head.weight.normal_(0.0, 0.5)
    return model


# decoder-only language models (the encoder-decoder Transformer has its own tests: test_seq2seq.py)
MODELS = [
    n
    for n in zoo.list_models()
    if not getattr(get_preset(n).model_cls, "is_encoder_decoder", False)
]


def test_registry_is_not_empty():
    assert "transformer_lm_small" in MODELS


@pytest.mark.parametrize("name", MODELS)
def test_forward_shapes(name):
    model = tiny_model(name)
    idx = torch.randint(0, model.config.vocab_size, (3, 17))
    logits = model(idx).logits
    assert logits.shape == (3, 17, model.config.vocab_size)
    assert logits.dtype == torch.float32
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("name", MODELS)
def test_backward_reaches_every_parameter(name):
    model = tiny_model(name)
    idx = torch.randint(0, model.config.vocab_size, (2, 20))
    model(idx).logits.logsumexp(-1).sum().backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, f"{pname} gets no gradient"
        assert p.grad.abs().sum() > 0, f"{pname} has an all-zero gradient"


@pytest.mark.parametrize("name", MODELS)
def test_causality(name):
    """Changing token t never changes the logits at positions < t."""
    model = tiny_model(name, strictly_causal=True).eval()
    T = model.config.max_seq_len
    idx = torch.randint(0, model.config.vocab_size, (1, T))
    base = model(idx).logits
    for t in (0, 1, T // 2, T - 1):
        changed = idx.clone()
        changed[0, t] = (changed[0, t] + 1) % model.config.vocab_size
        out = model(changed).logits
        torch.testing.assert_close(out[:, :t], base[:, :t], rtol=0, atol=1e-6)
        assert not torch.allclose(out[:, t], base[:, t]), (
            "the changed token must affect its own logits"
        )


@pytest.mark.parametrize("name", MODELS)
def test_save_load_round_trip_is_bit_identical(name, tmp_path):
    model = tiny_model(name).eval()
    model.save_pretrained(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {
        "config.json",
        "model.safetensors",
        "manifest.json",
    }
    loaded = zoo.from_pretrained(tmp_path)
    assert type(loaded) is type(model) and loaded.config == model.config
    assert not loaded.training
    ref, got = model.state_dict(), loaded.state_dict()
    assert ref.keys() == got.keys()
    for key in ref:
        assert torch.equal(ref[key], got[key]), key
    idx = torch.randint(0, model.config.vocab_size, (2, 9))
    outputs = []
    for m in (model, loaded):
        torch.manual_seed(1)  # the same draws for a model that routes at random
        outputs.append(m(idx).logits)
    assert torch.equal(*outputs)


@pytest.mark.parametrize("name", MODELS)
def test_cached_decoding_matches_full_forward(name):
    model = tiny_model(name, strictly_causal=True).eval()
    T = model.config.max_seq_len
    idx = torch.randint(0, model.config.vocab_size, (2, T))
    full = model(idx).logits
    cache = model.init_cache(2)
    pieces = [
        model(idx[:, :5], past_key_values=cache).logits
    ]  # a prompt, then one token at a time, then a chunk
    for t in range(5, T - 4):
        pieces.append(model(idx[:, t : t + 1], past_key_values=cache).logits)
    pieces.append(model(idx[:, T - 4 :], past_key_values=cache).logits)
    torch.testing.assert_close(torch.cat(pieces, 1), full, rtol=1e-5, atol=1e-5)


# the logits' tolerance against fp32 per dtype (tiny models, logits of order 1-10)
DTYPE_ATOL = {torch.bfloat16: 0.5, torch.float16: 0.1, torch.float64: 1e-4}


@pytest.mark.parametrize("dtype", list(DTYPE_ATOL), ids=str)
@pytest.mark.parametrize("name", MODELS)
def test_every_dtype_runs_forward_and_cached_decoding(name, dtype):
    """``.to(dtype)`` works for every family: logits in that dtype, close to fp32's, and cached
    decoding agrees with the full forward; state that must stay fp32 (centroids) stays fp32."""
    model = tiny_model(name, strictly_causal=True).eval()
    idx = torch.randint(0, model.config.vocab_size, (2, 21))
    ref = model(idx).logits
    model.to(dtype)
    logits = model(idx).logits
    assert logits.dtype == dtype
    assert torch.isfinite(logits).all()
    torch.testing.assert_close(logits.float(), ref, rtol=0, atol=DTYPE_ATOL[dtype])
    for buffer_name, buffer in model.named_buffers():
        if buffer_name.endswith("centroids"):
            assert buffer.dtype == torch.float32, buffer_name
    if hasattr(model, "init_cache"):
        cache = model.init_cache(2)
        pieces = [model(idx[:, :5], past_key_values=cache).logits] + [
            model(idx[:, t : t + 1], past_key_values=cache).logits for t in range(5, 21)
        ]
        decoded = torch.cat(pieces, 1)
        assert decoded.dtype == dtype
        torch.testing.assert_close(decoded.float(), logits.float(), rtol=0, atol=DTYPE_ATOL[dtype])


@pytest.mark.parametrize("name", MODELS)
def test_eval_is_repeatable_and_leaves_the_global_rng_alone(name):
    model = tiny_model(name).eval()  # random routing stays random here
    idx = torch.randint(0, model.config.vocab_size, (2, model.config.max_seq_len))
    state = torch.random.get_rng_state()
    first, second = model(idx).logits, model(idx).logits
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(first, second)
