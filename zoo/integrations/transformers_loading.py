"""The keywords transformers' loading passes to a zoo model's ``from_pretrained``, and what the
zoo does with each (:mod:`zoo.integrations.transformers`).

transformers decides which keywords reach a model class's ``from_pretrained``: the Auto classes
forward their hub arguments (5.25 added ``proxies`` and ``subfolder``) and every keyword the caller
or a pipeline gave; ``PreTrainedModel.from_pretrained`` documents the rest. Rather than copy one
release's list, :func:`transformers_keywords` reads them from the installed transformers (the
signatures of both methods, and the keywords their bodies take out of ``kwargs``), and
:data:`KEYWORDS` says, for each one the zoo knows, whether it is

- ``"zoo"``: passed on to :func:`zoo.from_pretrained` under the same name (it honours it);
- ``"wrapper"``: honoured by the integration itself (``config``, ``subfolder``, ...);
- ``"ignored"``: without effect on a zoo model, whatever its value (the reason is stated);
- ``"default"``: a transformers feature zoo models do not have: its default value (or ``None``)
  is accepted, any other is a one-line :class:`~zoo.errors.ConfigError` giving the reason.

A keyword a later transformers adds, not yet in :data:`KEYWORDS`, is accepted at the default
transformers gives it (the Auto classes forward defaults) and refused otherwise;
``tests/test_transformers_integration.py`` fails until it is classified. A keyword transformers
does not know is a zoo config field (an override, as :func:`zoo.from_pretrained` takes it) or an
error.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import textwrap
from pathlib import Path
from typing import Any

from zoo.errors import ConfigError

__all__ = ["KEYWORDS", "loading_arguments", "transformers_keywords"]

_ZOO = ("cache_dir", "force_download", "local_files_only", "token", "revision", "dtype",
        "torch_dtype", "device_map")  # fmt: skip
_OLD = ("low_cpu_mem_usage", "_fast_init", "mirror", "from_tf", "from_flax",
        "offload_state_dict")  # fmt: skip
_SHARDING = ("max_memory", "offload_folder", "offload_buffers", "distributed_config",
             "device_mesh", "tp_plan", "tp_size")  # fmt: skip
_KERNELS = ("use_kernels", "kernel_config", "kernels_mode", "allow_all_kernels")
KEYWORDS: dict[str, tuple[str, str]] = {
    **dict.fromkeys(_ZOO, ("zoo", "zoo.from_pretrained takes it, under the same name")),
    "config": ("wrapper", "the loaded model's transformers config (of its model_type)"),
    "subfolder": ("wrapper", "a folder in a local folder (zoo Hub repos keep models at the root)"),
    "output_loading_info": ("wrapper", "True also returns the (empty) missing/unexpected keys"),
    "generation_config": ("wrapper", "replaces the model's generation_config"),
    "_from_auto": ("ignored", "bookkeeping of transformers' Auto classes"),
    "_from_pipeline": ("ignored", "bookkeeping of transformers' pipelines"),
    "_commit_hash": ("ignored", "transformers resolves revision instead"),
    "trust_remote_code": ("ignored", "zoo classes are registered in-process: no Hub code runs"),
    "code_revision": ("ignored", "the revision of remote code, and none runs"),
    "adapter_kwargs": ("ignored", "the Auto classes' PEFT adapter lookup: a zoo folder has none"),
    "weights_only": ("ignored", "zoo weights are safetensors, which never run code"),
    "tqdm_class": ("ignored", "zoo loading shows no progress bar"),
    "disable_mmap": ("ignored", "how safetensors reads the file: the zoo's loader decides"),
    **dict.fromkeys(_OLD, ("ignored", "transformers itself ignores it (kept for old callers)")),
    "proxies": ("default", "zoo downloads through huggingface_hub, which reads HTTPS_PROXY"),
    "use_safetensors": ("default", "zoo checkpoints are safetensors only"),
    "state_dict": ("default", "load it afterwards: model.zoo_model.load_state_dict(...)"),
    "ignore_mismatched_sizes": ("default", "zoo weights load strictly, in the saved shapes"),
    "attn_implementation": ("default", "a zoo model's attention is set by its config"),
    "experts_implementation": ("default", "zoo models have no mixture-of-experts layers"),
    "quantization_config": ("default", "zoo models load in a float dtype (dtype=)"),
    "gguf_file": ("default", "zoo checkpoints are safetensors folders"),
    "variant": ("default", "a zoo folder holds one model.safetensors"),
    "adapter_name": ("default", "zoo models take no PEFT adapters"),
    "key_mapping": ("default", "zoo weights load under the zoo module's own names"),
    "fusion_config": ("default", "zoo models fuse no modules at load time"),
    **dict.fromkeys(_SHARDING, ("default", "a zoo model loads whole on one device (device_map)")),
    **dict.fromkeys(_KERNELS, ("default", "the zoo's kernels are its own (zoo.kernels)")),
}
"""Each keyword of transformers' loading that the zoo knows: ``(how, why)``, ``how`` one of
``"zoo"``, ``"wrapper"``, ``"ignored"``, ``"default"`` (see the module docstring)."""

_ACCEPTED = {"use_safetensors": (True,)}  # besides the default: what a zoo folder is anyway
_SKIPPED = {"self", "cls", "pretrained_model_name_or_path", "model_args", "kwargs"}


@functools.cache
def transformers_keywords() -> dict[str, Any]:
    """The keywords the installed transformers passes to, or documents for, a model class's
    ``from_pretrained``, each with its default there (``None`` when not a literal): the
    parameters of ``PreTrainedModel.from_pretrained`` and of the Auto classes'
    ``from_pretrained``, and the names their bodies pop from, read in, or add to ``kwargs``
    (and the Auto classes' ``hub_kwargs``)."""
    from transformers import PreTrainedModel

    methods = [PreTrainedModel.from_pretrained]
    try:  # the Auto classes' base (private: a release may move it)
        from transformers.models.auto.auto_factory import _BaseAutoModelClass

        methods.insert(0, _BaseAutoModelClass.from_pretrained)
    except ImportError:
        pass
    found: dict[str, Any] = {}
    for method in methods:
        for name, default in _body_keywords(method).items():
            found.setdefault(name, default)
        for p in inspect.signature(method).parameters.values():
            if p.name not in _SKIPPED and p.kind is not p.VAR_POSITIONAL:
                found[p.name] = None if p.default is p.empty else p.default
    return found


def _body_keywords(method: Any) -> dict[str, Any]:
    """``kwargs.pop("name", default)`` and ``.get``, ``"name" in kwargs``, ``kwargs["name"] = ``,
    ``hub_kwargs = {"name": ...}`` and ``for name in ["a", "b"]: kwargs.pop(name)`` in
    ``method``'s source."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
    except (OSError, TypeError, SyntaxError):  # no source (a compiled or frozen install)
        return {}
    names: dict[str, Any] = {}
    holders = ("kwargs", "hub_kwargs")

    def literal(node: ast.AST | None) -> Any:
        try:
            return None if node is None else ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError):  # not a literal (a name, a call)
            return None

    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("pop", "get") and isinstance(node.func.value, ast.Name)
                and node.func.value.id in holders and node.args
                and isinstance(node.args[0], ast.Constant)):  # fmt: skip
            names[node.args[0].value] = literal(node.args[1] if len(node.args) > 1 else None)
        elif (isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant)
                and isinstance(node.ops[0], ast.In) and isinstance(node.comparators[0], ast.Name)
                and node.comparators[0].id in holders):  # fmt: skip
            names.setdefault(node.left.value, None)
        elif (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name) and node.value.id in holders
                and isinstance(node.slice, ast.Constant)):  # fmt: skip
            names.setdefault(node.slice.value, None)
        elif (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id in holders for t in node.targets)):  # fmt: skip
            for key in node.value.keys:
                if isinstance(key, ast.Constant):
                    names.setdefault(key.value, None)
        elif isinstance(node, ast.For) and isinstance(node.iter, (ast.List, ast.Tuple)):
            pops = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                       and n.func.attr == "pop" for n in ast.walk(node))  # fmt: skip
            if pops:
                for item in node.iter.elts:
                    if isinstance(item, ast.Constant):
                        names.setdefault(item.value, None)
    return {k: v for k, v in names.items() if isinstance(k, str)}


def loading_arguments(
    where: str, name_or_path: str | os.PathLike, kwargs: dict[str, Any], zoo_fields: frozenset[str]
) -> tuple[str | os.PathLike, dict[str, Any], dict[str, Any]]:
    """Sort the keywords a zoo model class's ``from_pretrained`` received.

    Args:
        where: the method, for messages (``"ZooForCausalLM.from_pretrained"``).
        name_or_path: what to load: a folder (``subfolder`` is joined to it), a published name or
            a Hub repo id.
        kwargs: every keyword argument but ``config``.
        zoo_fields: the zoo config's field names (overrides), empty when not known.

    Returns:
        what to load (a ``Path`` when it is a local folder, as transformers prefers a folder to a
        repo id), the keywords for :func:`zoo.from_pretrained` (overrides included), and the
        wrapper's (``output_loading_info``, ``generation_config``).

    Raises:
        ConfigError: a keyword with a value the zoo cannot honour (its reason), a ``subfolder``
            of a name that is not a local folder, or keywords neither transformers nor the zoo
            config know.
    """
    known = transformers_keywords()
    zoo: dict[str, Any] = {}
    wrapper: dict[str, Any] = {}
    unknown = []
    for name, value in kwargs.items():
        how, why = KEYWORDS.get(name, ("new", ""))
        if name not in known and how == "new":
            if name in zoo_fields:
                zoo[name] = value  # a zoo config override (dropout=0.0)
            else:
                unknown.append(name)
        elif how == "zoo":
            zoo[name] = value
        elif how == "wrapper":
            wrapper[name] = value
        elif how in ("default", "new") and not _is_default(name, value, known.get(name)):
            if how == "new":
                import transformers

                why = f"transformers {transformers.__version__}'s keyword, new to the zoo"
            raise ConfigError(f"{where}: {name}={value!r} is not supported: {why}")
    if unknown:
        raise ConfigError(f"{where}: unsupported arguments {sorted(unknown)}: neither transformers' "
                          "loading keywords nor fields of the zoo model's config")  # fmt: skip
    subfolder = wrapper.pop("subfolder", "") or ""
    if os.path.isdir(name_or_path):
        name_or_path = Path(name_or_path, subfolder)
        if not name_or_path.is_dir():
            raise ConfigError(
                f"{where}: subfolder {subfolder!r} is not a folder in {name_or_path.parent}"
            )
    elif subfolder:
        raise ConfigError(f"{where}: subfolder={subfolder!r} needs a local folder; zoo checkpoints "
                          "on the Hub sit at the repo's root")  # fmt: skip
    return name_or_path, zoo, wrapper


def _is_default(name: str, value: Any, default: Any) -> bool:
    if value is None or value in _ACCEPTED.get(name, ()):
        return True
    try:
        return bool(value == default)
    except Exception:  # a tensor or an object without a plain ==
        return False
