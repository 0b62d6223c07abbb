"""LightningModules: the training tasks that wrap the plain ``nn.Module`` models."""

from zoo.tasks.causal_lm import CausalLM

__all__ = ["CausalLM"]
