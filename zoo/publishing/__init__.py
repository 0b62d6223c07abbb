"""Publishing, above the tasks and the hub: export a trained run with its model card, register it
in ``checkpoints.yaml``, push it to the Hugging Face Hub.

- :mod:`zoo.publishing.cards`: model cards per task (causal LM, image LM, translation).
- :mod:`zoo.publishing.card_sections`: a card's sections of measured curves, samples and bench.
- :mod:`zoo.publishing.export`: ``zoo export`` (run -> Hub-ready folder), ``register``,
  ``refresh_card``.
- :mod:`zoo.publishing.training`: ``training.json``, what trained a checkpoint.
- :mod:`zoo.publishing.push`: ``zoo push`` and pinning the pushed revision.

:mod:`zoo.hub` below it only resolves, downloads and verifies published checkpoints.
"""

from zoo.publishing.cards import model_card, structure_of, task_of
from zoo.publishing.export import PUBLISHED_FILES, export_run, refresh_card, register
from zoo.publishing.push import pin_revision, push
from zoo.publishing.training import training_facts

__all__ = [
    "PUBLISHED_FILES",
    "export_run",
    "model_card",
    "pin_revision",
    "push",
    "refresh_card",
    "register",
    "structure_of",
    "task_of",
    "training_facts",
]
