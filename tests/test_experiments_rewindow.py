"""experiments/block_selection/rewindow_stage.py: a stage trained on short windows goes on with
long ones; the datamodule of the new recipe accepts the rewritten stage and refused the old."""

import pytest
import torch
from fakes import recipe_module

from zoo.data import ByteTextDataModule
from zoo.errors import ConfigError

main = recipe_module("experiments/block_selection/rewindow_stage.py").main


def _stage(path, step=7, seq_len=32, batch_size=8):
    schedule = {"seq_len": seq_len, "seq_len_warmup_steps": 0, "seq_len_warmup_start": 256,
                "seq_len_warmup_doubling": True}  # fmt: skip
    torch.save({"global_step": step, "state_dict": {"w": torch.ones(2)},
                "ByteTextDataModule": dict(schedule),
                "datamodule_hyper_parameters": {**schedule, "batch_size": batch_size,
                                                "eval_batch_size": 4}}, path)  # fmt: skip


def _recipe_datamodule():  # the recipe after the change: 2 x 128 bytes, the first 7 steps 8 x 32
    return ByteTextDataModule(dataset="pg19mini", seq_len=128, batch_size=2, eval_batch_size=1,
                              seq_len_warmup_steps=7, seq_len_warmup_start=32,
                              seq_len_warmup_doubling=False)  # fmt: skip


def test_the_rewritten_stage_resumes_under_the_long_window_recipe(tmp_path):
    _stage(tmp_path / "stage.ckpt")
    with pytest.raises(ConfigError, match="the checkpoint was trained with seq_len=32"):
        _recipe_datamodule().load_state_dict(
            torch.load(tmp_path / "stage.ckpt", weights_only=True)["ByteTextDataModule"]
        )
    main([str(tmp_path / "stage.ckpt"), str(tmp_path / "out.ckpt"), "--seq-len", "128",
          "--batch-size", "2", "--eval-batch-size", "1"])  # fmt: skip
    out = torch.load(tmp_path / "out.ckpt", weights_only=True)
    dm = _recipe_datamodule()
    dm.load_state_dict(out["ByteTextDataModule"])  # accepted
    assert [dm.window_length(s) for s in (0, 6, 7, 100)] == [32, 32, 128, 128]
    assert out["global_step"] == 7 and torch.equal(out["state_dict"]["w"], torch.ones(2))
    assert out["datamodule_hyper_parameters"]["batch_size"] == 2


def test_the_bytes_per_step_must_stay(tmp_path):
    _stage(tmp_path / "stage.ckpt")
    with pytest.raises(SystemExit):
        main([str(tmp_path / "stage.ckpt"), str(tmp_path / "out.ckpt"), "--seq-len", "128",
              "--batch-size", "4", "--eval-batch-size", "1"])  # fmt: skip
    assert not (tmp_path / "out.ckpt").exists()
