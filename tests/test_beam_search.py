"""Greedy and beam search of the encoder-decoder Transformer."""

import itertools

import pytest
import torch

import zoo
from zoo.beam_search import beam_search, greedy_search, length_penalty

PAD, BOS, EOS = 0, 1, 2


def tiny(vocab_size=64, seed=0):
    torch.manual_seed(seed)
    return zoo.create_model("transformer_tiny", vocab_size=vocab_size).eval()


def sources(V=64, seed=3):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, V, (3, 8), generator=g)
    src[1, 5:] = PAD  # ragged lengths
    src[2, 3:] = PAD
    return src


def test_length_penalty_is_gnmt():
    assert length_penalty(1, 0.6) == 1.0
    assert length_penalty(7, 0.6) == pytest.approx(2.0**0.6)
    assert length_penalty(7, 0.0) == 1.0


def test_beam_of_one_is_greedy():
    model, src = tiny(), sources()
    greedy = greedy_search(model, src, bos_id=BOS, eos_id=EOS, max_len_b=10)
    beams = beam_search(model, src, bos_id=BOS, eos_id=EOS, beam_size=1, max_len_b=10)
    assert [b[0].tokens for b in beams] == greedy
    assert all(out[-1] == EOS and EOS not in out[:-1] for out in greedy)
    # max length = source tokens + 10 (a = 1): the limit forces EOS
    lengths = (src != PAD).sum(-1) + 10
    assert all(len(o) <= int(n) for o, n in zip(greedy, lengths, strict=True))


def test_batched_beam_search_equals_one_sentence_at_a_time():
    model, src = tiny(), sources()
    together = beam_search(model, src, bos_id=BOS, eos_id=EOS, beam_size=3, max_len_b=6)
    for b in range(3):
        row = src[b : b + 1, : int((src[b] != PAD).sum())]
        alone = beam_search(model, row, bos_id=BOS, eos_id=EOS, beam_size=3, max_len_b=6)
        assert [h.tokens for h in alone[0]] == [h.tokens for h in together[b]]
        assert [h.score for h in alone[0]] == pytest.approx(
            [h.score for h in together[b]], abs=1e-5
        )


def _score(model, src, out, alpha):
    """log p(out | src) (nats, summed over tokens incl. EOS) / lp(|out|), by a full forward."""
    tgt = torch.tensor([[BOS, *out[:-1]]])
    with torch.no_grad():
        logp = model(src, tgt).logits[0].float().log_softmax(-1)
    total = float(sum(logp[t, tok] for t, tok in enumerate(out)))
    return total / length_penalty(len(out), alpha)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_beam_search_finds_the_best_sequence_when_the_beam_covers_everything(alpha):
    V, L = 6, 3  # tokens 3, 4, 5 and EOS; outputs of at most 3 tokens: 1 + 3 + 9 sequences
    model = tiny(vocab_size=V, seed=4)  # a model whose best output depends on alpha
    src = torch.tensor([[3, 4, 5, 4]])
    words = [3, 4, 5]
    candidates = [(EOS,)] + [
        (*w, EOS) for n in range(1, L) for w in itertools.product(words, repeat=n)
    ]
    best = max(candidates, key=lambda out: _score(model, src, out, alpha))
    found = beam_search(model, src, bos_id=BOS, eos_id=EOS, beam_size=9, alpha=alpha,
                        max_len_a=0, max_len_b=L)[0]  # fmt: skip
    assert found[0].tokens == best
    assert found[0].score == pytest.approx(_score(model, src, best, alpha), abs=1e-5)
    scores = [h.score for h in found]
    assert scores == sorted(scores, reverse=True)
    assert len(best) == (1 if alpha == 0.0 else 3)  # the length penalty changes the winner
    # the search matters: a beam of 1 (greedy) does not always find it
    if alpha == 0.0:
        narrow = beam_search(model, src, bos_id=BOS, eos_id=EOS, beam_size=1, alpha=alpha,
                             max_len_a=0, max_len_b=L)[0]  # fmt: skip
        assert narrow[0].tokens != best


@pytest.mark.parametrize("name", ["transformer_tiny", "lstm_attention_tiny"])
def test_a_beam_step_moves_the_decoder_state_and_leaves_the_source_side(name):
    """``reorder(index, same_source=True)`` (what a beam step calls) skips the source side and
    decodes exactly as the full reorder, for an ``index`` that stays within each sentence's beams."""
    import copy

    torch.manual_seed(0)
    model = zoo.create_model(name, vocab_size=64).eval()
    src, K = sources(), 3
    rows = torch.arange(3).repeat_interleave(K)
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        full = model.init_cache(memory[rows], src_mask[rows])
        tokens = torch.randint(3, 64, (3 * K, 2))
        model.decode(tokens, cache=full)
        beam_step, unmoved = copy.deepcopy(full), copy.deepcopy(full)
        index = torch.tensor([2, 0, 0, 4, 4, 3, 8, 6, 7])  # each row within its sentence's beams
        source_side = beam_step.memory
        full.reorder(index)
        beam_step.reorder(index, same_source=True)
        assert beam_step.memory is source_side  # not copied
        nxt = torch.randint(3, 64, (3 * K, 1))
        expected = model.decode(nxt, cache=full)
        torch.testing.assert_close(model.decode(nxt, cache=beam_step), expected, rtol=0, atol=0)
        # the reorder matters: the cache as it was before it decodes differently
        assert not torch.equal(model.decode(nxt, cache=unmoved), expected)
