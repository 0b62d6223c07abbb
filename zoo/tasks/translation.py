"""The translation LightningModule: the encoder-decoder Transformer trained as in Vaswani et al. 2017.

Paper §5.3–5.4: label-smoothed cross-entropy (``epsilon_ls = 0.1``; ``F.cross_entropy``'s
``label_smoothing``, which spreads ``epsilon`` uniformly over the vocabulary), Adam with
``beta1 = 0.9, beta2 = 0.98, eps = 1e-9``, and the learning rate
``d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)`` (``lr_scale`` multiplies it). Validation
reports the unsmoothed loss (``val/nll``, nats per target token), its perplexity, and BLEU of greedy
translations; ``zoo test`` translates the test set with beam search (beam 4, ``alpha = 0.6``, max
length source + 50) and reports BLEU with sacrebleu's signature. BLEU is computed by sacrebleu on
detokenized text (the BPE decoded back to sentences) against the raw references.

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
from torch import Tensor

from zoo.beam_search import beam_search, greedy_search
from zoo.data.translation import BOS_ID, EOS_ID, PAD_ID
from zoo.errors import ConfigError
from zoo.registry import create_model
from zoo.tasks.causal_lm import lr_lambda

__all__ = ["Translation"]


class Translation(LightningModule):
    """Sequence-to-sequence translation with a registered encoder-decoder model.

    Args:
        model: a registered encoder-decoder preset (``transformer_small``, ``transformer_base``, ...).
        model_config: overrides of its config (``vocab_size`` must equal the data module's).
        label_smoothing: ``epsilon_ls`` (paper: 0.1).
        warmup_steps: the schedule's warmup (paper: 4000).
        lr_scale: multiplies the paper's schedule (1.0 = the paper).
        betas, eps: Adam's (paper: (0.9, 0.98), 1e-9).
        beam_size, alpha, max_len_a, max_len_b: beam search at test time (paper: 4, 0.6, 1, 50).
        val_bleu: translate the validation set greedily and report BLEU at each validation.

    Batches: ``(src (B, S), tgt_in (B, T), tgt_out (B, T))`` int64 from
    :class:`~zoo.data.TranslationDataModule`.
    """

    def __init__(
        self,
        model: str = "transformer_small",
        model_config: dict[str, Any] | None = None,
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
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = create_model(model, **(model_config or {}))
        if not getattr(self.model, "is_encoder_decoder", False):
            raise ConfigError(
                f"{model} is not an encoder-decoder model: use transformer_small, ..."
            )
        self.tokenizer: Tokenizer | None = None
        self._hyps: list[str] = []
        self._refs: list[str] = []

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
        logits = self.model(src, tgt_in).flatten(0, 1).float()
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
        """Token ids of the translations of ``src`` ``(B, S)`` (EOS removed)."""
        hp = self.hparams
        kw = dict(bos_id=BOS_ID, eos_id=EOS_ID, max_len_a=hp.max_len_a, max_len_b=hp.max_len_b)
        if (decoding or hp.decoding) == "greedy":
            outs = greedy_search(self.model, src, **kw)
        else:
            beams = beam_search(self.model, src, beam_size=hp.beam_size, alpha=hp.alpha, **kw)
            outs = [b[0].tokens for b in beams]
        return [[t for t in out if t != EOS_ID] for out in outs]

    def _eval_step(self, batch, stage: str, decoding: str | None) -> None:
        loss, n = self._loss(batch, 0.0)
        self.log(f"{stage}/nll", loss, batch_size=int(n), prog_bar=stage == "val")
        if decoding is None:
            return
        assert self.tokenizer is not None
        src, _, tgt_out = batch
        for ids in self.translate_ids(src, decoding):
            self._hyps.append(self.tokenizer.decode(ids))
        for row in tgt_out.tolist():
            self._refs.append(self.tokenizer.decode([t for t in row if t not in (PAD_ID, EOS_ID)]))

    def _bleu(self, stage: str) -> None:
        if not self._hyps:
            return
        bleu = sacrebleu.metrics.BLEU()
        score = bleu.corpus_score(self._hyps, [self._refs])
        self.log(f"{stage}/bleu", score.score, prog_bar=True)
        self.bleu_signature = str(bleu.get_signature())
        if stage == "test" and self.trainer.is_global_zero:
            Console().print(
                f"{stage} BLEU {score.score:.2f} ({score}) signature {self.bleu_signature}"
            )
        self._hyps, self._refs = [], []

    def validation_step(self, batch, batch_idx: int) -> None:
        self._eval_step(batch, "val", "greedy" if self.hparams.val_bleu else None)

    def on_validation_epoch_end(self) -> None:
        self.log("val/ppl", torch.exp(self.trainer.callback_metrics["val/nll"]))
        self._bleu("val")

    def test_step(self, batch, batch_idx: int) -> None:
        self._eval_step(batch, "test", self.hparams.decoding)

    def on_test_epoch_end(self) -> None:
        self._bleu("test")

    def configure_optimizers(self) -> dict[str, Any]:
        hp = self.hparams
        peak = hp.lr_scale * self.model.config.d_model**-0.5 * hp.warmup_steps**-0.5
        optimizer = torch.optim.Adam(
            self.model.parameters(), lr=peak, betas=tuple(hp.betas), eps=hp.eps
        )
        # min(s/w, sqrt(w/s)) * d^-0.5 w^-0.5 = d^-0.5 min(s^-0.5, s w^-1.5): the paper's formula
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lr_lambda("inverse_sqrt", hp.warmup_steps, 0)
        )
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }
