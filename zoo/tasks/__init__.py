"""LightningModules: the training tasks that wrap the plain ``nn.Module`` models."""

from zoo.tasks.causal_lm import CausalLM
from zoo.tasks.image_lm import ImageLM
from zoo.tasks.translation import Translation

__all__ = ["CausalLM", "ImageLM", "Translation"]
