"""Model families. Importing this package registers every family's presets."""

from zoo.models.transformer import TransformerConfig, TransformerLM

__all__ = ["TransformerConfig", "TransformerLM"]
