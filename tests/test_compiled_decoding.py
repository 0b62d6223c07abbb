"""Compiled one-token decoding (zoo.decoding.compiled_step): the eager tokens, one graph for every
position, eager decoding (and a warning) where the backend cannot compile. Each compile of the
tiny model costs seconds, so the file compiles it once."""

import pytest
import torch
from torch._dynamo.exc import BackendCompilerFailed
from torch._dynamo.utils import counters

import zoo
import zoo.decoding
from zoo.generation import generate


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return zoo.create_model("transformer_lm_tiny", max_seq_len=32).eval()


def test_compiled_greedy_tokens_are_the_eager_ones(model):
    torch.manual_seed(1)
    prompt = torch.randint(0, 256, (3, 9))
    mask = torch.ones_like(prompt)
    mask[1, :4] = 0  # left padding: two groups, each with its own cache
    torch._dynamo.reset()  # what other tests compiled does not count here
    graphs = counters["stats"]["unique_graphs"]
    # 40 new tokens run past max_seq_len=32: the caches are re-encoded (eagerly) and go on
    eager = generate(model, prompt, 40, temperature=0, attention_mask=mask)
    compiled = generate(model, prompt, 40, temperature=0, attention_mask=mask, compile=True)
    assert torch.equal(compiled, eager)
    made = counters["stats"]["unique_graphs"] - graphs
    assert made >= 1  # the steps did run compiled
    again = generate(model, prompt[:1], 30, temperature=0, compile=True)  # other batch and lengths
    assert torch.equal(again, eager[:1, :39])
    assert counters["stats"]["unique_graphs"] - graphs == made  # no graph per length or batch


def test_compiled_sampling_is_the_eager_sampling(model):
    prompt = torch.zeros(2, 3, dtype=torch.long)
    runs = [
        generate(model, prompt, 12, top_k=20, compile=c, generator=torch.Generator().manual_seed(5))
        for c in (False, True)
    ]
    assert torch.equal(runs[0], runs[1])


def test_where_the_backend_cannot_compile_decoding_goes_on_eagerly(model, monkeypatch):
    def broken(module, dynamic):
        def step(ids, past_key_values):
            module(ids, past_key_values=past_key_values)  # part of the step ran: the cache grew
            raise BackendCompilerFailed(broken, RuntimeError("C++ compile error\nmore"), None)

        return step

    prompt = torch.randint(0, 256, (2, 5), generator=torch.Generator().manual_seed(2))
    eager = generate(model, prompt, 12, temperature=0)
    monkeypatch.setattr(zoo.decoding.torch, "compile", broken)
    with pytest.warns(
        UserWarning, match=r"RuntimeError: C\+\+ compile error\); decoding goes on"
    ) as w:
        out = generate(model, prompt, 12, temperature=0, compile=True)
    assert torch.equal(out, eager)  # from a cache rebuilt from the tokens, not the half-run one
    assert len(w) == 1 and "\n" not in str(w[0].message)
    monkeypatch.setattr(zoo.decoding.torch, "compile", lambda *a, **k: pytest.fail("compiled"))
    assert torch.equal(generate(model, prompt, 12, temperature=0, compile=True), eager)
    zoo.decoding._NOT_COMPILED.discard(model)


def test_other_errors_of_the_step_are_not_called_compile_failures(model, monkeypatch):
    def broken(module, dynamic):
        def step(*args, **kwargs):
            raise KeyError("a bug")

        return step

    monkeypatch.setattr(zoo.decoding.torch, "compile", broken)
    with pytest.raises(KeyError):
        generate(model, torch.zeros(1, 3, dtype=torch.long), 4, temperature=0, compile=True)


FAMILIES = {  # every LM family's tiny preset; MoBA and NSA on the tiny model, with rotary positions
    "dense": ("transformer_lm_tiny", {}),
    "sparse": ("sparse_transformer_tiny", {}),
    "routing": ("routing_transformer_tiny", {}),
    "image": ("image_transformer_tiny", {}),
    "moba": ("transformer_lm_tiny", {"position": "rotary",
                                     "attention": {"name": "moba", "block_size": 8, "top_k": 2}}),
    "nsa": ("transformer_lm_tiny", {"position": "rotary", "attention": {
        "name": "nsa", "compress_block": 8, "compress_stride": 4, "select_block": 8,
        "n_selected": 2, "n_initial": 1, "n_local": 1, "window": 8}}),
}  # fmt: skip


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_familys_one_token_step_is_one_graph(family):
    """Dynamo traces the cached step whole (no graph break: a break runs eagerly, in pieces),
    at a cache long enough for sparse patterns and block selection to skip keys."""
    preset, overrides = FAMILIES[family]
    torch.manual_seed(0)
    model = zoo.create_model(preset, **overrides).eval()
    torch._dynamo.reset()
    with torch.inference_mode():
        cache = model.init_cache(1)
        model(torch.randint(0, model.config.vocab_size, (1, 30)), past_key_values=cache)
        ids = torch.randint(0, model.config.vocab_size, (1, 1))
        explained = torch._dynamo.explain(model)(ids, past_key_values=cache)
    assert explained.graph_break_count == 0, [b.reason for b in explained.break_reasons]
    assert explained.graph_count == 1


def test_compiled_sparse_decoding_gives_the_eager_tokens():
    """Compiled, the Sparse Transformer's step masks the whole cache instead of gathering the
    pattern's keys (zoo.attention.functional.decode_attention): the same tokens."""
    torch.manual_seed(0)
    model = zoo.create_model("sparse_transformer_tiny").eval()
    prompt = torch.randint(0, 256, (2, 7), generator=torch.Generator().manual_seed(3))
    eager = generate(model, prompt, 30, temperature=0)
    torch._dynamo.reset()
    assert torch.equal(generate(model, prompt, 30, temperature=0, compile=True), eager)


def test_nsa_decoding_compiles_one_graph_across_completed_blocks(monkeypatch):
    """A compressed block completes every compress_stride positions: the compiled step holds
    that as a tensor, not a branch (a graph per outcome, a recompile every few tokens). Dynamo
    alone (backend "eager") counts the graphs without Inductor's compile."""
    preset, overrides = FAMILIES["nsa"]
    torch.manual_seed(0)
    model = zoo.create_model(preset, **overrides).eval()
    monkeypatch.setattr(zoo.decoding, "compiled_step",
                        lambda m: torch.compile(m, dynamic=True, backend="eager"))  # fmt: skip
    prompt = torch.randint(0, 256, (2, 20), generator=torch.Generator().manual_seed(4))
    eager = generate(model, prompt, 12, temperature=0)  # 20 + 12: blocks complete at 23, 27, 31
    torch._dynamo.reset()
    graphs = counters["stats"]["unique_graphs"]
    assert torch.equal(generate(model, prompt, 12, temperature=0, compile=True), eager)
    assert counters["stats"]["unique_graphs"] - graphs == 1
