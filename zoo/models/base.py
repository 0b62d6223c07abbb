"""What every zoo model has: ``save_pretrained`` (the folder :func:`zoo.from_pretrained` loads)
and ``num_parameters``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import ClassVar

import safetensors.torch
from torch import nn

from zoo.config import ModelConfig
from zoo.files import (
    CONFIG_NAME,
    MANIFEST_NAME,
    TOKENIZER_NAME,
    WEIGHTS_NAME,
    atomic_path,
    sha256_file,
)

__all__ = ["PretrainedMixin"]


class PretrainedMixin:
    """``save_pretrained`` / ``num_parameters`` for zoo models.

    A model class sets ``model_type`` (its key in ``config.json``) and ``config_class``, keeps its
    config as ``self.config``, and is constructed as ``cls(config)``.
    """

    model_type: ClassVar[str]
    config_class: ClassVar[type[ModelConfig]]
    config: ModelConfig

    def save_pretrained(self, save_directory: str | os.PathLike) -> Path:
        """Write ``config.json`` and ``model.safetensors`` into ``save_directory`` (created if needed),
        ``tokenizer.json`` when the model has a ``tokenizer``, and last ``manifest.json``, the
        sha256 of each, which :func:`zoo.from_pretrained` checks.

        Returns the directory. Tensors are saved in their current dtype.
        """
        from zoo import __version__

        directory = Path(save_directory)
        directory.mkdir(parents=True, exist_ok=True)
        assert isinstance(self, nn.Module)
        meta = {
            "model_type": self.model_type,
            "config": self.config.to_dict(),
            "zoo_version": __version__,
        }
        with atomic_path(directory / WEIGHTS_NAME) as tmp:
            safetensors.torch.save_model(self, str(tmp), metadata={"format": "pt"})
        tokenizer = getattr(self, "tokenizer", None)
        if tokenizer is not None:
            with atomic_path(directory / TOKENIZER_NAME) as tmp:
                tokenizer.save(str(tmp))
        with atomic_path(directory / CONFIG_NAME) as tmp:
            tmp.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        written = [CONFIG_NAME, WEIGHTS_NAME] + ([TOKENIZER_NAME] if tokenizer is not None else [])
        manifest = {"sha256": {f: sha256_file(directory / f) for f in written}}
        with atomic_path(directory / MANIFEST_NAME) as tmp:
            tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        return directory

    def num_parameters(self) -> int:
        """Number of trainable parameters (tied weights counted once)."""
        assert isinstance(self, nn.Module)
        return sum(p.numel() for p in self.parameters())
