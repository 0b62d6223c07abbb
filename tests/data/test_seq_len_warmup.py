import pytest
import torch

from zoo.data import ByteTextDataModule
from zoo.errors import ConfigError


def module(**kw):
    dm = ByteTextDataModule(dataset="pg19mini", seq_len=1024, batch_size=2, **kw)
    return dm


def test_stages_double_up_to_the_window_in_equal_parts():
    dm = module(seq_len_warmup_steps=300, seq_len_warmup_start=128)
    assert dm.warmup_lengths() == [128, 256, 512]
    assert [dm.window_length(s) for s in (0, 99, 100, 199, 200, 299, 300, 5000)] == [
        128, 128, 256, 256, 512, 512, 1024, 1024,
    ]  # fmt: skip
    assert module().window_length(0) == 1024  # no warmup


def test_a_two_stage_schedule_stays_short_then_jumps_to_the_window():
    dm = module(seq_len_warmup_steps=300, seq_len_warmup_start=128, seq_len_warmup_doubling=False)
    assert dm.warmup_lengths() == [128]
    assert [dm.window_length(s) for s in (0, 299, 300)] == [128, 128, 1024]
    assert dm.state_dict()["seq_len_warmup_doubling"] is False  # a resume must keep it


def test_start_must_reach_the_window_by_doubling():
    with pytest.raises(ConfigError, match="never reaches seq_len=1024"):
        module(seq_len_warmup_steps=10, seq_len_warmup_start=300).warmup_lengths()
    with pytest.raises(ConfigError, match="seq_len_warmup_steps must be >= 0"):
        module(seq_len_warmup_steps=-1)


class FakeTrainer:
    def __init__(self, step, training=True):
        self.global_step, self.training = step, training


def test_training_batches_are_cut_into_shorter_windows_with_the_same_bytes():
    dm = module(seq_len_warmup_steps=200, seq_len_warmup_start=256)
    x = torch.arange(2 * 1024).view(2, 1024)
    y = x + 1
    dm.trainer = FakeTrainer(step=0)
    xs, ys = dm.on_after_batch_transfer((x, y), 0)
    assert xs.shape == (8, 256) and torch.equal(xs.flatten(), x.flatten())
    assert torch.equal(ys, xs + 1)  # every target still follows its input
    dm.trainer = FakeTrainer(step=199)
    assert dm.on_after_batch_transfer((x, y), 0)[0].shape == (4, 512)
    dm.trainer = FakeTrainer(step=200)
    assert dm.on_after_batch_transfer((x, y), 0)[0].shape == (2, 1024)
    dm.trainer = FakeTrainer(step=0, training=False)  # evaluation keeps the full windows
    assert dm.on_after_batch_transfer((x, y), 0)[0].shape == (2, 1024)


def test_a_resume_with_another_schedule_is_refused_with_the_flags_to_fix_it():
    saved = module(seq_len_warmup_steps=200, seq_len_warmup_start=256).state_dict()
    module(seq_len_warmup_steps=200, seq_len_warmup_start=256).load_state_dict(saved)  # same: ok
    with pytest.raises(ConfigError, match="--data.init_args.seq_len_warmup_steps 200"):
        module().load_state_dict(saved)
    module().load_state_dict({})  # checkpoints from before the schedule existed


def test_lightning_trains_on_short_windows_first_and_checks_the_schedule_on_resume(tmp_path):
    from lightning.pytorch import Trainer

    from zoo.tasks import CausalLM

    text = tmp_path / "book.txt"
    text.write_bytes(bytes(range(32, 127)) * 400)
    seen = []

    def run(max_steps, warmup_steps, ckpt_path=None):
        task = CausalLM("transformer_lm_tiny", warmup_steps=1)
        task.model.register_forward_pre_hook(lambda m, args: seen.append(tuple(args[0].shape)))
        dm = ByteTextDataModule(
            dataset="text_file", path=str(text), batch_size=2, seq_len=128,
            seq_len_warmup_steps=warmup_steps, seq_len_warmup_start=32,
        )  # fmt: skip
        trainer = Trainer(
            max_steps=max_steps, logger=False, enable_progress_bar=False,
            enable_model_summary=False, limit_val_batches=0, default_root_dir=tmp_path,
        )  # fmt: skip
        trainer.fit(task, datamodule=dm, ckpt_path=ckpt_path)
        return trainer

    trainer = run(max_steps=4, warmup_steps=3)
    assert seen == [(8, 32), (8, 32), (4, 64), (2, 128)]  # 2 stages over 3 steps, then 128
    ckpt = tmp_path / "four.ckpt"
    trainer.save_checkpoint(ckpt)
    with pytest.raises(ConfigError, match="seq_len_warmup_steps=3"):
        run(max_steps=6, warmup_steps=0, ckpt_path=ckpt)
