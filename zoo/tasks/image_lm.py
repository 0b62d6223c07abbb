"""Autoregressive pixel modelling: :class:`CausalLM` reported in bits per dim.

Image models read an image as its sub-pixel sequence after a start token (:mod:`zoo.data.images`),
so training is next-token prediction exactly as for text; only the unit's name changes. Bits per dim
is the mean NLL per sub-pixel in nats divided by ln 2 (:class:`zoo.metrics.BitsPerDim`), the figure
the Sparse Transformer (§7.2), Routing Transformer (§5) and Image Transformer papers report.

Logged: ``train/loss`` (nats per sub-pixel), ``train/bpd``, ``train/lr``, ``val/loss``, ``val/bpd``,
``test/loss``, ``test/bpd``. Samples and completions come from ``zoo sample``.
"""

from __future__ import annotations

from zoo.metrics import BitsPerDim
from zoo.tasks.causal_lm import CausalLM

__all__ = ["ImageLM"]


class ImageLM(CausalLM):
    """:class:`CausalLM` for image models, logging bits per dim (``bpd``); same arguments.

    Batches are ``(x, y)`` of :class:`zoo.data.ImageDataModule`: int64 ``(B, H W C)``, ``x`` the
    start token followed by the image's first ``H W C - 1`` sub-pixels, ``y`` the image.
    """

    metric_class = BitsPerDim
    metric_key = "bpd"
