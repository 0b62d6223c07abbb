"""attention-zoo: long-sequence attention models with pretrained checkpoints.

```python
import zoo
zoo.list_models()
model = zoo.create_model("transformer_lm_small")
model = zoo.create_model("transformer_lm_small", pretrained=True)  # its published weights
model.save_pretrained("out/")
model = zoo.from_pretrained("out/")
zoo.list_pretrained()                     # published checkpoints (checkpoints.yaml)
model = zoo.from_pretrained("transformer_lm_small.pg19mini")
zoo.translate(zoo.from_pretrained("./translation_folder"), ["Ein Hund läuft."])  # -> ["A dog runs."]
```
"""

__version__ = "0.2.0"

import importlib
from typing import Any

# `import zoo` loads nothing heavy (not even torch): each name below imports its module on first use
_LAZY = {
    "create_model": "zoo.pretrained",  # zoo.models.create_model, and pretrained=True
    "list_models": "zoo.models.registry",
    "from_pretrained": "zoo.pretrained",
    "list_pretrained": "zoo.hub.registry",
    "generate": "zoo.generation",
    "translate": "zoo.beam_search",
}
_SUBMODULES = ("attention", "data", "hub", "models", "tasks", "kernels", "pretrained")

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"zoo.{name}")
    raise AttributeError(f"module 'zoo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY, *_SUBMODULES])
