"""experiments/lstm_attention/bench_mappings.py: the batch it times and the step it times."""

from fakes import recipe_module

import zoo
from zoo.data.translation import BOS_ID, EOS_ID, PAD_ID, train_bpe

bench = recipe_module("experiments/lstm_attention/bench_mappings.py")

PAIRS = [("ein Hund läuft im Park", "a dog runs in the park"), ("eine Frau liest", "a woman reads")]


def test_batch_stays_within_max_tokens_and_shifts_the_target():
    tok = train_bpe([s for pair in PAIRS for s in pair] * 20, vocab_size=64)
    src, tgt_in, tgt_out = bench.batch(tok, PAIRS * 10, max_tokens=40)
    assert src.numel() <= 40 and src.shape[0] >= 1
    assert (tgt_in[:, 0] == BOS_ID).all()
    first = tok.encode(PAIRS[0][1]).ids
    assert tgt_out[0, : len(first) + 1].tolist() == [*first, EOS_ID]
    assert tgt_in[0, 1 : len(first) + 1].tolist() == first
    one, _, _ = bench.batch(tok, PAIRS, max_tokens=1)  # too small: still one sentence
    assert one.shape[0] == 1 and (one != PAD_ID).all()


def test_step_runs_backward_and_clears_the_gradients():
    tok = train_bpe([s for pair in PAIRS for s in pair] * 20, vocab_size=64)
    model = zoo.create_model("lstm_attention_tiny", vocab_size=64, mapping="sparsemax")
    src, tgt_in, tgt_out = bench.batch(tok, PAIRS, max_tokens=100)
    seen = []
    model.lm_head.weight.register_hook(lambda g: seen.append(g.abs().sum()))
    bench.step(model, src, tgt_in, tgt_out)
    assert len(seen) == 1 and seen[0] > 0
    assert all(p.grad is None for p in model.parameters())
