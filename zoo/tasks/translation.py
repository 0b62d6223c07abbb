"""The translation LightningModule: the encoder-decoder Transformer trained as in Vaswani et al. 2017.

Paper §5.3–5.4: label-smoothed cross-entropy (``epsilon_ls = 0.1``; ``F.cross_entropy``'s
``label_smoothing``, which spreads ``epsilon`` uniformly over the vocabulary), Adam with
``beta1 = 0.9, beta2 = 0.98, eps = 1e-9``, and the learning rate
``d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)`` (``lr_scale`` multiplies it). Validation
reports the unsmoothed loss (``val/nll``, nats per target token), its perplexity, and BLEU of greedy
translations; ``zoo test`` translates the test set with beam search (beam 4, ``alpha = 0.6``, max
length source + 50) and reports BLEU with sacrebleu's signature. BLEU is torchmetrics'
``SacreBLEUScore`` (sacrebleu's 13a tokenizer; corpus n-gram statistics summed over processes, so
it is exact under DDP) on detokenized text (the BPE decoded back to sentences) against the raw
references.

The BPE tokenizer of the data module is saved in every checkpoint (``checkpoint["tokenizer"]``), so
a trained model translates with no other files.
"""

from __future__ import annotations

from typing import Any, Literal

import sacrebleu
import torch
import torch.nn.functional as F
from lightning import LightningModule
from rich.console import Console
from tokenizers import Tokenizer
from torch import Tensor, nn
from torchmetrics.text import SacreBLEUScore

from zoo.beam_search import translate_ids
from zoo.data.translation import BOS_ID, EOS_ID, PAD_ID
from zoo.errors import ConfigError, compile_failures
from zoo.models.registry import create_model
from zoo.tasks.causal_lm import lr_lambda
from zoo.tasks.checkpoint import CheckpointAsData, PlainValue

__all__ = ["Translation", "bleu_signature"]


def bleu_signature() -> str:
    """sacrebleu's signature of the BLEU that torchmetrics' ``SacreBLEUScore(tokenize="13a")``
    computes against one reference: no smoothing (it differs from sacrebleu's default ``exp`` only
    when an n-gram order has no match in the whole corpus)."""
    bleu = sacrebleu.metrics.BLEU(smooth_method="none")
    bleu.corpus_score(["a"], [["a"]])  # sacrebleu learns the number of references here
    return str(bleu.get_signature())


class Translation(CheckpointAsData, LightningModule):
    """Sequence-to-sequence translation with a registered encoder-decoder model.

    Args:
        model: a registered encoder-decoder preset (``transformer_small``, ``transformer_base``, ...).
        model_config: overrides of its config (``vocab_size`` must equal the data module's).
        label_smoothing: ``epsilon_ls`` (paper: 0.1).
        warmup_steps: the schedule's warmup (paper: 4000).
        lr_scale: multiplies the paper's schedule (1.0 = the paper).
        betas: Adam's betas (paper: (0.9, 0.98)).
        eps: Adam's epsilon (paper: 1e-9).
        beam_size: beam search at test time: the beam (paper: 4).
        alpha: its length penalty exponent (paper: 0.6).
        max_len_a: its output limit ``max_len_a * source_length + max_len_b`` (paper: 1).
        max_len_b: the constant of that limit (paper: 50).
        val_bleu: translate the validation set greedily and report BLEU at each validation.
        gradient_checkpointing: recompute each encoder and decoder layer (LSTM: decoder step) in
            the backward pass instead of keeping its activations
            (``model.gradient_checkpointing_enable()``; docs/bench/gradient_checkpointing.md).
        compile: run the model's forward (the training and validation losses) through
            ``torch.compile`` (``nn.Module.compile``: the weights' names do not change); beam and
            greedy decoding stay eager. The same losses to rounding; docs/speed.md gives the
            compile time and the gain.

    Batches: ``(src (B, S), tgt_in (B, T), tgt_out (B, T))`` int64 from
    :class:`~zoo.data.TranslationDataModule`.
    """

    def __init__(
        self,
        model: str = "transformer_small",
        model_config: dict[str, PlainValue] | None = None,
        label_smoothing: float = 0.1,
        warmup_steps: int = 4000,
        lr_scale: float = 1.0,
        betas: tuple[float, float] = (0.9, 0.98),
        eps: float = 1e-9,
        beam_size: int = 4,
        alpha: float = 0.6,
        max_len_a: float = 1.0,
        max_len_b: int = 50,
        val_bleu: bool = True,
        decoding: Literal["beam", "greedy"] = "beam",
        gradient_checkpointing: bool = False,
        compile: bool = False,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = create_model(model, **(model_config or {}))
        if gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        if compile:
            self.model.compile()
        if not getattr(self.model, "is_encoder_decoder", False):
            raise ConfigError(
                f"{model} is not an encoder-decoder model: use transformer_small, ..."
            )
        # corpus BLEU from n-gram statistics that torchmetrics sums over processes (DDP-safe)
        self.bleu = nn.ModuleDict({s: SacreBLEUScore(tokenize="13a") for s in ("val", "test")})

    @property
    def tokenizer(self) -> Tokenizer | None:
        """The joint BPE (the model's, so ``self.model.save_pretrained`` writes it too)."""
        return self.model.tokenizer

    @tokenizer.setter
    def tokenizer(self, tokenizer: Tokenizer | None) -> None:
        self.model.tokenizer = tokenizer

    # --- data and tokenizer ----------------------------------------------------------------------
    def _datamodule(self):
        return getattr(self.trainer, "datamodule", None) if self._trainer is not None else None

    def _give_tokenizer_to_data(self) -> None:
        """Make the data module encode with this task's tokenizer (a restored checkpoint's), and
        drop anything it encoded with another one."""
        dm = self._datamodule()
        if dm is None or self.tokenizer is None or dm.tokenizer is self.tokenizer:
            return
        if dm.tokenizer is None or dm.tokenizer.to_str() != self.tokenizer.to_str():
            dm.splits.clear()
        dm.tokenizer = self.tokenizer

    def setup(self, stage: str) -> None:
        # Lightning has run the data module's setup already: it has learned (or kept) a tokenizer
        dm = self._datamodule()
        if self.tokenizer is None and dm is not None:
            self.tokenizer = dm.tokenizer
        if self.tokenizer is not None:
            v = self.tokenizer.get_vocab_size()
            if v != self.model.config.vocab_size:
                raise ConfigError(
                    f"the tokenizer has {v} tokens but the model's vocab_size is "
                    f"{self.model.config.vocab_size}: set data vocab_size and "
                    "model_config.vocab_size to the same value"
                )
        self._give_tokenizer_to_data()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.tokenizer is not None:
            checkpoint["tokenizer"] = self.tokenizer.to_str()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if "tokenizer" in checkpoint:  # on `--ckpt_path` resumes this runs after setup
            self.tokenizer = Tokenizer.from_str(checkpoint["tokenizer"])
            self._give_tokenizer_to_data()

    # --- training --------------------------------------------------------------------------------
    def _loss(
        self, batch: tuple[Tensor, Tensor, Tensor], smoothing: float
    ) -> tuple[Tensor, Tensor]:
        src, tgt_in, tgt_out = batch
        with compile_failures(type(self.model).__name__, self.hparams.get("compile", False)):
            logits = self.model(src, tgt_in).logits.flatten(0, 1).float()
        target = tgt_out.flatten()
        loss = F.cross_entropy(logits, target, ignore_index=PAD_ID, label_smoothing=smoothing)
        return loss, (target != PAD_ID).sum()

    def training_step(self, batch, batch_idx: int) -> Tensor:
        loss, n = self._loss(batch, self.hparams.label_smoothing)
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/lr", self.trainer.optimizers[0].param_groups[0]["lr"])
        self.log("train/target_tokens", n.float(), reduce_fx="sum")
        return loss

    # --- evaluation ------------------------------------------------------------------------------
    def translate_ids(self, src: Tensor, decoding: str | None = None) -> list[list[int]]:
        """Token ids of the translations of ``src`` ``(B, S)`` (EOS removed), decoded with this
        task's settings (``decoding`` overrides ``hparams.decoding``)."""
        hp = self.hparams
        return translate_ids(
            self.model, src, bos_id=BOS_ID, eos_id=EOS_ID, decoding=decoding or hp.decoding,
            beam_size=hp.beam_size, alpha=hp.alpha, max_len_a=hp.max_len_a, max_len_b=hp.max_len_b,
        )  # fmt: skip

    def _eval_step(self, batch, stage: str, decoding: str | None) -> None:
        loss, n = self._loss(batch[:3], 0.0)
        self.log(f"{stage}/nll", loss, batch_size=int(n), prog_bar=stage == "val")
        if decoding is None:
            return
        assert self.tokenizer is not None
        src, _, tgt_out = batch[:3]
        hyps = self.tokenizer.decode_batch(self.translate_ids(src, decoding))
        if len(batch) > 3:  # the raw target sentences (TranslationDataModule's eval batches)
            refs = list(batch[3])
        else:
            refs = self.tokenizer.decode_batch([[t for t in row if t not in (PAD_ID, EOS_ID)]
                                                for row in tgt_out.tolist()])  # fmt: skip
        self.bleu[stage].update(hyps, [[r] for r in refs])

    def _log_bleu(self, stage: str) -> None:
        metric = self.bleu[stage]
        if not metric.update_called:
            return
        score = 100 * float(metric.compute())  # summed over processes under DDP
        self.log(f"{stage}/bleu", score, prog_bar=True, sync_dist=False)
        if stage == "test" and self.trainer.is_global_zero:
            Console().print(
                f"{stage} BLEU {score:.2f}, sacrebleu signature {bleu_signature()}", soft_wrap=True
            )
        metric.reset()

    def validation_step(self, batch, batch_idx: int) -> None:
        self._eval_step(batch, "val", "greedy" if self.hparams.val_bleu else None)

    def on_validation_epoch_end(self) -> None:
        self.log("val/ppl", torch.exp(self.trainer.callback_metrics["val/nll"]))
        self._log_bleu("val")

    def test_step(self, batch, batch_idx: int) -> None:
        self._eval_step(batch, "test", self.hparams.decoding)

    def on_test_epoch_end(self) -> None:
        self._log_bleu("test")

    def configure_optimizers(self) -> dict[str, Any]:
        hp = self.hparams
        peak = hp.lr_scale * self.model.config.d_model**-0.5 * hp.warmup_steps**-0.5
        optimizer = torch.optim.Adam(
            self.model.parameters(), lr=peak, betas=tuple(hp.betas), eps=hp.eps, fused=True
        )
        # min(s/w, sqrt(w/s)) * d^-0.5 w^-0.5 = d^-0.5 min(s^-0.5, s w^-1.5): the paper's formula
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lr_lambda("inverse_sqrt", hp.warmup_steps, 0)
        )
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }
