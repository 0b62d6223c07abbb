"""The forward keywords a transformers user types, on the zoo's own models (issue 78, items 3
and 4): ``input_ids=``, ``attention_mask=`` (left and right padding), ``labels=``,
``return_dict``, ``output_hidden_states``, ``past_key_values``; outputs with ``.logits``,
``.loss``, ``.past_key_values``."""

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo.decoding import DecodingState, padding_offsets, padding_spans
from zoo.errors import ConfigError
from zoo.models.outputs import CausalLMOutput, Seq2SeqLMOutput

LANGUAGE_MODELS = ["transformer_lm_tiny", "sparse_transformer_tiny", "routing_transformer_tiny",
                   "image_transformer_tiny", "transformer_lm_small_rotary"]  # fmt: skip
TRANSLATORS = ["transformer_tiny", "lstm_attention_tiny"]


def tiny(name):
    torch.manual_seed(0)
    small = dict(d_model=32, n_layers=2, n_heads=2, d_ff=64) if name.endswith("_rotary") else {}
    return zoo.create_model(name, **small).eval()


def rows(model, lengths=(9, 5, 7)):
    """Prompts of different lengths and their left-padded batch and mask."""
    g = torch.Generator().manual_seed(1)
    V = min(model.config.vocab_size, 256)
    prompts = [torch.randint(1, V, (n,), generator=g) for n in lengths]
    T = max(lengths)
    ids = torch.zeros(len(prompts), T, dtype=torch.long)
    mask = torch.zeros(len(prompts), T, dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, T - len(p) :], mask[r, T - len(p) :] = p, 1
    return prompts, ids, mask


@pytest.mark.parametrize("name", LANGUAGE_MODELS)
def test_a_left_padded_row_gives_the_logits_and_tokens_it_gets_alone(name):
    model = tiny(name)
    prompts, ids, mask = rows(model)
    out = model(input_ids=ids, attention_mask=mask)
    assert isinstance(out, CausalLMOutput) and out.logits.shape[:2] == ids.shape
    for r, p in enumerate(prompts):
        alone = model(p[None]).logits[0]
        torch.testing.assert_close(out.logits[r, -len(p) :], alone, rtol=1e-5, atol=1e-5)
        assert not out.logits[r, : -len(p)].any()  # padding positions: zeros
    batch = model.generate(ids, attention_mask=mask, max_new_tokens=8)
    for r, p in enumerate(prompts):
        assert torch.equal(
            batch[r, ids.shape[1] - len(p) :], model.generate(p[None], max_new_tokens=8)[0]
        )


@pytest.mark.parametrize("name", LANGUAGE_MODELS)
def test_right_padding_changes_nothing_before_it(name):
    model = tiny(name)
    prompts, _, _ = rows(model)
    T = max(len(p) for p in prompts)
    ids = torch.stack([F.pad(p, (0, T - len(p))) for p in prompts])
    mask = torch.stack([F.pad(torch.ones_like(p), (0, T - len(p))) for p in prompts])
    out = model(ids, mask).logits
    for r, p in enumerate(prompts):
        torch.testing.assert_close(out[r, : len(p)], model(p[None]).logits[0], rtol=1e-5, atol=1e-5)


def test_labels_give_the_shifted_loss_and_minus_100_is_left_out():
    model = tiny("transformer_lm_tiny")
    ids = torch.randint(0, 256, (2, 12))
    labels = ids.clone()
    labels[1, :4] = -100
    out = model(ids, labels=labels)
    expected = F.cross_entropy(out.logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(),
                               ignore_index=-100)  # fmt: skip
    torch.testing.assert_close(out.loss, expected)
    assert out.loss.dtype == torch.float32 and out.loss.requires_grad
    out.loss.backward()  # a training step through transformers' convention
    assert model.lm_head.weight.grad is not None
    with pytest.raises(ConfigError, match="labels must be"):
        model(ids, labels=labels[:, :5])


def test_return_dict_false_hidden_states_and_indexing():
    model = tiny("transformer_lm_tiny")
    ids = torch.randint(0, 256, (2, 10))
    out = model(ids, labels=ids, output_hidden_states=True)
    loss, logits, states = model(ids, labels=ids, output_hidden_states=True, return_dict=False)
    torch.testing.assert_close(logits, out.logits)
    assert torch.equal(out[0], out.loss) and torch.equal(out["logits"], out.logits)
    assert len(states) == model.config.n_layers + 1
    assert all(s.shape == (2, 10, model.config.d_model) for s in states)
    # the last hidden state is after the final LayerNorm: the output projection of it is the logits
    torch.testing.assert_close(model.lm_head(states[-1]), logits)
    with pytest.raises(KeyError):
        out["past_key_values"]  # None fields are not keys, as in transformers


def test_past_key_values_decode_incrementally_and_a_positional_cache_is_refused():
    model = tiny("transformer_lm_tiny")
    ids = torch.randint(0, 256, (1, 12))
    first = model(ids[:, :8], use_cache=True)
    cache = first.past_key_values
    assert cache.seq_len == 8
    step = model(ids[:, 8:], past_key_values=cache)
    assert step.past_key_values is cache and cache.seq_len == 12
    torch.testing.assert_close(step.logits, model(ids).logits[:, 8:], rtol=1e-5, atol=1e-5)
    with pytest.raises(ConfigError, match="past_key_values=cache"):
        model(ids, model.init_cache(1))
    with pytest.raises(ConfigError, match="decodes through generate"):
        model(ids[:, :1], torch.tensor([[0] * 12 + [1]]), past_key_values=cache)


@pytest.mark.parametrize(
    "mask, match",
    [
        ([[1, 0, 1]], "not padded on one side"),
        ([[0, 1, 0]], "not padded on one side"),
        ([[0, 0, 0]], "all padding"),
        ([[2, 1, 1]], "only 0"),
        ([[1, 1]], "attention_mask is"),
    ],
)
def test_masks_without_a_meaning_are_one_line_errors(mask, match):
    model = tiny("transformer_lm_tiny")
    with pytest.raises(ConfigError, match=match) as err:
        model(torch.ones(1, 3, dtype=torch.long), attention_mask=torch.tensor(mask))
    assert "\n" not in str(err.value)


def test_padding_offsets_and_decoding_state_groups():
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1], [1, 1, 1, 0]])
    assert padding_spans(mask, mask.shape).tolist() == [[2, 4], [0, 4], [1, 4], [0, 3]]
    with pytest.raises(ConfigError, match="padded on the left"):  # new tokens would follow
        padding_offsets(mask, mask.shape)
    mask = mask[:3]
    assert padding_offsets(mask, mask.shape).tolist() == [2, 0, 1]
    assert padding_offsets(torch.ones(2, 3), (2, 3)) is None
    model = tiny("transformer_lm_tiny")
    state = DecodingState(model, padding_offsets(mask, mask.shape))
    assert sorted(g.offset for g in state.groups) == [0, 1, 2]
    logits = state.advance(torch.randint(1, 256, (3, 4)))
    assert logits.shape == (3, 4, 256) and not logits[0, :2].any() and logits[0, 2:].any()
    state.reorder(torch.tensor([2, 2, 0]))  # beams of row 2 twice, then row 0
    assert [(g.offset, g.rows.tolist()) for g in state.groups] == [(1, [0, 1]), (2, [2])]
    assert state.advance(torch.randint(1, 256, (3, 1))).shape == (3, 1, 256)


def test_decoding_past_the_context_slides_as_zoo_generate_always_did():
    model = tiny("transformer_lm_tiny")  # max_seq_len 128
    ids = torch.randint(0, 256, (2, 100))
    state = DecodingState(model, batch_size=2)
    logits, seq = state.advance(ids), ids
    for _ in range(60):  # 160 positions: one re-encoding of the last 64 tokens
        token = logits[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, token], 1)
        logits = state.advance(token)
    assert state.restarts == 1
    assert torch.equal(seq, zoo.generate(model, ids, 60, temperature=0))


@pytest.mark.parametrize("name", TRANSLATORS)
def test_encoder_decoders_take_labels_and_the_tokenizers_mask(name):
    model = tiny(name)
    src = torch.randint(3, 64, (2, 7))
    src[1, 5:] = 0  # padding
    labels = torch.randint(3, 64, (2, 6))
    labels[0, 4:] = -100
    out = model(input_ids=src, attention_mask=(src != 0).long(), labels=labels)
    assert isinstance(out, Seq2SeqLMOutput) and out.logits.shape == (2, 6, 64)
    decoder_input_ids = torch.cat([torch.ones(2, 1, dtype=torch.long), labels[:, :-1]], 1)
    decoder_input_ids[decoder_input_ids == -100] = 0
    torch.testing.assert_close(model(src, decoder_input_ids).logits, out.logits)
    expected = F.cross_entropy(out.logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    torch.testing.assert_close(out.loss, expected)
    with pytest.raises(ConfigError, match="disagrees with the padding"):
        model(src, decoder_input_ids, attention_mask=torch.ones_like(src))
    with pytest.raises(ConfigError, match="decoder_input_ids"):
        model(src)


def test_keywords_a_model_does_not_take_are_one_line_errors():
    model = tiny("transformer_lm_tiny")
    ids = torch.randint(0, 256, (1, 4))
    with pytest.raises(ConfigError, match="does not take \\['position_ids'\\]"):
        model(ids, position_ids=torch.arange(4)[None])
    with pytest.raises(ConfigError, match="output_attentions"):
        model(ids, output_attentions=True)
    routing = tiny("routing_transformer_tiny").train()
    routing(ids, padding_mask=torch.zeros(1, 4, dtype=torch.bool))  # the family's own keyword
