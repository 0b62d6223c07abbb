"""transformers' Trainer fine-tunes a zoo model through zoo.integrations.transformers: a few steps
of a tiny language model on a tiny repetitive data set lower its loss and change its weights, and
Trainer's save writes a folder zoo.from_pretrained loads."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("accelerate", reason="transformers' Trainer needs accelerate")
from transformers import Trainer, TrainingArguments  # noqa: E402

import zoo  # noqa: E402
import zoo.integrations.transformers as zt  # noqa: E402


def test_trainer_steps_lower_the_loss_and_save_a_zoo_folder(tmp_path):
    torch.manual_seed(0)
    model = zt.wrap(zoo.create_model("transformer_lm_tiny").train())
    row = torch.tensor(list(b"abcdefgh" * 8))  # 64 bytes the model can learn to continue
    data = [{"input_ids": row, "labels": row} for _ in range(16)]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, max_steps=8,
        learning_rate=3e-3, report_to="none", use_cpu=True, save_strategy="no", logging_steps=1,
        disable_tqdm=True, seed=0,
    )  # fmt: skip
    trainer = Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 8 and losses[-1] < losses[0] - 0.5  # nats
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    trainer.save_model(str(tmp_path / "saved"))  # model.save_pretrained(..., state_dict=...)
    loaded = zoo.from_pretrained(tmp_path / "saved")
    x = row[None, :16]
    with torch.no_grad():
        assert torch.equal(loaded(x).logits, model.eval()(x).logits)


def test_gradient_checkpointing_switches_the_zoo_models_own():
    model = zt.wrap(zoo.create_model("transformer_lm_tiny").train())
    # what TrainingArguments(gradient_checkpointing=True) calls (transformers 5.25's new name)
    enable = getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)
    disable = getattr(
        model, "activation_checkpointing_disable", model.gradient_checkpointing_disable
    )
    enable()
    assert model.zoo_model.gradient_checkpointing
    disable()
    assert not model.zoo_model.gradient_checkpointing
