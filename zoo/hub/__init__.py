"""Published checkpoints, read side: the ``checkpoints.yaml`` registry and verified downloads.

- :mod:`zoo.hub.registry`: the registry file, :func:`list_pretrained`; :mod:`zoo.hub.schema`: what
  an entry holds (its JSON Schema and typed view).
- :mod:`zoo.hub.download`: where a checkpoint's files come from (shipped copy, HF cache, Hub),
  sha256 verification, ``zoo pull``; :mod:`zoo.hub.cache`: the Hugging Face cache's files, never
  followed out of it; :mod:`zoo.hub.upload`: one-commit uploads;
  :mod:`zoo.hub.refusals`: the Hub's HTTP refusals as one-line messages, for both.

It resolves and verifies, and nothing more: publishing (export, cards, push) is
:mod:`zoo.publishing`, above the tasks.
"""

from zoo.hub.download import fetch, pull, resolve, sha256_file, weights_source
from zoo.hub.registry import Registry, list_pretrained, load_registry
from zoo.hub.schema import CheckpointEntry, Metric

__all__ = [
    "CheckpointEntry",
    "Metric",
    "Registry",
    "fetch",
    "list_pretrained",
    "load_registry",
    "pull",
    "resolve",
    "sha256_file",
    "weights_source",
]
