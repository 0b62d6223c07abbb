"""attention-zoo: long-sequence attention models with pretrained checkpoints.

import zoo
zoo.list_models()
model = zoo.create_model("transformer_lm_small")
model.save_pretrained("out/")
model = zoo.from_pretrained("out/")
zoo.list_pretrained()                     # published checkpoints (checkpoints.yaml)
model = zoo.from_pretrained("transformer_lm_small.pg19mini")
zoo.translate(zoo.from_pretrained("translation/folder"), ["Ein Hund läuft."])  # -> ["A dog runs."]
"""

__version__ = "0.1.0"

from zoo import models  # noqa: E402,F401  (registers every family's presets)
from zoo.beam_search import translate  # noqa: E402
from zoo.generation import generate  # noqa: E402
from zoo.hub.registry import list_pretrained  # noqa: E402
from zoo.pretrained import from_pretrained  # noqa: E402
from zoo.registry import create_model, list_models  # noqa: E402

__all__ = [
    "__version__",
    "create_model",
    "from_pretrained",
    "generate",
    "list_models",
    "list_pretrained",
    "translate",
]
