"""What every zoo model has: ``save_pretrained`` (the folder :func:`zoo.from_pretrained` loads),
``push_to_hub``, ``generate``, ``device``, ``dtype`` and ``num_parameters``: the names and
arguments of Hugging Face transformers' models, so their habits carry over."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import ClassVar

import safetensors.torch
import torch
from torch import Tensor, nn

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
    """``save_pretrained``, ``push_to_hub``, ``generate``, ``device``, ``dtype`` and
    ``num_parameters`` for zoo models.

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

    def push_to_hub(
        self,
        repo_id: str,
        *,
        branch: str | None = None,
        private: bool = False,
        token: str | bool | None = None,
        commit_message: str | None = None,
    ) -> str:
        """Upload what :meth:`save_pretrained` writes, and a short model card (``README.md``), to
        the Hub repo ``repo_id`` (created if needed) in one commit; return the commit sha.

        ``zoo.from_pretrained(repo_id)`` loads it back, checked against its ``manifest.json``. A
        card with measured metrics and a ``checkpoints.yaml`` entry come from a training run:
        ``zoo export RUN --register`` then ``zoo push`` (docs/checkpoints.md).

        Raises:
            ConfigError: ``repo_id`` is not a valid repo id; HubError: no token, or the Hub
                refused, with the server's message (:func:`zoo.hub.upload.upload_folder`).
        """
        import tempfile

        from zoo.hub.upload import checked_repo_id, upload_folder

        checked_repo_id(repo_id)
        with tempfile.TemporaryDirectory(prefix="zoo-push-") as tmp:
            folder = self.save_pretrained(tmp)
            (folder / "README.md").write_text(self._short_card(repo_id))
            files = [p.name for p in folder.iterdir()]
            return upload_folder(
                folder, repo_id, files=files, branch=branch, private=private, token=token,
                commit_message=commit_message or f"Upload {self.model_type} with attention-zoo",
            )  # fmt: skip

    def _short_card(self, repo_id: str) -> str:
        """The model card of :meth:`push_to_hub`: the Hub's metadata, what the model is, how to
        load it."""
        from huggingface_hub import ModelCard, ModelCardData

        data = ModelCardData(library_name="attention-zoo", tags=[self.model_type, "pytorch"])
        return str(ModelCard(
            f"---\n{data.to_yaml()}\n---\n\n# {repo_id}\n\nAn attention-zoo model "
            f"(`model_type: {self.model_type}`, {self.num_parameters():,} parameters), uploaded "
            "with `push_to_hub`; no metrics were recorded with it.\n\n```python\nimport zoo\n\n"
            f"model = zoo.from_pretrained({repo_id!r})\n```\n"
        ))  # fmt: skip

    @property
    def device(self) -> torch.device:
        """Where the parameters are (the first parameter's device), as transformers' models say."""
        assert isinstance(self, nn.Module)
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the floating-point parameters (the first one's), as transformers' models
        say: ``torch.float32`` as trained, or what ``from_pretrained(..., dtype=)`` cast to."""
        assert isinstance(self, nn.Module)
        return next(p.dtype for p in self.parameters() if p.is_floating_point())

    def generate(
        self,
        input_ids: Tensor,
        max_new_tokens: int | None = None,
        *,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        num_beams: int | None = None,
        length_penalty: float | None = None,
        eos_token_id: int | list[int] | None = None,
        suppress_tokens: list[int] | None = None,
        seed: int | None = None,
        progress: bool = False,
    ) -> Tensor:
        """Continue (a language model) or translate (an encoder-decoder) ``input_ids`` ``(B, T)``
        int64, with transformers' argument names: greedy unless ``do_sample``; ``num_beams`` and
        ``length_penalty`` for encoder-decoders. Returns int64 ids; the rules, shapes and errors
        are :func:`zoo.generation.generate_like_transformers`'s."""
        from zoo.generation import generate_like_transformers

        return generate_like_transformers(
            self, input_ids, max_new_tokens, do_sample=do_sample, temperature=temperature,
            top_k=top_k, top_p=top_p, num_beams=num_beams, length_penalty=length_penalty,
            eos_token_id=eos_token_id, suppress_tokens=suppress_tokens, seed=seed,
            progress=progress,
        )  # fmt: skip

    def num_parameters(self) -> int:
        """Number of trainable parameters (tied weights counted once)."""
        assert isinstance(self, nn.Module)
        return sum(p.numel() for p in self.parameters())
