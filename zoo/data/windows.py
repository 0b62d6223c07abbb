"""Windows of token streams for language modelling: random training windows, evaluation windows
that score every target once, and a training order that a resumed run continues exactly.

Items are ``(x, y)``, int64 ``(seq_len,)`` with ``y`` the next tokens; targets that are not
scored are :data:`IGNORE_INDEX` (``-100``, ignored by the loss).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

__all__ = [
    "IGNORE_INDEX",
    "EvalWindows",
    "RandomWindows",
    "ResumableLoader",
    "ResumableOrder",
    "samples_done",
]

IGNORE_INDEX = -100


class RandomWindows(Dataset):
    """``num_samples`` random windows of ``seq_len + 1`` bytes from one byte stream.

    Item ``i`` is ``(x, y)``, two int64 tensors of shape ``(seq_len,)`` with ``y`` = ``x`` shifted by
    one. Window ``i`` depends only on ``(seed, i)``, so runs are reproducible.
    """

    def __init__(self, data: np.ndarray, seq_len: int, num_samples: int, seed: int = 0) -> None:
        if len(data) < seq_len + 1:
            raise ValueError(
                f"the training split has {len(data)} bytes, fewer than seq_len + 1 = "
                f"{seq_len + 1}; use a shorter seq_len or more data"
            )
        self.data, self.seq_len, self.num_samples, self.seed = data, seq_len, num_samples, seed

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        start = np.random.default_rng((self.seed, i)).integers(0, len(self.data) - self.seq_len)
        chunk = torch.from_numpy(self.data[start : start + self.seq_len + 1].astype(np.int64))
        return chunk[:-1], chunk[1:]


class ResumableOrder(Sampler[int]):
    """The order of the training windows: a permutation of ``range(n)`` drawn from
    ``(seed, epoch)`` alone, entered ``start`` indices in on the first epoch iterated.

    A resumed run passes ``start`` = the windows its steps have already consumed, so it continues
    with exactly the batches an uninterrupted run would see (Lightning calls ``set_epoch``).
    """

    def __init__(self, n: int, seed: int = 0, start: int = 0) -> None:
        self.n, self.seed, self.start, self.epoch = n, seed, start, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        order = torch.randperm(self.n, generator=g).tolist()
        start, self.start = self.start, 0
        return iter(order[start:])

    def __len__(self) -> int:
        return self.n - self.start


class ResumableLoader(DataLoader):
    """A DataLoader whose position comes from the trainer's step count (see
    :class:`ResumableOrder`), so it needs no state of its own; ``state_dict`` tells Lightning
    that it resumes mid-epoch correctly."""

    def state_dict(self) -> dict:
        return {"order": "ResumableOrder, positioned by the global step"}

    def load_state_dict(self, state_dict: dict) -> None:
        pass


class EvalWindows(Dataset):
    """Windows covering every scored byte of every document exactly once.

    A document of ``L`` bytes has ``L - 1`` targets. With ``stride=None`` (or ``seq_len``) the
    windows do not overlap: ``ceil((L - 1) / seq_len)`` of them, the last padded with ``x = 0`` and
    ``y = -100``. With ``stride=s < seq_len`` they slide: a window starts every ``s`` bytes and
    scores only its last ``s`` targets (the others are ``y = -100``), except the document's first
    window, which scores all of its targets; so every target past a document's first ``seq_len``
    is predicted from at least ``seq_len - s`` bytes before it (a sliding-window evaluation, the
    fair way to compare models of different contexts; ``seq_len / s`` times the compute).

    Raises:
        ValueError: ``stride`` outside ``[1, seq_len]``.
    """

    def __init__(self, docs: Sequence[np.ndarray], seq_len: int, stride: int | None = None) -> None:
        stride = seq_len if stride is None else stride
        if not 1 <= stride <= seq_len:
            raise ValueError(f"stride must be in [1, seq_len={seq_len}], got {stride}")
        self.docs, self.seq_len, self.stride = docs, seq_len, stride
        # a window starting at s > 0 scores targets [s + seq_len - stride, s + seq_len)
        self.index = [
            (d, s)
            for d, doc in enumerate(docs)
            for s in range(0, len(doc) - 1, stride)
            if s == 0 or s + seq_len - stride < len(doc) - 1
        ]

    def __len__(self) -> int:
        return len(self.index)

    @property
    def num_targets(self) -> int:
        return sum(max(len(doc) - 1, 0) for doc in self.docs)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        d, start = self.index[i]
        chunk = torch.from_numpy(self.docs[d][start : start + self.seq_len + 1].astype(np.int64))
        x = torch.zeros(self.seq_len, dtype=torch.int64)
        y = torch.full((self.seq_len,), IGNORE_INDEX, dtype=torch.int64)
        n = len(chunk) - 1
        x[:n], y[:n] = chunk[:-1], chunk[1:]
        if start > 0:  # seen by the window before: keep only the last `stride` targets
            y[: self.seq_len - self.stride] = IGNORE_INDEX
        return x, y


def samples_done(trainer, n: int, batch_size: int) -> int:
    """Samples of the current epoch (``n`` per epoch, in batches of ``batch_size``) that the
    optimizer steps of a resumed run, ``trainer`` (or None), already trained on; 0 for a fresh run.
    Its training loader starts there, so a resumed run sees what an uninterrupted one would."""
    if trainer is None or not trainer.global_step:
        return 0
    per_epoch = n // batch_size
    limit = trainer.limit_train_batches
    if isinstance(limit, int):
        per_epoch = min(per_epoch, limit)
    elif isinstance(limit, float) and limit < 1.0:
        per_epoch = int(per_epoch * limit)
    done = trainer.global_step * trainer.accumulate_grad_batches
    done -= trainer.current_epoch * per_epoch
    return max(0, min(done, per_epoch)) * batch_size
