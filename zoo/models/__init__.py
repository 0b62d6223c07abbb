"""Model families. Importing this package imports every family, which registers its classes and
presets (:mod:`zoo.models.registry`)."""

from zoo.models import long_context  # noqa: F401  (registers its presets)
from zoo.models.image_transformer import ImageTransformerConfig, ImageTransformerLM
from zoo.models.registry import create_model, get_preset, list_models
from zoo.models.rnn_seq2seq import LSTMSeq2Seq, LSTMSeq2SeqConfig
from zoo.models.routing_transformer import RoutingTransformerConfig, RoutingTransformerLM
from zoo.models.seq2seq import TransformerSeq2Seq, TransformerSeq2SeqConfig
from zoo.models.sparse_transformer import SparseTransformerConfig, SparseTransformerLM
from zoo.models.transformer import TransformerConfig, TransformerLM

__all__ = [
    "create_model",
    "get_preset",
    "list_models",
    "ImageTransformerConfig",
    "ImageTransformerLM",
    "LSTMSeq2Seq",
    "LSTMSeq2SeqConfig",
    "RoutingTransformerConfig",
    "RoutingTransformerLM",
    "SparseTransformerConfig",
    "SparseTransformerLM",
    "TransformerConfig",
    "TransformerLM",
    "TransformerSeq2Seq",
    "TransformerSeq2SeqConfig",
]
