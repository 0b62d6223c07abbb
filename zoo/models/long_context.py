"""Presets of the decoder-only Transformer (:mod:`zoo.models.transformer`) with a block-selection
attention, at the size of the zoo's other 4,096-position models (``routing_transformer_small_*``,
``sparse_transformer_small*``: 4 layers, d = 256, 8 heads of 32, d_ff = 1,024, rotary positions,
tied embeddings), so the mechanisms compare at equal parameters.

- ``transformer_lm_small_moba``: MoBA (Lu et al. 2025, §2.2;
  :mod:`zoo.attention.mechanisms.moba`) in every layer, blocks of 128 keys, top-4 (the own block
  and 3 chosen ones: at most 512 keys per query, an eighth of the context at 4,096).
- ``transformer_lm_small_nsa``: NSA (Yuan et al. 2025, §3; :mod:`zoo.attention.mechanisms.nsa`)
  in every layer: compressed tokens of 32 positions at stride 16, 6 selected blocks of 64 (the
  first, the 2 most recent and 3 chosen), a window of 128, and one key/value projection shared
  by the three branches (``shared_kv``): separate ones, as §3.3.3 has them, would add 1.05M
  parameters (a third) at this width. The feed-forward width is 896 instead of 1,024 so that the
  compressors and gates keep the parameters within 2 % of the other 4,096 models.
"""

from __future__ import annotations

from zoo.models.registry import register_preset
from zoo.models.transformer import TransformerConfig, TransformerLM

__all__: list[str] = []

_SMALL_4K = dict(
    vocab_size=256, max_seq_len=4096, d_model=256, n_layers=4, n_heads=8, d_ff=1024, dropout=0.0,
    position="rotary", tie_weights=True, scale_embeddings=False,
)  # fmt: skip

register_preset(
    "transformer_lm_small_moba",
    TransformerLM,
    TransformerConfig(**_SMALL_4K, attention={"name": "moba", "block_size": 128, "top_k": 4}),
    "MoBA in every layer (blocks of 128, top-4 with the own block), 4 layers, d=256, context 4096",
)

register_preset(
    "transformer_lm_small_nsa",
    TransformerLM,
    TransformerConfig(
        **{**_SMALL_4K, "d_ff": 896},
        attention={
            "name": "nsa",
            "compress_block": 32,
            "compress_stride": 16,
            "select_block": 64,
            "n_selected": 6,
            "n_initial": 1,
            "n_local": 2,
            "window": 128,
            "shared_kv": True,
        },
    ),
    "NSA in every layer (compressed 32/16, 6 selected blocks of 64, window 128, shared k/v), "
    "4 layers, d=256, d_ff=896, context 4096",
)
