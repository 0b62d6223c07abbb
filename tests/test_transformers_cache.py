"""transformers' generate with the zoo's caches (zoo.integrations.transformers_cache): one forward
call per new token on that token only, exactly zoo.generate's tokens (greedy and sampled, past
the context too), left-padded batches row by row, for every language-model family at the tests'
tiny size; the encoder-decoders' greedy and beam search with their cache; what a zoo cache
refuses."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, DynamicCache

import zoo
import zoo.integrations.transformers as zt
from zoo.errors import ConfigError
from zoo.models.registry import get_preset

# one preset per attention kind: dense, rotary, local windows (routing's local heads), fixed and
# strided sparse patterns, content routing (top-w and causal), the Image Transformer's 2-D blocks
FAMILIES = [
    "transformer_lm_tiny",
    "transformer_lm_small_rotary",
    "routing_transformer_local_8k",
    "sparse_transformer_tiny",
    "sparse_transformer_small_strided",
    "routing_transformer_small",
    "routing_transformer_small_top2",
    "image_transformer_tiny",
]
MAX_LEN = 48  # the tiny configs' max_seq_len


def tiny(name: str) -> zt.ZooForCausalLM:
    """Preset ``name`` at its family's tiny size (48 positions, 64 tokens), seeded, in eval mode,
    wrapped for transformers. Its output projection is untied and drawn larger than at
    initialisation: a random tiny model's argmax then follows its context (tied, most emit one
    token forever, and a test of which tokens a row gets could not fail)."""
    preset = get_preset(name)
    torch.manual_seed(0)
    config = preset.model_cls.tiny_config(preset.config).replace(tie_weights=False)
    module = preset.model_cls(config).eval()
    with torch.no_grad():
        module.lm_head.weight.normal_(0.0, 1.0)
    assert module.config.max_seq_len == MAX_LEN
    return zt.wrap(module)


def ids(*lengths: int, seed: int = 1) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 64, (n,), generator=g) for n in lengths]


def left_padded(rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(B, T)`` ids padded on the left with 0 and their attention mask."""
    T = max(len(r) for r in rows)
    batch = torch.zeros(len(rows), T, dtype=torch.long)
    mask = torch.zeros(len(rows), T, dtype=torch.long)
    for i, r in enumerate(rows):
        batch[i, T - len(r) :], mask[i, T - len(r) :] = r, 1
    return batch, mask


def count_calls(module: torch.nn.Module) -> tuple[list[int], object]:
    """The length of ``input_ids`` of each forward call of ``module`` (and the hook's handle)."""
    lengths: list[int] = []
    hook = module.register_forward_pre_hook(
        lambda m, args, kwargs: lengths.append((args[0] if args else kwargs["input_ids"]).shape[1]),
        with_kwargs=True,
    )
    return lengths, hook


@pytest.mark.parametrize("name", FAMILIES)
def test_generate_reads_one_new_token_per_call_and_equals_zoo_generate(name):
    model = tiny(name)
    prompt = torch.stack(ids(30, 30))  # 30 + 40 tokens: past the 48-position context
    lengths, hook = count_calls(model.zoo_model)
    out = model.generate(prompt, max_new_tokens=40, do_sample=False, return_dict_in_generate=True)
    hook.remove()
    assert isinstance(out.cache, zt.ZooLMCache)
    assert torch.equal(out.sequences, zoo.generate(model.zoo_model, prompt, 40, temperature=0))
    # the prompt once, then one position per call, except where a full cache is re-encoded
    # from the last max_seq_len // 2 tokens (the sliding window)
    assert len(lengths) == 40 and lengths[0] == 30
    assert out.cache.restarts >= 1
    assert [n for n in lengths[1:] if n != 1] == [MAX_LEN // 2] * out.cache.restarts


@pytest.mark.parametrize("name", FAMILIES)
def test_a_left_padded_batch_gives_each_row_its_own_tokens(name):
    model = tiny(name)
    rows = ids(30, 21, 12, 21)  # rows 1 and 3: one group of equal padding
    batch, mask = left_padded(rows)
    out = model.generate(batch, attention_mask=mask, max_new_tokens=25, do_sample=False)
    for row, alone in zip(out, rows, strict=True):
        expected = zoo.generate(model.zoo_model, alone[None], 25, temperature=0)[0]
        assert torch.equal(row[batch.shape[1] - len(alone) :], expected)
    # without a cache every step re-reads the (masked) window, as zoo.generate(use_cache=False)
    slow = model.generate(batch, attention_mask=mask, max_new_tokens=20, use_cache=False)
    ref = zoo.generate(model.zoo_model, batch, 20, temperature=0, use_cache=False,
                       attention_mask=mask)  # fmt: skip
    assert torch.equal(slow, ref)


@pytest.mark.parametrize("name", ["transformer_lm_tiny", "routing_transformer_small"])
def test_sampling_equals_zoo_generate_under_the_same_seed(name):
    model = tiny(name)
    prompt = torch.stack(ids(20, 20, seed=2))
    torch.manual_seed(7)
    hf = model.generate(prompt, max_new_tokens=40, do_sample=True, temperature=0.8, top_k=20,
                        num_return_sequences=2)  # fmt: skip
    torch.manual_seed(7)
    ref = zoo.generate(model.zoo_model, prompt.repeat_interleave(2, 0), 40, temperature=0.8,
                       top_k=20)  # fmt: skip
    assert torch.equal(hf, ref)
    assert not torch.equal(hf[0], hf[1])  # the two samples of a prompt differ


@pytest.mark.parametrize("name", ["sparse_transformer_tiny", "routing_transformer_small_top2"])
def test_beam_search_reorders_the_zoo_cache(name):
    model = tiny(name)
    prompt = torch.stack(ids(12, 12, seed=3))
    kw = dict(max_new_tokens=20, num_beams=3, do_sample=False, num_return_sequences=2)
    assert torch.equal(model.generate(prompt, **kw), model.generate(prompt, use_cache=False, **kw))


def test_forward_with_use_cache_continues_where_the_prompt_ended():
    model = tiny("transformer_lm_tiny")
    (x,) = ids(20)
    with torch.no_grad():
        first = model(x[None, :15], use_cache=True)
        assert isinstance(first.cache, zt.ZooLMCache) and first.cache.get_seq_length() == 15
        step = model(x[None, 15:], cache=first.cache)
        full = model(x[None]).logits
    assert step.cache.get_seq_length() == 20
    torch.testing.assert_close(step.logits, full[:, 15:])


def test_what_a_zoo_cache_refuses_is_one_line():
    model = tiny("transformer_lm_tiny")
    prompt = torch.stack(ids(10))
    with pytest.raises(ConfigError, match="cache_implementation='static' is not available"):
        model.generate(prompt, max_new_tokens=3, cache_implementation="static")
    with pytest.raises(ConfigError, match="must be a zoo cache"):
        model.generate(prompt, max_new_tokens=3, cache=DynamicCache())
    cache = model(prompt, use_cache=True).cache
    with pytest.raises(ConfigError, match="cannot forget positions"):
        cache.crop(-1)
    with pytest.raises(ConfigError, match="hidden states come without a cache"):
        model(prompt[:, :1], cache=cache, output_hidden_states=True)
    with pytest.raises(ConfigError, match="unsupported arguments \\['position_ids'\\]"):
        model(prompt, position_ids=torch.arange(10)[None])


SEQ2SEQ = ["transformer_small.multi30k", "lstm_attention_small.multi30k"]
SOURCES = ["Ein Hund läuft über eine Wiese.", "Zwei Männer spielen Fußball auf einem großen Feld."]


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_seq2seq_greedy_decodes_one_token_per_step_and_equals_the_zoo(name):
    folder = zt.checkpoint_folder(name)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    src = tokenizer(SOURCES, return_tensors="pt", padding=True)
    steps: list[int] = []
    decode = model.zoo_model.decode
    model.zoo_model.decode = lambda tgt, *a, **kw: (
        steps.append(tgt.shape[1]),
        decode(tgt, *a, **kw),
    )[1]
    out = model.generate(**src, num_beams=1, max_new_tokens=40)
    del model.zoo_model.decode
    assert steps == [1] * (out.shape[1] - 1)  # BOS, then one new token per call
    ref = zoo.from_pretrained(name)
    assert torch.equal(out, ref.generate(src.input_ids, num_beams=1, max_new_tokens=40))
    texts = tokenizer.batch_decode(out, skip_special_tokens=True)
    assert texts[0].startswith("A dog") and "soccer" in texts[1]


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_seq2seq_beam_search_is_transformers_own_with_the_zoo_cache(name):
    folder = zt.checkpoint_folder(name)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder)
    src = AutoTokenizer.from_pretrained(folder)(SOURCES, return_tensors="pt", padding=True)
    reorders = []
    reorder = zt.ZooSeq2SeqCache.reorder_cache
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(zt.ZooSeq2SeqCache, "reorder_cache",
                   lambda self, idx: (reorders.append(idx.clone()), reorder(self, idx))[1])  # fmt: skip
        beams = model.generate(**src, num_beams=4, max_new_tokens=40, num_return_sequences=2)
    assert reorders and any(not torch.equal(i, torch.arange(len(i))) for i in reorders)
    slow = model.generate(**src, num_beams=4, max_new_tokens=40, num_return_sequences=2,
                          use_cache=False)  # fmt: skip
    assert beams.shape[0] == 4 and torch.equal(beams, slow)
