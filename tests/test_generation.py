import pytest
import torch

import zoo
from zoo.generation import filter_logits, generate


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return zoo.create_model("transformer_lm_tiny", max_seq_len=32).eval()


def test_greedy_cached_equals_uncached(model):
    prompt = torch.randint(0, 256, (2, 7))
    a = generate(model, prompt, 20, temperature=0)
    b = generate(model, prompt, 20, temperature=0, use_cache=False)
    assert a.shape == (2, 27)
    assert torch.equal(a[:, :7], prompt)
    assert torch.equal(a, b)


def test_generation_past_max_seq_len_keeps_going(model):
    out = generate(model, torch.zeros(1, 30, dtype=torch.long), 50, temperature=0)
    assert out.shape == (1, 80)


def test_same_seed_same_sample(model):
    prompt = torch.zeros(1, 3, dtype=torch.long)
    runs = [
        generate(
            model, prompt, 30, top_k=50, top_p=0.95, generator=torch.Generator().manual_seed(s)
        )
        for s in (1, 1, 2)
    ]
    assert torch.equal(runs[0], runs[1])
    assert not torch.equal(runs[0], runs[2])


def test_prompt_longer_than_max_seq_len(model):
    prompt = torch.zeros(1, 40, dtype=torch.long)
    with pytest.raises(ValueError, match="max_seq_len is 32.*truncate_prompt"):
        generate(model, prompt, 1)
    out = generate(model, prompt, 2, truncate_prompt=True, temperature=0)
    assert out.shape == (1, 34)


def test_invalid_sampling_parameters(model):
    prompt = torch.zeros(1, 1, dtype=torch.long)
    for kwargs in ({"temperature": -1}, {"top_k": 0}, {"top_p": 0.0}, {"top_p": 1.5}):
        with pytest.raises(ValueError):
            generate(model, prompt, 1, **kwargs)


def test_filter_logits_top_k_and_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isfinite(filter_logits(logits, top_k=2)).tolist() == [[True, True, False, False]]
    # 0.5 < 0.75, 0.5 + 0.3 >= 0.75: the nucleus is the first two tokens
    assert torch.isfinite(filter_logits(logits, top_p=0.75)).tolist() == [
        [True, True, False, False]
    ]
    assert torch.isfinite(filter_logits(logits, top_p=0.4)).tolist() == [
        [True, False, False, False]
    ]
    shuffled = logits[:, [2, 0, 3, 1]]
    assert torch.isfinite(filter_logits(shuffled, top_p=0.75)).tolist() == [
        [False, True, False, True]
    ]
