"""The translation task: the paper's schedule and label smoothing, and a checkpoint that carries its
tokenizer (a short fit on a corpus the test writes)."""

import math

import pytest
import torch
from lightning import Trainer

from zoo.data.translation import PAD_ID, TranslationDataModule
from zoo.errors import ConfigError
from zoo.tasks import Translation


def test_learning_rate_is_the_papers_formula():
    task = Translation(model="transformer_tiny", warmup_steps=40)
    opt = task.configure_optimizers()
    optimizer, scheduler = opt["optimizer"], opt["lr_scheduler"]["scheduler"]
    d = task.model.config.d_model
    for step in range(1, 161):  # optimizer step `step` uses the rate set after step - 1 updates
        expected = d**-0.5 * min(step**-0.5, step * 40**-1.5)
        assert optimizer.param_groups[0]["lr"] == pytest.approx(expected, rel=1e-9)
        optimizer.step()
        scheduler.step()


def test_label_smoothed_loss_matches_a_hand_computation():
    torch.manual_seed(0)
    task = Translation(model="transformer_tiny", label_smoothing=0.1).eval()
    src = torch.randint(3, 64, (2, 5))
    tgt_in = torch.randint(3, 64, (2, 4))
    tgt_out = torch.randint(3, 64, (2, 4))
    tgt_out[1, 2:] = PAD_ID  # padding is not scored
    with torch.no_grad():
        loss, n = task._loss((src, tgt_in, tgt_out), 0.1)
        logp = task.model(src, tgt_in).log_softmax(-1)
    V, eps, total, count = 64, 0.1, 0.0, 0
    for b in range(2):
        for t in range(4):
            y = int(tgt_out[b, t])
            if y == PAD_ID:
                continue
            # q = (1 - eps) one_hot(y) + eps / V; loss = -sum_k q_k log p_k
            total += -sum(((1 - eps) * (k == y) + eps / V) * float(logp[b, t, k]) for k in range(V))
            count += 1
    assert int(n) == count == 6
    assert float(loss) == pytest.approx(total / count, rel=1e-5)


def _corpus(path, upper=False):
    words_de = ["ein", "Hund", "läuft", "im", "Park", "eine", "Frau", "liest", "Buch", "Mann"]
    words_en = ["a", "dog", "runs", "in", "park", "woman", "reads", "book", "man", "the"]
    for split, n in (("train", 300), ("val", 20), ("test", 20)):
        de, en = [], []
        for i in range(n):
            pick = [(i * 7 + j * 3) % 10 for j in range(3 + i % 4)]
            de.append(" ".join(words_de[p] for p in pick))
            en.append(" ".join(words_en[p] for p in pick))
        if upper:
            de, en = [x.upper() for x in de], [x.upper() for x in en]
        (path / f"{split}.de").write_text("\n".join(de) + "\n")
        (path / f"{split}.en").write_text("\n".join(en) + "\n")


def test_the_checkpoint_carries_the_tokenizer(tmp_path):
    _corpus(tmp_path)
    dm = TranslationDataModule(dataset="text_files", path=str(tmp_path), vocab_size=64,
                               max_tokens=256, eval_batch_size=8, test_split="test")  # fmt: skip
    task = Translation(model="transformer_tiny", warmup_steps=4, beam_size=2, max_len_b=5)
    trainer = Trainer(max_steps=3, val_check_interval=3, limit_val_batches=1, logger=False,
                      enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(task, datamodule=dm)
    assert 0.0 <= trainer.callback_metrics["val/bleu"] <= 100.0
    assert math.isfinite(float(trainer.callback_metrics["val/ppl"]))
    ckpt = tmp_path / "model.ckpt"
    trainer.save_checkpoint(ckpt)
    restored = Translation.load_from_checkpoint(ckpt)
    assert restored.tokenizer.to_str() == dm.tokenizer.to_str()
    src = torch.tensor([restored.tokenizer.encode("ein Hund läuft").ids])
    (ids,) = restored.eval().translate_ids(src)
    assert isinstance(restored.tokenizer.decode(ids), str) and len(ids) < src.shape[1] + 5
    trainer.test(restored, datamodule=dm, verbose=False)
    assert "test/bleu" in trainer.callback_metrics
    # data whose own BPE differs, already encoded: it is re-encoded with the checkpoint's
    other = tmp_path / "other"
    other.mkdir()
    _corpus(other, upper=True)
    dm2 = TranslationDataModule(dataset="text_files", path=str(other), vocab_size=64,
                                eval_batch_size=8, test_split="test")  # fmt: skip
    dm2.setup("test")
    dm2.test_dataloader()
    assert dm2.tokenizer.to_str() != restored.tokenizer.to_str()
    trainer.test(restored, datamodule=dm2, verbose=False)
    first = dm2.texts["test"][0][0]
    assert dm2.splits["test"]["src"][0] == restored.tokenizer.encode(first).ids
    assert restored.bleu_signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a")


def test_vocab_mismatch_is_a_clear_error(tmp_path):
    _corpus(tmp_path)
    dm = TranslationDataModule(dataset="text_files", path=str(tmp_path), vocab_size=48)
    task = Translation(model="transformer_tiny")  # vocab_size 64
    trainer = Trainer(max_steps=1, logger=False, enable_progress_bar=False)
    with pytest.raises(ConfigError, match="vocab_size"):
        trainer.fit(task, datamodule=dm)
