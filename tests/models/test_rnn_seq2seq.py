"""The LSTM encoder-decoder with attention (the lecture's running example): every score function and
mapping, padding, cached decoding, fertility bounds, beam search and the Translation task."""

import math

import pytest
import torch
from lightning import Trainer
from test_seq2seq import batch
from test_translation_task import _corpus

import zoo
from zoo.attention.mappings import MAPPINGS
from zoo.attention.scores import SCORES
from zoo.beam_search import translate_ids
from zoo.data import TranslationDataModule
from zoo.errors import ConfigError, SequenceTooLongError
from zoo.tasks import Translation

PAD = 0


def tiny(**overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    return zoo.create_model("lstm_attention_tiny", **overrides).eval()


def padded(src: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    out = src.clone()
    for row, n in enumerate(lengths):
        out[row, n:] = PAD
    return out


@pytest.mark.parametrize("score", list(SCORES))
@pytest.mark.parametrize("mapping", MAPPINGS)
def test_every_score_and_mapping_trains(score, mapping):
    model = tiny(score=score, mapping=mapping).train()
    src, tgt = batch(S=8, T=6)
    src = padded(src, [8, 5, 3])
    logits = model(src, tgt).logits
    assert logits.shape == (3, 6, 64) and logits.dtype == torch.float32
    assert torch.isfinite(logits).all()
    logits.logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("mapping", MAPPINGS)
def test_attention_is_a_distribution_over_the_real_source_words(mapping):
    model = tiny(mapping=mapping)
    src, tgt = batch(S=8, T=6)
    src = padded(src, [8, 5, 3])
    memory, mask = model.encode(src)
    cache = model.init_cache(memory, mask)
    model.decode(tgt, cache=cache)
    a = cache.attention  # (B, T, S or S + 1)
    assert a.shape[:2] == (3, 6)
    torch.testing.assert_close(a.sum(-1), torch.ones(3, 6))
    assert (a[1, :, 5:8] == 0).all() and (a[2, :, 3:8] == 0).all()  # no attention on padding
    if mapping in ("csoftmax", "csparsemax"):
        assert a.shape[2] == 9  # the sink
        coverage = a[..., :-1].sum(1)  # attention each source word received over the target
        assert (coverage <= model.config.fertility + 1e-5).all()


def test_fertility_bounds_bind_and_the_sink_takes_the_rest():
    model = tiny(mapping="csparsemax", fertility=0.5)
    src, tgt = batch(B=1, S=3, T=12)
    memory, mask = model.encode(src)
    cache = model.init_cache(memory, mask)
    model.decode(tgt, cache=cache)
    words = cache.attention[0, :, :-1].sum(0)
    assert (words <= 0.5 + 1e-5).all()
    assert cache.attention[0, -1, -1] > 0.99  # budgets spent: the last step attends to the sink


def test_padding_does_not_change_the_result():
    model = tiny()
    src, tgt = batch(S=6, T=5)
    wider = torch.cat([src, torch.full((3, 4), PAD)], 1)
    torch.testing.assert_close(model(src, tgt).logits, model(wider, tgt).logits)


@pytest.mark.parametrize("mapping", ["softmax", "csparsemax"])
def test_cached_decoding_equals_teacher_forcing(mapping):
    model = tiny(mapping=mapping)
    src, tgt = batch(S=7, T=6)
    full = model(src, tgt).logits
    memory, mask = model.encode(src)
    cache = model.init_cache(memory, mask)
    steps = [model.decode(tgt[:, t : t + 1], cache=cache) for t in range(6)]
    torch.testing.assert_close(torch.cat(steps, 1), full)


def test_decoder_is_causal_and_encoder_bidirectional():
    model = tiny()
    src, tgt = batch()
    logits = model(src, tgt).logits
    tgt2 = tgt.clone()
    tgt2[:, 4] = (tgt2[:, 4] % 63) + 1
    torch.testing.assert_close(model(src, tgt2).logits[:, :4], logits[:, :4])
    src2 = src.clone()
    src2[:, -1] = (src2[:, -1] % 63) + 1
    memory, _ = model.encode(src)
    memory2, _ = model.encode(src2)
    assert not torch.allclose(memory[:, 0], memory2[:, 0])


@pytest.mark.parametrize("mapping", ["softmax", "csoftmax"])
def test_beam_search_reorders_the_recurrent_state(mapping):
    model = tiny(mapping=mapping)
    src, _ = batch(S=6)
    greedy = translate_ids(model, src, bos_id=1, eos_id=2, decoding="greedy", max_len_b=8)
    beam1 = translate_ids(model, src, bos_id=1, eos_id=2, decoding="beam", beam_size=1,
                          alpha=0.0, max_len_b=8)  # fmt: skip
    assert greedy == beam1
    beam4 = translate_ids(model, src, bos_id=1, eos_id=2, decoding="beam", beam_size=4, max_len_b=8)
    assert len(beam4) == 3 and all(len(h) <= 6 + 8 for h in beam4)


def test_bad_config_and_long_input_are_clear_errors():
    with pytest.raises(ConfigError, match="unknown score 'cosine'|score='cosine' is not one of"):
        tiny(score="cosine")
    with pytest.raises(ConfigError, match="mapping='sparsmax' is not one of"):
        tiny(mapping="sparsmax")
    with pytest.raises(ConfigError, match="dot scores need keys and queries of one width"):
        SCORES["dot"](32, 16)
    with pytest.raises(SequenceTooLongError, match="source of 80 tokens"):
        tiny()(torch.ones(1, 80, dtype=torch.long), torch.ones(1, 2, dtype=torch.long))


def test_save_and_load_round_trip(tmp_path):
    model = tiny(mapping="csparsemax", score="additive")
    model.save_pretrained(tmp_path / "m")
    loaded = zoo.from_pretrained(tmp_path / "m").eval()
    src, tgt = batch()
    torch.testing.assert_close(loaded(src, tgt).logits, model(src, tgt).logits)


def test_the_translation_task_trains_and_tests_it(tmp_path):
    _corpus(tmp_path)
    dm = TranslationDataModule(dataset="text_files", path=str(tmp_path), vocab_size=64,
                               max_tokens=256, eval_batch_size=8, test_split="test")  # fmt: skip
    task = Translation(model="lstm_attention_tiny", model_config={"mapping": "entmax15"},
                       warmup_steps=4, beam_size=2, max_len_b=5)  # fmt: skip
    trainer = Trainer(max_steps=3, val_check_interval=3, limit_val_batches=1, logger=False,
                      enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(task, datamodule=dm)
    assert math.isfinite(float(trainer.callback_metrics["val/ppl"]))
    trainer.test(task, datamodule=dm, verbose=False)
    assert 0.0 <= float(trainer.callback_metrics["test/bleu"]) <= 100.0
