"""Gradient checkpointing (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost"; the
Sparse Transformer's recomputation, Child et al. 2019 §5.4) that is safe for modules with side
effects in their training forward.

:func:`checkpoint` is :func:`torch.utils.checkpoint.checkpoint` (non-reentrant): a checkpointed
function keeps only its inputs for the backward pass and runs a second time inside it to rebuild
the rest. Dropout gets the same masks (torch restores the RNG state), but a module that changes
its own state in a training forward, as the Routing Transformer's k-means centroids do (an EMA
step after routing, :class:`~zoo.attention.kmeans.SphericalKMeans`), would change it twice and
route the recomputation with the updated centroids: other clusters, wrong gradients. So every
checkpointed call runs its recomputation with

- :func:`recomputing` true: the module skips its side effects (they happened in the forward);
- every tensor the module passed to :func:`keep_for_recompute` before changing it in place set
  back to its value at that moment, and restored afterwards.

Modules call the two functions unconditionally: outside a checkpointed call they cost nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import torch
import torch.utils.checkpoint
from torch import Tensor

from zoo.errors import ConfigError

__all__ = ["CHECKPOINT_OPTIONS", "checkpoint", "keep_for_recompute", "recomputing"]

# torch.utils.checkpoint.checkpoint's own options that gradient_checkpointing_kwargs may set
CHECKPOINT_OPTIONS = ("use_reentrant", "preserve_rng_state", "determinism_check", "context_fn")

_local = threading.local()  # per thread: autograd may run the recomputation on its own thread


def _calls() -> list[_Call]:
    if not hasattr(_local, "calls"):
        _local.calls, _local.recomputing = [], 0
    return _local.calls


def recomputing() -> bool:
    """Whether this code runs as the recomputation of a checkpointed call (inside backward)."""
    _calls()
    return _local.recomputing > 0


def keep_for_recompute(tensor: Tensor) -> None:
    """Call before changing ``tensor`` (a buffer) in place during a forward pass: when this runs
    inside a checkpointed call, its recomputation sees ``tensor`` as it is now, and the change
    stays once the recomputation is done. A no-op elsewhere."""
    calls = _calls()
    if calls and not _local.recomputing and id(tensor) not in calls[-1].kept:
        calls[-1].kept[id(tensor)] = (tensor, tensor.detach().clone())


class _Call:
    """One checkpointed call: the tensors its forward changed in place, with their values from
    before."""

    def __init__(self) -> None:
        self.kept: dict[int, tuple[Tensor, Tensor]] = {}


class _Forward:
    """The context of the first run (re-enterable: not a generator)."""

    def __init__(self, call: _Call) -> None:
        self.call = call

    def __enter__(self) -> None:
        _calls().append(self.call)

    def __exit__(self, *exc: object) -> None:
        _calls().remove(self.call)


class _Recompute(_Forward):
    """The context of the recomputation: kept tensors back to their old values, then forward."""

    def __enter__(self) -> None:
        _calls()
        self.now = []
        with torch.no_grad():
            for tensor, before in self.call.kept.values():
                self.now.append((tensor, tensor.clone()))
                tensor.copy_(before)
        _local.recomputing += 1

    def __exit__(self, *exc: object) -> None:  # also on torch's early stop (an exception)
        _local.recomputing -= 1
        with torch.no_grad():
            for tensor, value in self.now:
                tensor.copy_(value)
        self.now = []


class _Both:
    """Two context managers as one (zoo's and a ``context_fn``'s), entered in order."""

    def __init__(self, first: Any, second: Any) -> None:
        self.contexts = (first, second)

    def __enter__(self) -> None:
        self.stack = ExitStack()
        for context in self.contexts:
            self.stack.enter_context(context)

    def __exit__(self, *exc: Any) -> bool | None:
        return self.stack.__exit__(*exc)


def checkpoint(
    function: Callable[..., Any],
    *args: Any,
    use_reentrant: bool = False,
    context_fn: Callable[[], tuple[Any, Any]] | None = None,
    **kwargs: Any,
) -> Any:
    """``function(*args, **kwargs)`` under :func:`torch.utils.checkpoint.checkpoint`
    (non-reentrant), its recomputation run as the module docstring says. ``kwargs`` go to
    ``function``, except torch's ``preserve_rng_state`` and ``determinism_check``; a
    ``context_fn`` (e.g. selective checkpointing's) is entered inside zoo's contexts.

    Raises:
        ConfigError: ``use_reentrant=True`` (the reentrant variant takes no keyword arguments
            and no ``context_fn``), or ``debug`` (torch's debug mode replaces the ``context_fn``).
    """
    if use_reentrant:
        raise ConfigError(
            "gradient checkpointing: use_reentrant=True is not supported (it passes no keyword "
            "arguments and runs side effects twice); leave it out or pass use_reentrant=False"
        )
    if "debug" in kwargs:
        raise ConfigError("gradient checkpointing: debug is not supported (it replaces context_fn)")

    def contexts() -> tuple[Any, Any]:
        call = _Call()
        forward, recompute = _Forward(call), _Recompute(call)
        if context_fn is None:
            return forward, recompute
        theirs = context_fn()
        return _Both(forward, theirs[0]), _Both(recompute, theirs[1])

    return torch.utils.checkpoint.checkpoint(
        function, *args, use_reentrant=False, context_fn=contexts, **kwargs
    )
