"""The Image Transformer (Parmar et al. 2018, "Image Transformer"): an autoregressive pixel model
with local self-attention.

An image ``(H, W, C)`` is the sequence of its ``H W C`` sub-pixel intensities in raster order with
each pixel's channels together (:mod:`zoo.data.images`), after a start token ``BOS_ID = 256``, so
``vocab_size = 257``. The decoder is the Transformer of :mod:`zoo.models.transformer`; what makes it
the Image Transformer is the attention and the positions:

- local attention (§3.2), as a pattern of the catalogue run exactly by
  :class:`~zoo.attention.SparseSelfAttention` (block-sparse, so the work is the pattern's blocks):
  ``attention="local_1d"`` cuts the raster sequence into query blocks of ``query_block`` positions
  that attend to their block and the ``memory`` positions before it; ``attention="local_2d"`` tiles
  the image (a grid ``W C`` sub-pixels wide) with ``query_height x query_width`` query blocks that
  attend to their block extended ``memory_height`` rows up and ``memory_width`` columns each side;
- coordinate encodings (§3.1): sinusoids of the row in half the channels of ``d_model`` and of the
  column-and-channel (the sub-pixel's index within its row) in the other half.
  ``position="learned"`` / ``"sinusoidal"`` are the plain Transformer's choices, and
  ``"rotary"`` (RoFormer, Su et al. 2021) turns queries and keys instead of adding encodings: the
  zoo's fix for absolute positions that stall long windows (docs/images.md).

Position ``t`` of the input holds sub-pixel ``t - 1`` (or the start token) and predicts sub-pixel
``t``; its coordinates are those of sub-pixel ``t``.

Deviations: one embedding table for intensities shared by the three channels (the paper learns one
per channel; the coordinates tell the channels apart), pre-norm blocks by default (``norm="post"``
is the paper's), and the paper's 2-D generation order (block by block) is replaced by raster order,
so the memory to the right of a query in its own rows is masked (docs/images.md draws both
patterns).

Shape legend: B batch, T positions, C d_model, V vocab_size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from zoo.attention.mechanisms import AttentionSpec
from zoo.attention.mechanisms.patterns import Local1DParams, Local2DParams
from zoo.attention.patterns import AttentionPattern
from zoo.errors import ConfigError
from zoo.models.registry import register_model, register_preset
from zoo.models.transformer import TransformerConfig, TransformerLM, sinusoidal_positions

__all__ = ["ImageTransformerConfig", "ImageTransformerLM", "coordinate_encodings"]


@dataclass(frozen=True)
class ImageTransformerConfig(TransformerConfig):
    vocab_size: int = 257  # 256 intensities + the start token
    max_seq_len: int = 3072  # H * W * C
    image_shape: tuple[int, int, int] = (32, 32, 3)  # (H, W, C)
    # "local_1d" or "local_2d": the registered mechanism of that name built from the fields below
    # (own_attention); any other attention spec names the attention itself
    # (zoo.models.attention_config), e.g. {"name": "local_2d", "memory_height": 8} or "moba"
    attention: str | dict[str, Any] | tuple[str | dict[str, Any], ...] = "local_2d"
    builds_own_attention: ClassVar[bool] = True
    own_attention_values: ClassVar[tuple[str, ...]] = ("local_2d", "local_1d")
    own_attention_fields: ClassVar[tuple[str, ...]] = (
        "query_block", "memory", "query_height", "query_width", "memory_height", "memory_width",
        "block_size",
    )  # fmt: skip
    # the knobs' defaults are the mechanisms' (zoo/attention/mechanisms/patterns.py)
    query_block: int = Local1DParams.query_block  # local_1d: l_q positions per query block
    memory: int = Local1DParams.memory  # local_1d: l_m positions before the block
    query_height: int = Local2DParams.query_height  # local_2d: query block rows
    query_width: int = Local2DParams.query_width  # local_2d: columns, in sub-pixels (8 pixels)
    memory_height: int = Local2DParams.memory_height  # local_2d: memory rows above the block
    memory_width: int = Local2DParams.memory_width  # local_2d: memory columns left and right
    position: Literal["coordinates", "learned", "sinusoidal", "rotary"] = "coordinates"
    scale_embeddings: bool = True  # sqrt(d_model): unit-variance tokens beside unit sinusoids
    tie_weights: bool = False  # tied, the input sub-pixel dominates the initial logits (13.6 nats)
    block_size: int = Local1DParams.block_size  # block-sparse layout's edge (work, not semantics)

    def own_attention(self) -> tuple[AttentionSpec, ...]:
        """The registered mechanism ``attention`` names (``local_1d`` or ``local_2d``) with this
        config's fields, in every layer; ``local_2d``'s rows are the image's (``W C``)."""
        if self.attention == "local_1d":
            params = Local1DParams(query_block=self.query_block, memory=self.memory,
                                   block_size=self.block_size)  # fmt: skip
        else:
            params = Local2DParams(
                query_height=self.query_height, query_width=self.query_width,
                memory_height=self.memory_height, memory_width=self.memory_width,
                width=self.row_width, block_size=self.block_size,
            )  # fmt: skip
        return (AttentionSpec(self.attention, params),) * self.n_layers

    def structure(self) -> dict[str, Any]:
        """Local 1-D or 2-D attention over the raster sequence (Parmar et al. 2018, §3.2), or
        the named attention's mechanisms."""
        if self.names_attention:
            return {**self.named_structure(), "image_shape": list(self.image_shape)}
        params = (
            {"query_block": self.query_block, "memory": self.memory}
            if self.attention == "local_1d"
            else {"query_height": self.query_height, "query_width": self.query_width,
                  "memory_height": self.memory_height, "memory_width": self.memory_width}
        )  # fmt: skip
        return {"pattern": self.attention, **params, "block_size": self.block_size,
                "image_shape": list(self.image_shape), "context": self.max_seq_len,
                "position": self.position, "causal": True}  # fmt: skip


    def __post_init__(self) -> None:
        if isinstance(self.image_shape, list):  # from JSON / YAML
            object.__setattr__(self, "image_shape", tuple(self.image_shape))
        if len(self.image_shape) != 3 or min(self.image_shape) <= 0:  # before own_attention
            raise ConfigError(f"image_shape must be (H, W, C) > 0, got {self.image_shape}")
        super().__post_init__()
        if math.prod(self.image_shape) > self.max_seq_len:
            raise ConfigError(
                f"image_shape {self.image_shape} has {math.prod(self.image_shape)} sub-pixels, "
                f"more than max_seq_len={self.max_seq_len}"
            )
        if self.position == "coordinates" and self.d_model % 4:
            raise ConfigError(
                f"position='coordinates' splits d_model into two sinusoid halves: d_model must "
                f"be a multiple of 4, got {self.d_model}"
            )

    @property
    def row_width(self) -> int:
        """Sub-pixels in one image row: ``W C``."""
        return self.image_shape[1] * self.image_shape[2]

    def pattern(self) -> AttentionPattern:
        """The local attention pattern of every layer (the family's own fields)."""
        params = self.own_attention()[0].params
        return params.pattern(self.row_width) if self.attention == "local_2d" else params.pattern()


def coordinate_encodings(n_positions: int, row_width: int, d_model: int) -> Tensor:
    """The Image Transformer's coordinates (§3.1): ``(n_positions, d_model)`` float32.

    Position ``t`` is row ``t // row_width``, column ``t % row_width`` (a sub-pixel's index within
    its row, which encodes both the pixel's column and its channel). The first ``d_model / 2``
    channels are the Transformer's sinusoids of the row, the rest those of the column.
    """
    t = torch.arange(n_positions)
    half = d_model // 2
    rows = sinusoidal_positions(n_positions // row_width + 1, half)[t // row_width]
    cols = sinusoidal_positions(row_width, half)[t % row_width]
    return torch.cat([rows, cols], dim=-1)


@register_model
class ImageTransformerLM(TransformerLM):
    """Image Transformer: sub-pixel ids ``(B, T)`` int64 -> next-sub-pixel logits ``(B, T, V)``.

    Same interface as :class:`~zoo.models.transformer.TransformerLM` (``forward``,
    ``init_cache``); cached decoding gathers only the keys of each new query's memory.

    Raises:
        SequenceTooLongError (a ValueError): the sequence (cached + new positions) is longer than
            ``max_seq_len``.
    """

    model_type = "image_transformer_lm"
    config_class = ImageTransformerConfig
    # 4x4 RGB images; blocks small enough to be local at 48 positions
    TINY: ClassVar[dict[str, Any]] = TransformerLM.TINY | dict(
        block_size=4, image_shape=(4, 4, 3), query_block=8, memory=8, query_height=2,
        query_width=6, memory_height=1, memory_width=3,
    )  # fmt: skip
    config: ImageTransformerConfig

    def build_positions(self) -> None:
        c = self.config
        if c.position != "coordinates":
            return super().build_positions()
        pe = coordinate_encodings(c.max_seq_len, c.row_width, c.d_model)
        self.register_buffer("pos_table", pe, persistent=False)  # (max_seq_len, C)


# --- presets -------------------------------------------------------------------------------------
# CIFAR-10 models sized for 2 CPU cores (docs/images.md has their runs); the two differ only in the
# attention. The 1-D memory (256 positions before a block of 256) and the 2-D memory (a 4 x 8-pixel
# block with 4 rows above and 8 pixels each side: 8 rows x 24 pixels) hold 512 and 576 keys.
_CIFAR10 = dict(
    vocab_size=257, max_seq_len=3072, image_shape=(32, 32, 3), d_model=256, n_layers=4,
    n_heads=4, d_ff=1024, dropout=0.0,
)  # fmt: skip
register_preset(
    "image_transformer_tiny",
    ImageTransformerLM,
    ImageTransformerConfig(
        vocab_size=257,
        max_seq_len=48,
        image_shape=(4, 4, 3),
        d_model=32,
        n_layers=2,
        n_heads=2,
        d_ff=64,
        dropout=0.0,
        attention="local_2d",
        query_height=2,
        query_width=6,
        memory_height=1,
        memory_width=3,
        block_size=4,
    ),  # fmt: skip
    "4x4 RGB images, local 2-D attention, 2 layers, d=32: for tests",
)
register_preset(
    "image_transformer_cifar10_1d",
    ImageTransformerLM,
    ImageTransformerConfig(**_CIFAR10, attention="local_1d", query_block=256, memory=256),
    "CIFAR-10, local 1-D attention (query blocks 256, memory 256), 4 layers, d=256",
)
register_preset(
    "image_transformer_cifar10_1d_rotary",
    ImageTransformerLM,
    ImageTransformerConfig(
        **_CIFAR10, attention="local_1d", query_block=256, memory=256, position="rotary"
    ),  # fmt: skip
    "CIFAR-10, local 1-D attention (query blocks 256, memory 256) with rotary positions instead "
    "of the paper's coordinate encodings (they stall training, docs/images.md), 4 layers, d=256",
)
register_preset(
    "image_transformer_cifar10_2d",
    ImageTransformerLM,
    ImageTransformerConfig(
        **_CIFAR10,
        attention="local_2d",
        query_height=4,
        query_width=24,
        memory_height=4,
        memory_width=24,
    ),  # fmt: skip
    "CIFAR-10, local 2-D attention (4x8-pixel query blocks, memory 4 rows up and 8 pixels "
    "each side), 4 layers, d=256",
)
