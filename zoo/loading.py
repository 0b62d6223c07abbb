"""The LightningModule or model behind any source a command takes: a Lightning ``.ckpt``, a run
directory, or anything :func:`zoo.from_pretrained` loads (a published name, a Hub repo id, a
``save_pretrained`` folder). Above :mod:`zoo.tasks` and :mod:`zoo.pretrained`; below the
measurements (:mod:`zoo.evaluation`, :mod:`zoo.by_context`, :mod:`zoo.probes`) and the commands.
"""

from __future__ import annotations

import os
from pathlib import Path

from zoo.errors import CheckpointError, ConfigError
from zoo.pretrained import find_checkpoint

__all__ = ["TASK_COMMANDS", "checkpoint_task", "extended", "load_model", "load_task"]


def checkpoint_task(path: str | os.PathLike):
    """The :mod:`zoo.tasks` class a Lightning checkpoint was saved from (its hyperparameters'
    ``_class_path``, one of :data:`zoo.tasks.checkpoint.TASK_CLASS_PATHS`), read as data without
    running any of its code; ``None`` if it names none or cannot be read."""
    from zoo.errors import ZooError
    from zoo.tasks.checkpoint import read_checkpoint, saved_task

    try:
        return saved_task(read_checkpoint(path), path)
    except ZooError:
        return None


def load_task(source: str | os.PathLike, task_cls=None):
    """The LightningModule of ``source``: for a ``.ckpt`` or a run directory, the task it was
    saved from; for anything :func:`zoo.from_pretrained` takes (published name, repo id,
    ``save_pretrained`` directory), a ``task_cls`` (default :class:`~zoo.tasks.CausalLM`) around it.

    Raises:
        CheckpointError: the checkpoint cannot be loaded, or is of another task than ``task_cls``
            (a translation checkpoint where a language model is measured).
    """
    from zoo.tasks import CausalLM

    ckpt = find_checkpoint(source)
    if ckpt is None:
        return (task_cls or CausalLM)(init_from=str(source))
    saved = checkpoint_task(ckpt)
    if task_cls is not None and saved is not None and not issubclass(saved, task_cls):
        raise CheckpointError(
            f"{ckpt} is a checkpoint of {saved.__name__}, not {task_cls.__name__}: "
            + ("measure it on a parallel corpus (--dataset multi30k)." if saved.__name__ ==
               "Translation" else "measure it on the data set it was trained for.")
        )  # fmt: skip
    task_cls = saved or task_cls or CausalLM
    return task_cls.load_from_checkpoint(ckpt, map_location="cpu")  # as data: zoo.tasks.checkpoint


def extended(model, context: int, name: str):
    """A copy of ``model`` that accepts windows of ``context`` bytes, with the same weights
    (:meth:`~zoo.models.transformer.TransformerLM.extended`).

    Raises:
        ConfigError: the model's positions end at its ``max_seq_len``.
    """
    c = model.config
    if not getattr(model, "extends_context", False):
        position = getattr(c, "position", None)
        kind = f"{position} positions" if position else "positions"
        raise ConfigError(
            f"{name} has {kind} for {c.max_seq_len} bytes only (max_seq_len={c.max_seq_len}); "
            f"use --context {c.max_seq_len} or less, or a model with rotary positions"
        )
    return model.extended(context)


# what each task's checkpoints are, and the command that uses them
TASK_COMMANDS = {
    "CausalLM": "a language model: use `zoo generate`",
    "ImageLM": "an image model: use `zoo sample`",
    "Translation": "a translation model: use `zoo translate`",
}


def load_model(
    checkpoint: str, device: str = "cpu", task: str = "CausalLM", wrong_kind: str | None = None
):
    """A model in eval mode from a Lightning ``.ckpt`` of ``zoo.tasks.<task>`` (``CausalLM``,
    ``ImageLM`` or ``Translation``) or anything :func:`zoo.from_pretrained` takes (published name,
    Hub repo id, pretrained directory).

    Raises:
        CheckpointError: a missing or unreadable ``.ckpt``, or a model of the wrong kind (a
            language model given to ``zoo translate``, or a translation model to ``zoo generate``):
            the message names the command for its kind, or says ``wrong_kind`` when given.
    """
    from zoo import tasks
    from zoo.errors import CheckpointError, ZooError
    from zoo.pretrained import from_pretrained

    path = Path(checkpoint)
    if path.suffix != ".ckpt" or path.is_dir():
        # fp32, as the registry's metrics were measured (a checkpoint may be saved in bf16)
        model = from_pretrained(checkpoint, device=device, dtype="float32")
    else:
        if not path.is_file():
            raise CheckpointError(f"{checkpoint} does not exist: pass a .ckpt file from `zoo fit`.")
        try:
            module = getattr(tasks, task).load_from_checkpoint(path, map_location=device)
        except ZooError as e:
            saved = getattr(checkpoint_task(path), "__name__", None)
            if saved in TASK_COMMANDS and saved != task:
                use = wrong_kind or TASK_COMMANDS[saved]
                raise CheckpointError(f"{checkpoint} is a checkpoint of {saved}, {use}.") from None
            raise e from None
        model = module.model.eval()
    seq2seq = getattr(model, "is_encoder_decoder", False)
    if seq2seq != (task == "Translation"):
        use = wrong_kind or f"use `zoo {'translate' if seq2seq else 'generate'}`"
        raise CheckpointError(
            f"{checkpoint} is {'a translation' if seq2seq else 'a language'} model: {use}."
        )
    return model
