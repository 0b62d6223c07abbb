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
