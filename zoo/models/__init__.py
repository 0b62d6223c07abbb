"""Model families. Importing this package registers every family's presets, and those of every
attention mechanism."""

from zoo.attention.mechanisms import load_mechanisms
from zoo.models.image_transformer import ImageTransformerConfig, ImageTransformerLM
from zoo.models.rnn_seq2seq import LSTMSeq2Seq, LSTMSeq2SeqConfig
from zoo.models.routing_transformer import RoutingTransformerConfig, RoutingTransformerLM
from zoo.models.seq2seq import TransformerSeq2Seq, TransformerSeq2SeqConfig
from zoo.models.sparse_transformer import SparseTransformerConfig, SparseTransformerLM
from zoo.models.transformer import TransformerConfig, TransformerLM

load_mechanisms()  # each registers its attention mechanism and presets (zoo.attention.mechanisms)

__all__ = [
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
