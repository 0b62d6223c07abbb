"""What every zoo model has: ``save_pretrained`` (the folder :func:`zoo.from_pretrained` loads),
``push_to_hub``, ``generate``, ``device``, ``dtype`` and ``num_parameters``: the names and
arguments of Hugging Face transformers' models, so their habits carry over. And the way back from
a weights file: :func:`load_weights` checks every tensor's name, shape, dtype and finiteness, and
:func:`recorded_config` reads the config the weights were saved with (their safetensors metadata,
:data:`CONFIG_METADATA_KEY`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, ClassVar

import safetensors
import safetensors.torch
import torch
from torch import nn

from zoo.attention.recompute import CHECKPOINT_OPTIONS, checkpoint
from zoo.config import ModelConfig
from zoo.errors import CheckpointError, ConfigError
from zoo.files import (
    CONFIG_NAME,
    MANIFEST_NAME,
    TOKENIZER_NAME,
    WEIGHTS_NAME,
    atomic_path,
    sha256_file,
)
from zoo.hf_generate import generate_like_transformers

__all__ = [
    "CONFIG_METADATA_KEY",
    "PretrainedMixin",
    "config_metadata",
    "load_weights",
    "read_weights_header",
    "recorded_config",
]

# the key of model.safetensors' metadata that holds the config its weights were saved with
CONFIG_METADATA_KEY = "zoo_config"


def config_metadata(model_type: str, config: ModelConfig) -> str:
    """The canonical JSON of ``model_type`` and ``config`` (sorted keys, no spaces) that
    :meth:`PretrainedMixin.save_pretrained` stores in ``model.safetensors``' metadata under
    :data:`CONFIG_METADATA_KEY`, so that :func:`zoo.from_pretrained` can refuse a ``config.json``
    edited after saving."""
    values = {"model_type": model_type, "config": config.to_dict()}
    return json.dumps(values, sort_keys=True, separators=(",", ":"))


def read_weights_header(
    weights: Path,
) -> tuple[dict[str, tuple[str, tuple[int, ...]]], dict[str, str]]:
    """``({name: (safetensors dtype, shape)}, metadata)`` of a safetensors file, reading no
    tensor.

    Raises:
        CheckpointError: the file is missing or its header is unreadable.
    """
    if not weights.is_file():
        raise CheckpointError(f"{weights} is missing.")
    try:
        with safetensors.safe_open(str(weights), framework="pt") as f:
            tensors = {}
            for name in f.keys():
                tensor = f.get_slice(name)
                tensors[name] = (tensor.get_dtype(), tuple(tensor.get_shape()))
            return tensors, dict(f.metadata() or {})
    except Exception as e:  # safetensors raises several types for a damaged header
        raise CheckpointError(
            f"{weights} is not a readable safetensors file ({type(e).__name__}: {e}). It is "
            "truncated or corrupt: download it again or re-save the model."
        ) from None


def _is_floating(dtype: str) -> bool:
    """Whether a safetensors dtype name (``F32``, ``BF16``, ``F8_E4M3``, ``I64``, ``BOOL``) is a
    floating-point one."""
    return dtype.startswith(("F", "BF"))


def load_weights(model: nn.Module, weights: str | os.PathLike) -> None:
    """Load a safetensors file into ``model`` in place, checking every name, shape and dtype, and
    that every floating-point tensor it loaded is finite.

    Raises:
        CheckpointError: the file is unreadable (truncated, corrupt, not safetensors); its tensors
            do not match the model's parameters and buffers; a tensor is not floating point where
            the model's is (``int64`` weights: the values would be cast silently), or the other way
            round; or a tensor holds NaN or infinity (checked after loading: the model then holds
            some of them and must be discarded).
    """
    weights = Path(weights)
    tensors, _ = read_weights_header(weights)
    shapes = {name: shape for name, (_, shape) in tensors.items()}
    state = model.state_dict()
    expected = {name: tuple(t.shape) for name, t in state.items()}
    wrong = [
        f"{n}: file {shapes[n]} vs model {expected[n]}"
        for n in shapes.keys() & expected.keys()
        if shapes[n] != expected[n]
    ]
    unexpected = sorted(shapes.keys() - expected.keys())
    if wrong or unexpected:
        raise CheckpointError(
            f"{weights} does not match the model its config describes: "
            + (f"shape mismatches {sorted(wrong)[:5]} " if wrong else "")
            + (f"unexpected tensors {unexpected[:5]} " if unexpected else "")
            + "— the config and weights come from different models."
        )
    kinds = [
        (name, dtype, state[name].dtype)
        for name, (dtype, _) in sorted(tensors.items())
        if _is_floating(dtype) != state[name].is_floating_point()
    ]
    if kinds:
        name, dtype, want = kinds[0]
        others = f" (and {len(kinds) - 1} more)" if len(kinds) > 1 else ""
        kind = "floating-point" if want.is_floating_point else "integer"
        raise CheckpointError(
            f"{weights}: tensor {name} is {dtype} where the model's is {want}{others}: the "
            f"model needs {kind} values there; the file is corrupt or not this model's, and "
            "nothing was loaded."
        )
    try:
        missing, _ = safetensors.torch.load_model(model, str(weights), strict=False)
    except Exception as e:  # data section shorter than the header promises, etc.
        raise CheckpointError(
            f"{weights} could not be read ({type(e).__name__}: {e}); "
            "it is truncated or corrupt: download it again."
        ) from None
    if missing:
        raise CheckpointError(
            f"{weights} lacks tensors the model needs: {sorted(missing)[:5]} — "
            "the config and weights come from different models."
        )
    state = model.state_dict()
    for name in sorted(tensors):  # one pass over what was loaded
        tensor = state[name]
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad = int((~torch.isfinite(tensor)).sum())
            raise CheckpointError(
                f"{weights}: tensor {name} holds {bad} NaN or infinite value(s) of "
                f"{tensor.numel()}: the weights are corrupt (or their training diverged); refused."
            )


def recorded_config(
    metadata: dict[str, str], cls: type[nn.Module], config_path: Path, weights: Path
) -> ModelConfig | None:
    """The config ``weights`` were saved with, from their ``metadata``
    (:meth:`PretrainedMixin.save_pretrained` records it under :data:`CONFIG_METADATA_KEY`), as a
    config of ``cls``; ``None`` for a file saved before it was recorded.

    Raises:
        CheckpointError: the recorded config is unreadable, or of another model type than
            ``config_path`` names.
    """
    text = metadata.get(CONFIG_METADATA_KEY)
    if text is None:
        return None
    try:
        recorded = json.loads(text)
        model_type, values = recorded["model_type"], recorded["config"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise CheckpointError(
            f"{weights}: its metadata {CONFIG_METADATA_KEY!r} is not a config "
            f"({type(e).__name__}: {e}); the file is corrupt: download it again or re-save it."
        ) from None
    expected = cls.model_type  # type: ignore[attr-defined]
    if model_type != expected:
        raise CheckpointError(
            f"{config_path} says model_type {expected!r} but {weights} was saved by a "
            f"{model_type!r} model; restore {CONFIG_NAME}."
        )
    try:
        return cls.config_class.from_dict(values)  # type: ignore[attr-defined]
    except (ConfigError, TypeError) as e:
        raise CheckpointError(f"{weights}: the config it was saved with is invalid: {e}") from None


class PretrainedMixin:
    """``save_pretrained``, ``push_to_hub``, ``generate``, ``device``, ``dtype``,
    ``num_parameters`` and gradient checkpointing (``gradient_checkpointing_enable``) for zoo
    models.

    A model class sets ``model_type`` (its key in ``config.json``) and ``config_class``, keeps its
    config as ``self.config``, and is constructed as ``cls(config)``.
    """

    model_type: ClassVar[str]
    config_class: ClassVar[type[ModelConfig]]
    config: ModelConfig
    # recompute each block in the backward pass instead of keeping its activations
    gradient_checkpointing: bool = False

    def save_pretrained(self, save_directory: str | os.PathLike) -> Path:
        """Write ``config.json`` and ``model.safetensors`` into ``save_directory`` (created if needed),
        ``tokenizer.json`` when the model has a ``tokenizer``, and last ``manifest.json``, the
        sha256 of each, which :func:`zoo.from_pretrained` checks. The weights' metadata records
        the config too (:func:`config_metadata`), so a ``config.json`` edited later is refused.

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
            metadata = {
                "format": "pt",
                CONFIG_METADATA_KEY: config_metadata(self.model_type, self.config),
            }
            safetensors.torch.save_model(self, str(tmp), metadata=metadata)
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
        create_pr: bool = False,
        private: bool = False,
        token: str | bool | None = None,
        commit_message: str | None = None,
    ) -> str:
        """Upload what :meth:`save_pretrained` writes (weights in the model's current dtype), and a
        short model card (``README.md``), to the Hub repo ``repo_id`` (created if needed) in one
        commit; return the commit sha.

        ``branch`` (default ``main``) is created from ``main``'s head if the repo lacks it, as
        ``huggingface_hub``'s ``create_branch`` does; ``zoo.from_pretrained(repo_id,
        revision=branch)`` loads it back, in the dtype it was pushed in, checked against its
        ``manifest.json``. ``create_pr=True`` changes nothing on ``main``: it opens a pull request
        against it, as ``huggingface_hub``'s ``upload_folder`` does.

        Returns:
            the commit sha, a ``str`` (:class:`zoo.hub.upload.HubCommit`) that also carries what
            ``upload_folder`` returned: ``.info`` (its ``CommitInfo``), ``.commit_url``, and for a
            pull request ``.pr_url``, ``.pr_num`` and ``.pr_revision`` (``"refs/pr/N"``, which
            ``from_pretrained(repo_id, revision=...)`` loads); they are ``None`` otherwise.

        A card with measured metrics and a ``checkpoints.yaml`` entry come from a training run:
        ``zoo export RUN --register`` then ``zoo push`` (docs/publishing.md).

        Raises:
            ConfigError: ``repo_id`` is not a valid repo id, or ``create_pr`` with a ``branch``
                other than ``main``; HubError: no token, or the Hub refused, with the server's
                message (:func:`zoo.hub.upload.upload_folder`).
        """
        import tempfile

        from zoo.hub.upload import checked_repo_id, upload_folder

        checked_repo_id(repo_id)
        with tempfile.TemporaryDirectory(prefix="zoo-push-") as tmp:
            folder = self.save_pretrained(tmp)
            revision = None if create_pr or branch in (None, "main") else branch
            (folder / "README.md").write_text(self._short_card(repo_id, revision))
            files = [p.name for p in folder.iterdir()]
            return upload_folder(
                folder, repo_id, files=files, branch=branch, create_pr=create_pr,
                private=private, token=token,
                commit_message=commit_message or f"Upload {self.model_type} with attention-zoo",
            )  # fmt: skip

    def _short_card(self, repo_id: str, revision: str | None = None) -> str:
        """The model card of :meth:`push_to_hub`: the Hub's metadata, what the model is, how to
        load it (from ``revision``, a branch, when not ``main``)."""
        from huggingface_hub import ModelCard, ModelCardData

        data = ModelCardData(library_name="attention-zoo", tags=[self.model_type, "pytorch"])
        at = f", revision={revision!r}" if revision else ""
        return str(ModelCard(
            f"---\n{data.to_yaml()}\n---\n\n# {repo_id}\n\nAn attention-zoo model "
            f"(`model_type: {self.model_type}`, {self.num_parameters():,} parameters), uploaded "
            "with `push_to_hub`; no metrics were recorded with it.\n\n```python\nimport zoo\n\n"
            f"model = zoo.from_pretrained({repo_id!r}{at})\n```\n"
        ))  # fmt: skip

    @property
    def device(self) -> torch.device:
        """Where the parameters are (the first parameter's device), as transformers' models say."""
        assert isinstance(self, nn.Module)
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the floating-point parameters (the first one's), as transformers' models
        say: the dtype the weights were saved in, or what ``from_pretrained(..., dtype=)`` cast to."""
        assert isinstance(self, nn.Module)
        return next(p.dtype for p in self.parameters() if p.is_floating_point())

    # model.generate(input_ids, ...): continue or translate with transformers' keywords, so
    # model.generate(**tokenizer(texts, return_tensors="pt", padding=True)) works
    generate = generate_like_transformers

    def num_parameters(self) -> int:
        """Number of trainable parameters (tied weights counted once)."""
        assert isinstance(self, nn.Module)
        return sum(p.numel() for p in self.parameters())

    # --- gradient checkpointing (transformers' names) --------------------------------------------
    supports_gradient_checkpointing: ClassVar[bool] = True
    # the torch.utils.checkpoint options given to gradient_checkpointing_enable
    gradient_checkpointing_kwargs: dict[str, Any] = {}  # replaced by enable, never changed

    def gradient_checkpointing_enable(
        self, gradient_checkpointing_kwargs: dict[str, Any] | None = None
    ) -> None:
        """Recompute each block (Transformer layer; LSTM decoder step) in the backward pass
        instead of keeping its activations (Chen et al. 2016; the Sparse Transformer's §5.4):
        less memory for one more forward pass per block, the same gradients. Active in training
        mode with gradients enabled and no cache; :mod:`zoo.attention.recompute` keeps forward
        side effects (routing centroids) to one per step. docs/bench/gradient_checkpointing.md
        measures the saving.

        ``gradient_checkpointing_kwargs``: options of :func:`torch.utils.checkpoint.checkpoint`,
        as transformers takes them: ``use_reentrant`` (only ``False``, the default),
        ``preserve_rng_state``, ``determinism_check``, ``context_fn``.

        Raises:
            ConfigError: another key, or ``use_reentrant=True``.
        """
        options = dict(gradient_checkpointing_kwargs or {})
        unknown = sorted(set(options) - set(CHECKPOINT_OPTIONS))
        if unknown or options.get("use_reentrant"):
            what = f"unknown key(s) {unknown}" if unknown else "use_reentrant=True"
            raise ConfigError(
                f"gradient_checkpointing_kwargs: {what}; zoo takes {', '.join(CHECKPOINT_OPTIONS)}"
                " (use_reentrant only False: non-reentrant checkpointing)"
            )
        self.gradient_checkpointing_kwargs = options
        self.gradient_checkpointing = True

    def gradient_checkpointing_disable(self) -> None:
        """Keep activations again (the default); see :meth:`gradient_checkpointing_enable`."""
        self.gradient_checkpointing = False

    @property
    def is_gradient_checkpointing(self) -> bool:
        """Whether :meth:`gradient_checkpointing_enable` is in effect."""
        return self.gradient_checkpointing

    def _gradient_checkpointing_func(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        """``function(*args, **kwargs)`` checkpointed (:func:`zoo.attention.recompute.checkpoint`
        with the options given to :meth:`gradient_checkpointing_enable`): what a model's block
        loop calls when ``self.gradient_checkpointing`` and training (transformers' name)."""
        return checkpoint(function, *args, **self.gradient_checkpointing_kwargs, **kwargs)
