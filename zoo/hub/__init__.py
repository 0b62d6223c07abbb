"""Published checkpoints: the ``checkpoints.yaml`` registry, verified downloads, and publishing.

- :mod:`zoo.hub.registry`: the registry file, its schema, :func:`list_pretrained`.
- :mod:`zoo.hub.download`: where a checkpoint's files come from (shipped copy, HF cache, Hub),
  sha256 verification, ``zoo pull``.
- :mod:`zoo.hub.publish`: ``zoo export`` (run -> Hub-ready folder with a model card),
  ``zoo push``, registering and pinning entries.
"""

from zoo.hub.download import fetch, pull, resolve, sha256_file, weights_source
from zoo.hub.publish import PUBLISHED_FILES, export_run, model_card, pin_revision, push, register
from zoo.hub.registry import CheckpointEntry, Metric, Registry, list_pretrained, load_registry

__all__ = [
    "PUBLISHED_FILES",
    "CheckpointEntry",
    "Metric",
    "Registry",
    "export_run",
    "fetch",
    "list_pretrained",
    "load_registry",
    "model_card",
    "pin_revision",
    "pull",
    "push",
    "register",
    "resolve",
    "sha256_file",
    "weights_source",
]
