"""Where a loaded model lives and in what dtype: :func:`zoo.from_pretrained`'s ``device``,
``device_map``, ``dtype`` and ``torch_dtype``, checked before anything is read.

The names and values are transformers' (``dtype="auto"``, ``torch_dtype`` as its older name,
``device_map="auto"``, ``{"": device}``), restricted to what a zoo model can honour: one floating
dtype and one device. A zoo model is small enough for one device, so a map that spreads it over
several, or offloads part of it to ``"disk"``, is a one-line :class:`~zoo.errors.ConfigError`
saying what to pass instead, as is a dtype that is not floating point.

By default (``dtype=None`` or ``"auto"``) weights load in the dtype they were saved in, read from
the safetensors header (:func:`saved_dtype`): a folder saved in bf16 comes back in bf16.
"""

from __future__ import annotations

from typing import Any

import torch

from zoo.config import suggest
from zoo.errors import ConfigError

__all__ = [
    "DTYPE_NAMES",
    "LOAD_DTYPES",
    "SAFETENSORS_DTYPES",
    "checked_device_and_dtype",
    "device_problem",
    "saved_dtype",
]

LOAD_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)

# dtype strings from_pretrained takes ("torch." in front is allowed too): torch's names, and the
# short ones of Lightning's precisions and of transformers' configs
DTYPE_NAMES: dict[str, torch.dtype] = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "float64": torch.float64, "fp64": torch.float64, "double": torch.float64,
}  # fmt: skip

# safetensors' names of the floating dtypes a zoo model computes in
SAFETENSORS_DTYPES: dict[str, torch.dtype] = {
    "F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "F64": torch.float64,
}  # fmt: skip

_AS_SAVED = "as saved"  # what "auto" (or nothing) resolves to, for comparing dtype and torch_dtype
_SPREADING = ("balanced", "balanced_low_0", "sequential")  # accelerate's multi-device strategies


def _dtype(value: Any, arg: str) -> torch.dtype | str:
    """``value`` of the argument ``arg`` (``dtype`` or ``torch_dtype``) as a torch dtype, or
    :data:`_AS_SAVED` for ``None`` and ``"auto"``.

    Raises:
        ConfigError: not a dtype (close names suggested), or not one of :data:`LOAD_DTYPES`.
    """
    if value is None or (isinstance(value, str) and value == "auto"):
        return _AS_SAVED
    if isinstance(value, str):
        name = value.removeprefix("torch.")
        found = DTYPE_NAMES.get(name, getattr(torch, name, None))
        value = found if isinstance(found, torch.dtype) else value
    if not isinstance(value, torch.dtype):
        names = ", ".join(repr(n) for n in ("float32", "bfloat16", "float16", "float64"))
        hint = suggest(value, DTYPE_NAMES) if isinstance(value, str) else ""
        raise ConfigError(
            f"from_pretrained: {arg}={value!r} is not a dtype: pass 'auto' (as saved), {names} "
            f"or a torch.dtype such as torch.bfloat16.{hint}"
        )
    if value not in LOAD_DTYPES:
        names = ", ".join(str(d) for d in LOAD_DTYPES)
        raise ConfigError(
            f"from_pretrained: {arg}={value!r} is not a dtype to load weights in (it would "
            f"truncate every weight); pass a floating dtype: {names} (or 'auto' to keep the "
            "saved dtype)."
        )
    return value


def _checked_dtype(dtype: Any, torch_dtype: Any) -> torch.dtype | None:
    """The dtype to cast to (``None``: as saved) from ``dtype`` and its alias ``torch_dtype``.

    Raises:
        ConfigError: an invalid value (:func:`_dtype`), or both given and different.
    """
    wanted, alias = _dtype(dtype, "dtype"), _dtype(torch_dtype, "torch_dtype")
    if dtype is not None and torch_dtype is not None and wanted != alias:
        raise ConfigError(
            f"from_pretrained: dtype={dtype!r} and torch_dtype={torch_dtype!r} differ; "
            "torch_dtype is transformers' older name for dtype: pass only dtype=."
        )
    chosen = alias if dtype is None else wanted
    return None if chosen == _AS_SAVED else chosen  # type: ignore[return-value]


def device_problem(device: str | torch.device, cpu: str = "device='cpu'") -> str | None:
    """Why ``device`` cannot be used on this machine, as the words after its name, ending with the
    fix (``cpu``: how the caller spells the CPU); None if it can be used. Shared by
    :func:`zoo.from_pretrained` and the commands' ``--device``."""
    try:
        checked = torch.device(device)
    except (RuntimeError, TypeError):
        return "is not a device; use 'cpu', 'cuda', 'cuda:1' or 'mps'"
    backend = torch.backends.mps if checked.type == "mps" else getattr(torch, checked.type, None)
    available = checked.type == "cpu" or bool(
        backend is not None and hasattr(backend, "is_available") and backend.is_available()
    )
    build = ", a CPU-only build" if "+cpu" in torch.__version__ else ""
    if not available:
        return (f"is not available: this machine has no {checked.type} device "
                f"(torch {torch.__version__}{build}); use {cpu}")  # fmt: skip
    count = getattr(backend, "device_count", lambda: 1)()
    if checked.index is not None and checked.index >= count:
        return f"is not available: this machine has {count} {checked.type} device(s), from 0"
    return None


def _auto_device() -> str:
    """``device_map="auto"`` for a model that fits on one device: the first GPU (or Apple's
    ``mps``) if there is one, else the CPU."""
    if torch.cuda.is_available():
        return "cuda:0"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def _is_device(value: Any) -> bool:
    """Whether torch reads ``value`` as a device (available here or not)."""
    try:
        torch.device(value)
    except (RuntimeError, TypeError):
        return False
    return True


def _one_place(value: Any, device_map: Any) -> str | torch.device:
    """One device of a ``device_map`` (an ``int`` is a GPU index, as transformers reads it).

    Raises:
        ConfigError: ``"disk"``, ``"meta"``, a multi-device strategy or not a device name.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return f"cuda:{value}"
    if value in ("disk", "meta") or value in _SPREADING:
        raise ConfigError(
            f"from_pretrained: device_map={device_map!r} offloads or spreads the model "
            f"({value!r}); a zoo model loads whole on one device: pass device_map='auto', 'cpu', "
            "'cuda:0' or {'': 'cuda:0'}."
        )
    if isinstance(value, (str, torch.device)) and _is_device(value):
        return value  # available or not: checked by the caller
    raise ConfigError(
        f"from_pretrained: device_map={device_map!r} is not a device map: pass one device "
        "('auto', 'cpu', 'cuda', 'cuda:0', 0, a torch.device) or {'': device}."
    )


def _map_device(device_map: Any) -> str | torch.device:
    """The one device ``device_map`` puts the whole model on.

    Raises:
        ConfigError: a map over several devices (or none), or a value :func:`_one_place`
            refuses.
    """
    if isinstance(device_map, str) and device_map == "auto":
        return _auto_device()
    if not isinstance(device_map, dict):
        return _one_place(device_map, device_map)
    places = {str(torch.device(_one_place(v, device_map))) for v in device_map.values()}
    if len(places) != 1:
        spread = ", ".join(sorted(places)) or "no device"
        raise ConfigError(
            f"from_pretrained: device_map={device_map!r} names {spread}; a zoo model loads whole "
            "on one device: pass device_map='auto', one device ('cuda:0') or {'': device}."
        )
    return places.pop()


def _same_device(a: str | torch.device, b: str | torch.device) -> bool:
    """Whether two device names mean the same device (``cuda`` is ``cuda:0``, as loading uses
    it)."""
    a, b = torch.device(a), torch.device(b)
    return a.type == b.type and (a.index or 0) == (b.index or 0)


def checked_device_and_dtype(
    device: str | torch.device | None,
    dtype: torch.dtype | str | None,
    *,
    device_map: Any = None,
    torch_dtype: torch.dtype | str | None = None,
) -> tuple[torch.device | None, torch.dtype | None]:
    """``(device, dtype)`` of :func:`zoo.from_pretrained`, checked before anything is loaded:
    ``device`` or ``device_map`` (one device; ``None``: the CPU), and ``dtype`` or
    ``torch_dtype`` (``None``: as saved).

    Raises:
        ConfigError: ``device`` (or ``device_map``'s device) is not a device name, or this
            machine (this build of torch) has no such device (:func:`device_problem`);
            ``device_map`` spreads the model over several devices or offloads it, or names
            another device than ``device``; ``dtype`` is not a dtype name or not one of
            :data:`LOAD_DTYPES` (an integer dtype would truncate every weight), or ``dtype`` and
            ``torch_dtype`` differ.
    """
    chosen_dtype = _checked_dtype(dtype, torch_dtype)
    if device is not None and (problem := device_problem(device)) is not None:
        raise ConfigError(f"from_pretrained: device={str(device)!r} {problem}.")
    if device_map is not None:
        mapped = _map_device(device_map)
        if (problem := device_problem(mapped, cpu="device_map='cpu'")) is not None:
            raise ConfigError(f"from_pretrained: device_map={device_map!r} {problem}.")
        if device is not None and not _same_device(device, mapped):
            raise ConfigError(
                f"from_pretrained: device={str(device)!r} and device_map={device_map!r} name "
                "different devices; pass one of them."
            )
        device = mapped
    return (None if device is None else torch.device(device)), chosen_dtype


def saved_dtype(
    tensors: dict[str, tuple[str, tuple[int, ...]]], dtype: torch.dtype | None, weights: Any
) -> torch.dtype | None:
    """The dtype to load ``weights`` in, exactly as saved: the floating dtype most of its
    floating-point values have, from its header (``tensors``: ``{name: (safetensors dtype,
    shape)}``, :func:`zoo.models.base.read_weights_header`, no tensor read); ``None`` when it
    holds none, or holds a dtype a zoo model does not compute in (fp8) while ``dtype`` (the
    caller's, ``None``: as saved) says what to cast to.

    Raises:
        ConfigError: the saved dtype is one a zoo model does not compute in and ``dtype`` is
            ``None``: pass one.
    """
    counts: dict[str, int] = {}
    for name, shape in tensors.values():
        if name.startswith(("F", "BF")):
            counts[name] = counts.get(name, 0) + int(torch.Size(shape).numel())
    if not counts:
        return None
    stored = max(counts, key=lambda d: counts[d])
    if stored not in SAFETENSORS_DTYPES and dtype is None:
        raise ConfigError(
            f"from_pretrained: {weights} holds {stored} weights, a dtype zoo models do not "
            "compute in; pass dtype='bfloat16' (or 'float32') to load them cast to it."
        )
    return SAFETENSORS_DTYPES.get(stored)
