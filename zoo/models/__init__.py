"""Model families. Importing this package registers every family's presets."""

from zoo.models.sparse_transformer import SparseTransformerConfig, SparseTransformerLM
from zoo.models.transformer import TransformerConfig, TransformerLM

__all__ = ["SparseTransformerConfig", "SparseTransformerLM", "TransformerConfig", "TransformerLM"]
