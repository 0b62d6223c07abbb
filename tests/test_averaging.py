"""Checkpoint averaging (Vaswani et al. 2017, §6.1): the mean of the weights, the last N by step, and a
result that loads like any Lightning checkpoint."""

import lightning
import pytest
import torch

from zoo.averaging import average_checkpoints, last_checkpoints, save_average
from zoo.cli import main
from zoo.data.translation import train_bpe
from zoo.errors import CheckpointError, ConfigError
from zoo.tasks import Translation

TOKENIZER = train_bpe(["ein Hund läuft im Park"] * 5, vocab_size=64)


def _checkpoint(path, step, seed, model_config=None, **extra):
    torch.manual_seed(seed)
    task = Translation(model="transformer_tiny", model_config=model_config)
    ckpt = {
        "global_step": step,
        "epoch": 0,
        "pytorch-lightning_version": lightning.__version__,
        "state_dict": task.state_dict(),
        "hyper_parameters": dict(task.hparams),
        "optimizer_states": [{"state": {}}],
        **extra,
    }
    torch.save(ckpt, path)
    return task


def test_the_average_is_the_mean_of_the_weights(tmp_path):
    tasks = [_checkpoint(tmp_path / f"{s}.ckpt", s, seed=s) for s in (1, 2, 3)]
    averaged = average_checkpoints([tmp_path / f"{s}.ckpt" for s in (1, 2, 3)])
    for key, value in averaged["state_dict"].items():
        expected = sum(t.state_dict()[key].double() for t in tasks) / 3
        torch.testing.assert_close(value, expected.float(), rtol=0, atol=1e-7)
        assert value.dtype == tasks[0].state_dict()[key].dtype
    assert "optimizer_states" not in averaged  # not a point the optimizer visited
    assert averaged["global_step"] == 3 and averaged["averaged_from"]["global_steps"] == [1, 2, 3]


def test_last_checkpoints_are_chosen_by_step(tmp_path):
    for name, step in (("a", 300), ("b", 100), ("c", 200), ("d", 400)):
        _checkpoint(tmp_path / f"{name}.ckpt", step, seed=0)
    assert [p.name for p in last_checkpoints(tmp_path, 3)] == ["c.ckpt", "a.ckpt", "d.ckpt"]
    with pytest.raises(ConfigError, match="has 4 checkpoint"):
        last_checkpoints(tmp_path, 5)
    _checkpoint(tmp_path / "best.ckpt", 400, seed=0)
    with pytest.raises(ConfigError, match="both from step 400"):
        last_checkpoints(tmp_path, 2)


def test_checkpoints_of_different_models_are_refused(tmp_path):
    _checkpoint(tmp_path / "a.ckpt", 1, seed=0)
    torch.save({"global_step": 2, "state_dict": {"x": torch.zeros(2)}}, tmp_path / "b.ckpt")
    with pytest.raises(CheckpointError, match="hold different tensors"):
        average_checkpoints([tmp_path / "a.ckpt", tmp_path / "b.ckpt"])
    (tmp_path / "c.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="c.ckpt could not be read"):
        average_checkpoints([tmp_path / "a.ckpt", tmp_path / "c.ckpt"])


def test_a_sparsemax_run_and_a_dense_run_are_not_averaged(tmp_path, capsys):
    """Same tensor shapes, different functions: the saved configs decide. Dropout and the
    training settings may differ (one architecture); the attention mapping may not."""
    _checkpoint(tmp_path / "dense.ckpt", 1, seed=0)
    _checkpoint(
        tmp_path / "sparse.ckpt", 2, seed=1, model_config={"attention_mapping": "sparsemax"}
    )
    with pytest.raises(SystemExit) as e:
        main(["average", str(tmp_path / "dense.ckpt"), str(tmp_path / "sparse.ckpt"),
              "--out", str(tmp_path / "out.ckpt")])  # fmt: skip
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "dense.ckpt and " in err and "sparse.ckpt are checkpoints of different models" in err
    assert "attention_mapping is 'softmax' in dense.ckpt but 'sparsemax' in sparse.ckpt" in err
    assert not (tmp_path / "out.ckpt").exists()
    _checkpoint(tmp_path / "dropout.ckpt", 3, seed=2, model_config={"dropout": 0.3})
    averaged = average_checkpoints([tmp_path / "dense.ckpt", tmp_path / "dropout.ckpt"])
    assert averaged["averaged_from"]["global_steps"] == [1, 3]


def test_integer_buffers_must_agree(tmp_path):
    for step, value in ((1, 0), (2, 1)):
        state = {"w": torch.ones(2) * step, "count": torch.tensor([value])}
        torch.save({"global_step": step, "state_dict": state}, tmp_path / f"{step}.ckpt")
    with pytest.raises(CheckpointError, match="integer tensor count differs"):
        average_checkpoints([tmp_path / "1.ckpt", tmp_path / "2.ckpt"])


def test_zoo_average_writes_a_loadable_checkpoint(tmp_path, capsys):
    runs = tmp_path / "every100"
    runs.mkdir()
    for s in (1, 2, 3):
        _checkpoint(runs / f"step{s}.ckpt", s * 100, seed=s, tokenizer=TOKENIZER.to_str())
    out = tmp_path / "averaged.ckpt"
    main(["average", str(runs), "--last", "2", "--out", str(out)])
    assert "averaged 2 checkpoints (step2.ckpt, step3.ckpt)" in capsys.readouterr().out
    restored = Translation.load_from_checkpoint(out, strict=True)
    expected = average_checkpoints([runs / "step2.ckpt", runs / "step3.ckpt"])["state_dict"]
    for key, value in restored.state_dict().items():
        assert torch.equal(value, expected[key])
    assert restored.tokenizer.to_str() == TOKENIZER.to_str()  # kept from the newest
    with pytest.raises(SystemExit) as e:
        main(["average", str(runs), "--last", "7", "--out", str(out)])
    assert e.value.code == 2


def test_save_average_never_leaves_a_partial_file(tmp_path, monkeypatch):
    _checkpoint(tmp_path / "a.ckpt", 1, seed=0)

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", fail)
    with pytest.raises(OSError):
        save_average([tmp_path / "a.ckpt"], tmp_path / "out.ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.ckpt"]
