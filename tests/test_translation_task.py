"""The translation task: the paper's schedule and label smoothing, and a checkpoint that carries its
tokenizer (a short fit on a corpus the test writes)."""

import math

import pytest
import torch
from lightning import Trainer

from zoo.data.translation import PAD_ID, TranslationDataModule, train_bpe
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
        logp = task.model(src, tgt_in).logits.log_softmax(-1)
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


@pytest.mark.parametrize("model", ["transformer_tiny", "lstm_attention_tiny"])
def test_a_compiled_loss_and_update_are_the_eager_ones(model):
    """compile=True: the training loss and gradients of the eager task, to rounding, with the
    weights' names unchanged. (Not Adam's first update: g / (|g| + 1e-9) turns a gradient's
    rounding near zero into a change of sign.)"""
    torch._dynamo.reset()
    tasks = []
    for compile in (False, True):
        torch.manual_seed(0)
        tasks.append(Translation(model=model, warmup_steps=1, compile=compile))
    assert list(tasks[1].state_dict()) == list(tasks[0].state_dict())
    torch.manual_seed(1)
    batch = tuple(torch.randint(3, 64, (2, n)) for n in (7, 5, 5))  # src, tgt_in, tgt_out
    results = []
    for task in tasks:
        loss, _ = task._loss(batch, 0.1)
        loss.backward()
        results.append((loss.detach(), [p.grad for p in task.parameters()]))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=1e-4, atol=1e-5)
    for p, q in zip(results[1][1], results[0][1], strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    assert tasks[1].model._compiled_call_impl is not None
    assert tasks[0].model._compiled_call_impl is None


def test_a_translation_model_the_backend_cannot_compile_is_one_clear_error():
    from torch._dynamo.exc import BackendCompilerFailed

    task = Translation(model="transformer_tiny", compile=True)

    def broken(*args, **kwargs):
        raise BackendCompilerFailed(broken, RuntimeError("no C++ compiler\nline 2"), None)

    task.model._compiled_call_impl = broken
    x = torch.full((1, 4), 5)
    with pytest.raises(ConfigError, match=r"\(RuntimeError: no C\+\+ compiler\): run without "):
        task._loss((x, x, x), 0.0)


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
    # the model carries the tokenizer: save_pretrained writes it next to the weights
    restored.model.save_pretrained(tmp_path / "pretrained")
    assert (tmp_path / "pretrained" / "tokenizer.json").is_file()


def test_vocab_mismatch_is_a_clear_error(tmp_path):
    _corpus(tmp_path)
    dm = TranslationDataModule(dataset="text_files", path=str(tmp_path), vocab_size=48)
    task = Translation(model="transformer_tiny")  # vocab_size 64
    trainer = Trainer(max_steps=1, logger=False, enable_progress_bar=False,
                      default_root_dir=tmp_path)  # fmt: skip
    with pytest.raises(ConfigError, match="vocab_size"):
        trainer.fit(task, datamodule=dm)


HYPS = ["A man in a blue shirt is standing on a ladder.", "Two dogs play in the snow .",
        "A woman reads", "Children are playing soccer on a field near the sea.",
        "A group of people stand outside a building."]  # fmt: skip
REFS = ["A man in a blue shirt stands on a ladder.", "Two dogs are playing in the snow.",
        "A woman is reading a book.", "Kids play football on a field by the sea.",
        "A group of people standing in front of a building."]  # fmt: skip


def port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _bleu_on_half(rank: int, master_port: int, result) -> None:
    import torch.distributed as dist
    from torchmetrics.text import SacreBLEUScore

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{master_port}", rank=rank,
                            world_size=2)  # fmt: skip
    half = slice(0, 2) if rank == 0 else slice(2, None)
    metric = SacreBLEUScore(tokenize="13a")
    metric.update(HYPS[half], [[r] for r in REFS[half]])
    score = 100 * float(metric.compute())
    with open(result, "a") as f:
        f.write(f"{score:.4f}\n")
    dist.destroy_process_group()


def test_bleu_is_sacrebleus_and_sums_over_processes(tmp_path):
    import sacrebleu
    from torchmetrics.text import SacreBLEUScore

    from zoo.tasks.translation import bleu_signature

    expected = sacrebleu.corpus_bleu(HYPS, [REFS], smooth_method="none").score
    assert expected == pytest.approx(
        sacrebleu.corpus_bleu(HYPS, [REFS]).score
    )  # every order matches
    whole = SacreBLEUScore(tokenize="13a")
    whole.update(HYPS, [[r] for r in REFS])
    assert 100 * float(whole.compute()) == pytest.approx(expected, abs=1e-4)
    # two processes (gloo) with half the sentences each: compute() syncs their n-gram statistics
    # and gives the corpus score of the whole, as under Lightning DDP
    result = tmp_path / "scores.txt"
    torch.multiprocessing.spawn(_bleu_on_half, args=(port(), str(result)), nprocs=2)
    assert result.read_text().split() == [f"{expected:.4f}"] * 2
    averaged = (sacrebleu.corpus_bleu(HYPS[:2], [REFS[:2]]).score
                + sacrebleu.corpus_bleu(HYPS[2:], [REFS[2:]]).score) / 2  # fmt: skip
    assert abs(averaged - expected) > 1.0  # what averaging per-process scores would report
    assert bleu_signature().startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:none|version:")


def test_bleu_is_computed_against_the_raw_references(monkeypatch):
    task = Translation(model="transformer_tiny").eval()
    task.tokenizer = train_bpe(HYPS + REFS, vocab_size=64)
    monkeypatch.setattr(task, "log", lambda *a, **k: None)
    src = torch.randint(3, 64, (len(REFS), 6))
    tgt = torch.randint(3, 64, (len(REFS), 7))  # tokens that decode to anything but REFS
    # the model "translates" every sentence into its reference
    monkeypatch.setattr(
        task, "translate_ids", lambda s, d=None: [task.tokenizer.encode(r).ids for r in REFS]
    )
    with torch.no_grad():
        task._eval_step((src, tgt, tgt, REFS), "test", "beam")
    assert 100 * float(task.bleu["test"].compute()) == pytest.approx(100.0)
