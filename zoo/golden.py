"""Golden logits: does a published model still compute what it computed when it was published?

At publish time (``zoo export``) :func:`record` runs the model on a fixed input and writes
``golden.json`` beside the weights: the input's recipe, the sha256 of the fp32 logits, summary
statistics and a few logits with their positions. ``zoo verify NAME`` (:func:`verify`) runs the same
input on the user's machine, in the dtype asked for, and reports ``ok`` or the drift. Drift comes from
a torch upgrade, another CPU's kernels, a lower precision, or a code change that altered the model;
CI verifies every shipped checkpoint, so such a change cannot land unnoticed.

The input is the same for every checkpoint of a kind and needs no data set:

- decoder-only models (text and image): ``length = min(context, 1024)`` tokens drawn uniformly from
  the vocabulary by a ``torch.Generator`` seeded with 0, long enough that the sparse patterns'
  far columns and the routing clusters take part;
- encoder-decoder models: a source and a target of ``min(context, 32)`` tokens each, drawn the
  same way (ids 1 and up, so that no token is padding).

Logits are compared as float32 ``(T, V)`` (the first sequence). The hash says whether they are
bit-identical to the recorded ones; the verdict rests on the largest absolute difference of the
recorded values and of the statistics, against a tolerance per dtype (:data:`TOLERANCE`).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from zoo.errors import CheckpointError, ConfigError

__all__ = ["GOLDEN_NAME", "TOLERANCE", "Verdict", "golden_input", "record", "verify"]

GOLDEN_NAME = "golden.json"
FORMAT = "zoo-golden/1"
MAX_LENGTH = 1024  # decoder-only input length (capped by the context)
SEQ2SEQ_LENGTH = 32  # source and target lengths of encoder-decoder models
SAMPLES = 16  # recorded logits: (position, token) pairs
TOLERANCE = {  # largest |recorded - recomputed| logit accepted, per dtype of the recomputation
    "float32": 1e-3,  # other CPUs / BLAS / torch versions reorder sums: ~1e-5 seen, 100x margin
    "bfloat16": 0.25,  # 8-bit mantissa through every layer
    "float16": 0.1,
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def golden_input(model: nn.Module) -> dict[str, Tensor]:
    """The fixed input of ``model``'s kind (see the module docstring): ``{"x": (1, T)}`` for
    decoder-only models, ``{"src": (1, S), "tgt": (1, T)}`` for encoder-decoder ones; int64."""
    config = model.config
    generator = torch.Generator().manual_seed(0)
    if getattr(model, "is_encoder_decoder", False):
        n = min(config.max_seq_len, SEQ2SEQ_LENGTH)
        ids = torch.randint(1, config.vocab_size, (2, 1, n), generator=generator)
        return {"src": ids[0], "tgt": ids[1]}
    n = min(config.max_seq_len, MAX_LENGTH)
    return {"x": torch.randint(0, config.vocab_size, (1, n), generator=generator)}


def _logits(model: nn.Module, dtype: torch.dtype, device: str | torch.device) -> Tensor:
    """``(T, V)`` float32 logits of the golden input, computed with weights in ``dtype``."""
    inputs = {k: v.to(device) for k, v in golden_input(model).items()}
    model = model.to(device=device, dtype=dtype).eval()
    with torch.no_grad():
        out = model(*inputs.values()).logits
    return out[0].float().cpu()


def _positions(logits: Tensor) -> list[tuple[int, int]]:
    """``SAMPLES`` fixed ``(position, token)`` pairs spread over the sequence and vocabulary."""
    T, V = logits.shape
    generator = torch.Generator().manual_seed(1)
    ts = torch.linspace(0, T - 1, SAMPLES).round().long().tolist()
    vs = torch.randint(0, V, (SAMPLES,), generator=generator).tolist()
    return list(zip(ts, vs, strict=True))


def _stats(logits: Tensor) -> dict[str, float]:
    return {
        "mean": logits.mean().item(),
        "std": logits.std().item(),
        "logsumexp_mean": logits.logsumexp(-1).mean().item(),
    }


def _sha256(logits: Tensor) -> str:
    return hashlib.sha256(logits.contiguous().numpy().tobytes()).hexdigest()


def record(model: nn.Module, folder: str | os.PathLike) -> Path:
    """Write ``folder/golden.json`` for ``model`` (fp32 on the CPU) and return its path."""
    model = model.float()
    logits = _logits(model, torch.float32, "cpu")
    golden = {
        "format": FORMAT,
        "input": {k: list(v.shape) for k, v in golden_input(model).items()} | {"seed": 0},
        "dtype": "float32",
        "torch": torch.__version__,
        "sha256": _sha256(logits),
        "stats": _stats(logits),
        "values": [[t, v, logits[t, v].item()] for t, v in _positions(logits)],
    }
    path = Path(folder) / GOLDEN_NAME
    path.write_text(json.dumps(golden, indent=2) + "\n")
    return path


@dataclass(frozen=True)
class Verdict:
    """What :func:`verify` found: ``ok`` when every recorded number is within ``tolerance``."""

    ok: bool
    identical: bool  # the fp32 logits hash to the recorded sha256
    max_drift: float  # largest |recorded - recomputed| over the values and statistics
    tolerance: float
    dtype: str
    device: str
    rows: tuple[tuple[str, float, float], ...]  # (what, recorded, recomputed)

    def summary(self) -> str:
        if self.ok and self.identical:
            return f"ok: bit-identical to the recorded logits ({self.dtype}, {self.device})"
        text = (
            f"{'ok' if self.ok else 'DRIFT'}: largest difference {self.max_drift:.2e} (tolerance "
            f"{self.tolerance:g} in {self.dtype} on {self.device})"
        )
        if self.identical:  # the logits hash as recorded, yet the recorded values differ
            text += "; the logits match the recorded sha256, so golden.json itself was edited"
        return text


def verify(
    source: str | os.PathLike | nn.Module,
    *,
    dtype: str = "float32",
    device: str = "cpu",
    tolerance: float | None = None,
    golden: str | os.PathLike | None = None,
) -> Verdict:
    """Recompute the golden logits of ``source`` (anything :func:`zoo.from_pretrained` takes, or a
    model with ``golden``) and compare them with its ``golden.json``.

    Args:
        dtype: ``float32``, ``bfloat16`` or ``float16``: the weights' and activations' dtype.
        device: where to compute (``cpu``, ``cuda``).
        tolerance: the largest logit difference accepted (default :data:`TOLERANCE` of ``dtype``).
        golden: the ``golden.json`` to compare with (default: the checkpoint's own).

    Raises:
        ConfigError: an unknown dtype, a device this machine does not have, or a ``tolerance``
        that is NaN, infinite or below 0 (with which every model or none would pass);
        CheckpointError: the checkpoint has no ``golden.json`` (published before golden logits
        existed: export it again) or the file is not one.
    """
    import math

    from zoo.hub.download import resolve
    from zoo.pretrained import device_problem, from_pretrained

    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be one of {sorted(DTYPES)}, not {dtype!r}")
    if tolerance is not None and not (
        isinstance(tolerance, int | float) and math.isfinite(tolerance) and tolerance >= 0
    ):
        raise ConfigError(
            f"tolerance (--tolerance) is {tolerance!r}: use a finite number >= 0 (default per "
            f"dtype: {', '.join(f'{k} {v:g}' for k, v in TOLERANCE.items())})"
        )
    problem = device_problem(device, cpu="'cpu'")
    if problem is not None:
        raise ConfigError(f"device (--device) {device!r} {problem}")
    if isinstance(source, nn.Module):
        model, path = source, golden
    else:
        model = from_pretrained(source, dtype=torch.float32)  # the reference logits are fp32
        path = golden or resolve(source)[0] / GOLDEN_NAME
    if path is None or not Path(path).is_file():
        raise CheckpointError(
            f"{source if not isinstance(source, nn.Module) else 'the model'} has no {GOLDEN_NAME}: "
            "its golden logits were never recorded (zoo export records them; export it again)."
        )
    try:
        recorded = json.loads(Path(path).read_text())
        assert recorded["format"] == FORMAT
        values, stats = recorded["values"], recorded["stats"]
    except (ValueError, KeyError, AssertionError, TypeError):
        raise CheckpointError(f"{path} is not a {FORMAT} file of golden logits.") from None
    logits = _logits(model, DTYPES[dtype], device)
    rows = [(f"logit[{t}, {v}]", float(want), logits[t, v].item()) for t, v, want in values]
    rows += [(name, float(stats[name]), got) for name, got in _stats(logits).items()]
    drift = max(abs(want - got) for _, want, got in rows)
    tol = TOLERANCE[dtype] if tolerance is None else tolerance
    return Verdict(
        ok=drift <= tol,
        identical=dtype == "float32" and _sha256(logits) == recorded["sha256"],
        max_drift=drift,
        tolerance=tol,
        dtype=dtype,
        device=str(device),
        rows=tuple(rows),
    )
