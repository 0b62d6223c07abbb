"""The causal language-modelling LightningModule shared by every decoder-only family.

It wraps any registered model (``model="transformer_lm_small"``, later ``sparse_transformer_*`` and
``routing_transformer_*``), trains it with next-token cross-entropy in nats, and reports bits per byte
through :class:`zoo.metrics.BitsPerByte`. Optimisation: AdamW (weight decay on matrices only) with
linear warmup then cosine decay, or the Transformer's inverse-square-root schedule (Vaswani et al.
2017, §5.3), or a constant rate. Gradient clipping and precision are Trainer settings
(``gradient_clip_val``, ``precision``).

``zoo predict`` samples continuations of the data module's ``prompts`` with the ``sampling`` options.

Logged: ``train/loss`` (nats/token), ``train/bpb``, ``train/lr``, ``val/loss``, ``val/bpb``,
``test/loss``, ``test/bpb``.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from lightning import LightningModule
from torch import Tensor

from zoo.errors import ConfigError, compile_failures
from zoo.generation import generate
from zoo.metrics import BitsPerByte
from zoo.models.registry import create_model
from zoo.tasks.checkpoint import MODEL_RECORD, CheckpointAsData, PlainValue, model_record

__all__ = ["CausalLM", "lr_lambda"]

SAMPLING_KEYS = {"max_new_tokens", "temperature", "top_k", "top_p", "truncate_prompt", "seed"}


def lr_lambda(schedule: str, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.1):
    """The multiplier of the peak learning rate at optimizer step ``s`` (0-based).

    - ``cosine``: linear warmup to 1 over ``warmup_steps``, then cosine decay to ``min_lr_ratio`` at
      ``total_steps``.
    - ``inverse_sqrt``: the Transformer's ``min(s / warmup, sqrt(warmup / s))`` (paper §5.3: with peak
      ``lr = d_model^-0.5 * warmup^-0.5`` this is exactly ``d_model^-0.5 min(s^-0.5, s warmup^-1.5)``).
    - ``constant``: linear warmup, then 1.
    """
    warmup = max(1, warmup_steps)

    def f(step: int) -> float:
        s = step + 1
        if schedule == "inverse_sqrt":
            return min(s / warmup, math.sqrt(warmup / s))
        if s <= warmup:
            return s / warmup
        if schedule == "constant":
            return 1.0
        progress = min(1.0, (s - warmup) / max(1, total_steps - warmup))
        return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return f


def _init_from(source: str, overrides: dict[str, Any], model: str | None = None) -> torch.nn.Module:
    """The pretrained model ``source`` with config ``overrides``, in train mode.

    Raises:
        ConfigError: ``model`` (a preset name, with ``overrides``) describes another architecture
            or other settings than the checkpoint's, or ``overrides`` change a weight's shape.
        CheckpointError: ``source`` is a Lightning checkpoint that cannot be loaded.
    """
    import dataclasses

    from zoo.models.registry import get_preset
    from zoo.pretrained import find_checkpoint, from_pretrained

    ckpt = find_checkpoint(source)  # a run directory or .ckpt: a first stage of this recipe
    if ckpt is None:
        pretrained = from_pretrained(source, dtype=torch.float32)  # trains in fp32 (mixed)
    else:
        pretrained = CausalLM.load_from_checkpoint(ckpt, map_location="cpu").model
    if model is not None:  # the recipe names a model: it must be the checkpoint's
        preset = get_preset(model)
        if preset.model_cls is not type(pretrained):  # before the overrides: they may not apply
            raise ConfigError(
                f"init_from {source} is a {type(pretrained).__name__}, but the model asked for is "
                f"{model} ({preset.model_cls.__name__}). Choose a checkpoint of that model, or "
                "fine-tune the checkpoint's own architecture with --model.init_args.model null."
            )
        wanted = preset.config.replace(**overrides)
        have = pretrained.config.replace(**overrides)
        differ = {
            f.name: (getattr(wanted, f.name), getattr(have, f.name))
            for f in dataclasses.fields(wanted)
            if getattr(wanted, f.name) != getattr(have, f.name)
            and f.name not in wanted.training_only  # the checkpoint's own, unless overridden
        }
        if differ:
            lines = ", ".join(f"{k}: {w!r} (checkpoint: {h!r})" for k, (w, h) in differ.items())
            raise ConfigError(
                f"init_from {source} is not the model {model} asked for ({lines}). Set those in "
                "model_config, or fine-tune the checkpoint as it is with "
                "--model.init_args.model null."
            )
    if not overrides:
        return pretrained.train()
    model_ = type(pretrained)(pretrained.config.replace(**overrides))
    try:
        model_.load_state_dict(pretrained.state_dict())
    except RuntimeError as e:
        raise ConfigError(
            f"model_config {overrides} changes the shapes of {source}'s weights, so they cannot "
            f"initialise it ({str(e).splitlines()[-1].strip()}). With init_from, only override "
            "settings that keep every shape (dropout, ...)."
        ) from None
    return model_


class CausalLM(CheckpointAsData, LightningModule):
    """Next-token prediction for any registered decoder-only model.

    Args:
        model: a registered model name (``zoo.list_models()``; default ``transformer_lm_small``).
            With ``init_from`` it must describe the checkpoint (a ConfigError names what
            differs); ``None`` takes the checkpoint's architecture as it is.
        model_config: overrides of that model's config fields (unknown keys are an error).
        init_from: start from pretrained weights: a published checkpoint (``zoo list``), a Hub repo
            id, a ``save_pretrained`` directory (anything :func:`zoo.from_pretrained` takes), or
            a run directory or ``.ckpt`` of a language-model run (its ``checkpoints/best.ckpt``, else
            ``last.ckpt``: a first training stage, as in ``pg19mini_fixed_v3_4096.yaml``). The
            architecture is the checkpoint's; ``model_config`` may still change settings that keep
            every weight's shape (``dropout``, ...). For fine-tuning:
            ``zoo fit --config ... --model.init_from transformer_lm_small.pg19mini``. Loading a
            checkpoint of such a run fetches ``init_from`` again (verified, usually the shipped copy
            or the HF cache) before its own weights replace it.
        lr: peak learning rate.
        weight_decay: AdamW weight decay, applied to weight matrices only (not biases, norms).
        betas: AdamW betas.
        eps: AdamW epsilon.
        warmup_steps: linear warmup length in optimizer steps.
        lr_schedule: ``cosine``, ``inverse_sqrt`` (the Transformer's) or ``constant``.
        min_lr_ratio: final learning rate of the cosine schedule as a fraction of ``lr``.
        sampling: keyword arguments of :func:`zoo.generate` used by ``zoo predict``
            (``max_new_tokens`` (default 256), ``temperature``, ``top_k``, ``top_p``,
            ``truncate_prompt``), plus ``seed``.
        gradient_checkpointing: recompute each block in the backward pass instead of keeping its
            activations (``model.gradient_checkpointing_enable()``): less memory, same gradients,
            about one more forward per step (docs/bench/gradient_checkpointing.md).
        compile: run the model through ``torch.compile`` (``nn.Module.compile``: the weights'
            names do not change): the same losses and updates to rounding, the first steps of
            each new batch shape compile for seconds (docs/speed.md gives both).

    Batches are ``(x, y)``: int64 ``(B, T)`` inputs and targets, ``-100`` marking unscored targets.
    """

    metric_class: type[BitsPerByte] = BitsPerByte  # bits per target token
    metric_key = "bpb"  # logged as train/bpb, val/bpb, test/bpb

    def __init__(
        self,
        model: str | None = None,
        model_config: dict[str, PlainValue] | None = None,
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-8,
        warmup_steps: int = 100,
        lr_schedule: Literal["cosine", "inverse_sqrt", "constant"] = "cosine",
        min_lr_ratio: float = 0.1,
        sampling: dict[str, PlainValue] | None = None,
        init_from: str | None = None,
        gradient_checkpointing: bool = False,
        compile: bool = False,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.sampling = {"max_new_tokens": 256, **(sampling or {})}
        unknown = set(self.sampling) - SAMPLING_KEYS
        if unknown:
            raise ConfigError(
                f"unknown sampling key(s) {sorted(unknown)}; valid: {sorted(SAMPLING_KEYS)}"
            )
        if init_from is None:
            self.model = create_model(model or "transformer_lm_small", **(model_config or {}))
        else:
            self.model = _init_from(init_from, model_config or {}, model)
        if gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        if compile:
            self.model.compile()
        self.train_bpb, self.val_bpb, self.test_bpb = (self.metric_class() for _ in range(3))
        self.skipped_steps = 0  # optimizer steps skipped for a non-finite loss or gradient

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Record the model's architecture, so the checkpoint loads without its ``init_from``."""
        checkpoint[MODEL_RECORD] = model_record(self.model)

    def forward(self, idx: Tensor) -> Tensor:
        return self.model(idx).logits

    def _nll(self, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        """Summed NLL in nats (fp32) and the number of scored targets."""
        x, y = batch
        with compile_failures(type(self.model).__name__, self.hparams.get("compile", False)):
            logits = self.model(x).logits  # (B, T, V)
        nll_sum = F.cross_entropy(
            logits.flatten(0, 1).float(), y.flatten(), ignore_index=-100, reduction="sum"
        )
        return nll_sum, (y != -100).sum()

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor | None:
        nll_sum, count = self._nll(batch)
        loss = nll_sum / count.clamp(min=1)
        if not torch.isfinite(loss):
            self._skip(f"the loss is {loss.item()}")
            return None  # Lightning then skips backward and the optimizer step
        self.train_bpb(nll_sum, count)
        self.log("train/loss", loss, prog_bar=True)
        self.log(f"train/{self.metric_key}", self.train_bpb, prog_bar=True)
        self.log("train/lr", self.trainer.optimizers[0].param_groups[0]["lr"])
        logging_step = (self.global_step + 1) % max(1, self.trainer.log_every_n_steps) == 0
        if hasattr(self.model, "training_logs") and logging_step:  # e.g. routing occupancy
            for name, value in self.model.training_logs().items():
                self.log(f"train/{name}", value)
        return loss

    def on_before_optimizer_step(self, optimizer) -> None:
        """Skip the step (drop every gradient: AdamW leaves parameters without one untouched) when
        a gradient is inf or NaN: one bad step would otherwise turn every weight into NaN."""
        grads = [p.grad for group in optimizer.param_groups for p in group["params"]
                 if p.grad is not None]  # fmt: skip
        if grads and not torch.stack([g.isfinite().all() for g in grads]).all():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    p.grad = None
            self._skip("a gradient is not finite")

    def _skip(self, why: str) -> None:
        """Count and report a skipped optimizer step (``train/skipped_steps``)."""
        from lightning.pytorch.utilities import rank_zero_warn

        self.skipped_steps += 1
        rank_zero_warn(f"step {self.global_step}: {why}; skipped the update "
                       f"({self.skipped_steps} skipped so far)")  # fmt: skip
        self.log("train/skipped_steps", float(self.skipped_steps))

    def _eval_step(self, batch: tuple[Tensor, Tensor], stage: str, metric: BitsPerByte) -> None:
        nll_sum, count = self._nll(batch)
        metric.update(nll_sum, count)
        self.log(f"{stage}/{self.metric_key}", metric, prog_bar=True, on_step=False, on_epoch=True)

    # The evaluation loss is a mean over all targets of the split, not a mean of batch means (the
    # last window of each document is short): derive it from the metric's synchronised sums.
    def on_validation_epoch_end(self) -> None:
        self.log("val/loss", self.val_bpb.compute() * math.log(2))

    def on_test_epoch_end(self) -> None:
        self.log("test/loss", self.test_bpb.compute() * math.log(2))

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._eval_step(batch, "val", self.val_bpb)

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._eval_step(batch, "test", self.test_bpb)

    def predict_step(self, batch: Tensor, batch_idx: int) -> Tensor:
        """Sample a continuation of each prompt in ``batch`` ``(B, T)``; returns ``(B, T + new)``."""
        options = dict(self.sampling)
        seed = options.pop("seed", 0) + batch_idx
        generator = torch.Generator(self.device).manual_seed(seed)
        return generate(self.model, batch, generator=generator, **options)

    def configure_optimizers(self) -> dict[str, Any]:
        hp = self.hparams
        decay = [p for p in self.model.parameters() if p.requires_grad and p.ndim >= 2]
        no_decay = [p for p in self.model.parameters() if p.requires_grad and p.ndim < 2]
        optimizer = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": hp.weight_decay},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=hp.lr,
            betas=tuple(hp.betas),
            eps=hp.eps,
            fused=True,  # one kernel for all parameters: a third of the foreach step's time on a CPU
        )
        total = self.trainer.estimated_stepping_batches if self._trainer is not None else 1
        total = int(total) if math.isfinite(total) else hp.warmup_steps * 100
        fn = lr_lambda(hp.lr_schedule, hp.warmup_steps, total, hp.min_lr_ratio)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, fn)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }
