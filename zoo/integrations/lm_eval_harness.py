"""EleutherAI's lm-evaluation-harness (``pip install "attention-zoo[lm-eval]"``) scores zoo language
models: this module registers :class:`ZooLM` as the harness's model ``zoo``.

From a shell (the module imports the registration, then runs the harness's own CLI):

    python -m zoo.integrations.lm_eval_harness --model zoo \\
        --model_args pretrained=transformer_lm_small.pg19mini --tasks wikitext

From Python: ``import zoo.integrations.lm_eval_harness`` first, then
``lm_eval.simple_evaluate(model="zoo", model_args="pretrained=...", tasks=[...])``, or pass
``model=ZooLM(pretrained=...)``.

Zoo language models read bytes: every string is scored as its UTF-8 bytes, so the harness's
``bits_per_byte`` is the zoo's bits per byte. :meth:`ZooLM.loglikelihood_rolling` scores a document
with the windows of ``zoo evaluate`` (:class:`~zoo.data.windows.EvalWindows`: non-overlapping windows
of the model's context, or sliding ones with ``stride``); the document's first byte, which
``zoo evaluate`` does not score, is scored after ``first_byte_context`` (default a newline), since the
harness counts every byte. So the harness's bits per byte of a document of ``L`` bytes is
``(zoo's summed bits + bits of the first byte) / L``.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

try:
    from lm_eval.api.model import LM
    from lm_eval.api.registry import register_model
except ModuleNotFoundError:
    raise ModuleNotFoundError(
        "zoo.integrations.lm_eval_harness needs lm-eval: pip install 'attention-zoo[lm-eval]'"
    ) from None

from zoo.data.windows import IGNORE_INDEX, EvalWindows
from zoo.errors import ConfigError, ZooError
from zoo.generation import generate
from zoo.pretrained import from_pretrained

__all__ = ["ZooLM", "main"]


def _positive_int(name: str, value: int | str | None, default: int) -> int:
    """lm-eval passes ``--model_args`` values and ``--batch_size`` as strings."""
    if value is None or value == "auto":
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number < 1:
        raise ConfigError(f"zoo lm-eval model: {name} must be a positive integer, got {value!r}")
    return number


def _dtype(value: str | torch.dtype | None) -> torch.dtype | None:
    if value is None or value == "auto" or isinstance(value, torch.dtype):
        return None if value == "auto" else value
    dtype = getattr(torch, str(value).removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ConfigError(f"zoo lm-eval model: dtype={value!r} is not a torch dtype (e.g. float32)")
    return dtype


@register_model("zoo")
class ZooLM(LM):
    """A zoo byte-level language model behind the harness's ``LM`` interface.

    Args (``--model_args key=value,...``):
        pretrained: a published checkpoint, Hub repo id or ``save_pretrained`` folder
            (:func:`zoo.from_pretrained`); ``revision``, ``dtype`` (e.g. ``float32``, the default as
            saved) and ``device`` (default ``cpu``; the harness's default ``cuda:0`` on a machine
            without CUDA runs on the CPU with a warning) go to it as well.
        batch_size: windows or requests per forward pass (``auto``: 8).
        stride: sliding-window rolling log-likelihood (``zoo evaluate``'s windows slide by this
            many bytes); default: non-overlapping windows, as ``zoo evaluate`` measures.
        first_byte_context: the text before a document's first byte (default ``"\\n"``); zoo
            models have no beginning-of-text token.

    Raises:
        ConfigError: an encoder-decoder or image checkpoint (the harness scores text), a bad
            ``batch_size``/``stride``/``dtype``, an empty ``first_byte_context``, or a
            continuation longer than the model's context; the errors of
            :func:`zoo.from_pretrained` for the checkpoint.
    """

    def __init__(
        self,
        pretrained: str,
        revision: str | None = None,
        device: str | None = None,
        dtype: str | torch.dtype | None = None,
        batch_size: int | str | None = None,
        max_batch_size: int | str | None = None,
        stride: int | str | None = None,
        first_byte_context: str = "\n",
    ) -> None:
        super().__init__()
        if str(device).startswith("cuda") and not torch.cuda.is_available():
            warnings.warn(f"device={device!r} (the harness's default) is not available on this "
                          "machine: the zoo model runs on the CPU", stacklevel=2)  # fmt: skip
            device = "cpu"
        self.model = from_pretrained(pretrained, revision=revision, device=device or "cpu",
                                     dtype=_dtype(dtype))  # fmt: skip
        config = self.model.config
        if getattr(self.model, "is_encoder_decoder", False) or hasattr(config, "image_shape"):
            raise ConfigError(
                f"{pretrained} is not a byte-level text model: the harness's zoo model scores "
                "causal language models of text (zoo list shows them)"
            )
        self.context = config.max_seq_len
        self.batch_size = _positive_int("batch_size", batch_size, 8)
        self.stride = None if stride is None else _positive_int("stride", stride, self.context)
        if self.stride is not None and self.stride > self.context:
            raise ConfigError(f"zoo lm-eval model: stride={self.stride} is longer than the "
                              f"model's context of {self.context} bytes")  # fmt: skip
        if not first_byte_context:
            raise ConfigError("zoo lm-eval model: first_byte_context must hold at least one byte")
        self.first_byte_context = first_byte_context.encode()
        self._device = self.model.device  # the harness's LM.device

    # --- scoring ---------------------------------------------------------------------------------

    @torch.no_grad()
    def _score(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """Summed log-probability in nats (float64) of the targets ``y`` (``-100``: unscored) and
        whether each is the argmax, per row of ``x, y`` ``(B, T)`` int64."""
        logits = self.model(x.to(self.model.device)).logits.float()  # (B, T, V)
        y = y.to(self.model.device)
        nll = F.cross_entropy(logits.transpose(1, 2), y, ignore_index=IGNORE_INDEX, reduction="none")
        scored = y != IGNORE_INDEX
        greedy = (logits.argmax(-1) == y) | ~scored
        return -nll.double().sum(-1).cpu(), greedy.all(-1).cpu()

    def _score_rows(self, rows: Sequence[tuple[bytes, int]]) -> list[tuple[float, bool]]:
        """``(sequence, n)``: the log-probability of the last ``n`` bytes of each sequence given
        the bytes before them, in batches of equal length (no padding: content-routed attention
        would see it)."""
        out: list[tuple[float, bool] | None] = [None] * len(rows)
        order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        for batch in _equal_lengths(batches, rows):
            seq = torch.tensor([list(rows[i][0]) for i in batch], dtype=torch.long)
            x, y = seq[:, :-1], seq[:, 1:].clone()
            for row, i in enumerate(batch):
                y[row, : y.shape[1] - rows[i][1]] = IGNORE_INDEX
            logp, greedy = self._score(x, y)
            for row, i in enumerate(batch):
                out[i] = (float(logp[row]), bool(greedy[row]))
        return out  # type: ignore[return-value]

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """Log-probability (nats) of each ``(context, continuation)``'s continuation bytes after
        the context's last bytes (as many as the model's context holds), and whether greedy
        decoding would produce them."""
        rows = []
        for request in requests:
            context, continuation = (s.encode() for s in request.args)
            if len(continuation) > self.context:
                raise ConfigError(
                    f"a continuation of {len(continuation)} bytes is longer than the model's "
                    f"context of {self.context} bytes"
                )
            seq = (context or self.first_byte_context) + continuation
            rows.append((seq[-(self.context + 1) :], len(continuation)))
        return self._score_rows(rows)

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Log-probability (nats) of each whole document: ``zoo evaluate``'s windows over its bytes,
        plus its first byte after ``first_byte_context``."""
        totals = []
        for request in requests:
            text = request.args[0].encode()
            if not text:
                totals.append(0.0)
                continue
            first = self.first_byte_context[-self.context :] + text[:1]
            total = self._score_rows([(first, 1)])[0][0]
            windows = EvalWindows([np.frombuffer(text, dtype=np.uint8)], self.context, self.stride)
            for start in range(0, len(windows), self.batch_size):
                items = [windows[i] for i in range(start, min(start + self.batch_size, len(windows)))]
                x, y = (torch.stack(t) for t in zip(*items, strict=True))
                total += float(self._score(x, y)[0].sum())
            totals.append(total)
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Greedy (or, with ``do_sample``, sampled) continuation of each context, cut before the
        first of ``until`` (default: none) and at ``max_gen_toks`` bytes (default 256)."""
        answers = []
        for request in requests:
            context, kwargs = request.args
            kwargs = dict(kwargs or {})
            until = kwargs.pop("until", None) or []
            until = [until] if isinstance(until, str) else list(until)
            new = _positive_int("max_gen_toks", kwargs.pop("max_gen_toks", None), 256)
            sample = bool(kwargs.pop("do_sample", False))
            temperature = float(kwargs.pop("temperature", 1.0 if sample else 0.0))
            prompt = torch.tensor([list(context.encode() or self.first_byte_context)])
            seq = generate(self.model, prompt.to(self.model.device), new,
                           temperature=temperature if sample else 0.0,
                           top_k=kwargs.pop("top_k", None), top_p=kwargs.pop("top_p", None),
                           truncate_prompt=True)  # fmt: skip
            text = bytes(seq[0, -new:].tolist()).decode("utf-8", errors="replace")
            cuts = [text.find(stop) for stop in until if stop and stop in text]
            answers.append(text[: min(cuts)] if cuts else text)
        return answers


def _equal_lengths(batches: Iterable[list[int]], rows: Sequence[tuple[bytes, int]]):
    """Split each batch (indices sorted by length) where the sequence length changes."""
    for batch in batches:
        run: list[int] = []
        for i in batch:
            if run and len(rows[i][0]) != len(rows[run[0]][0]):
                yield run
                run = []
            run.append(i)
        if run:
            yield run


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m zoo.integrations.lm_eval_harness ARGS``: the harness's CLI (``lm-eval ARGS``)
    with the ``zoo`` model registered; a zoo error ends it with one line instead of a traceback."""
    from lm_eval.__main__ import cli_evaluate

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    try:
        cli_evaluate()
    except ZooError as err:
        print(f"zoo: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
