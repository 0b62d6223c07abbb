"""Stand-ins shared by the tests: a run directory as `zoo fit` leaves it; a recipe script as a module;
a data directory whose pg19mini test books are short word salads."""

import importlib.util
from pathlib import Path

import lightning
import numpy as np
import torch

from zoo.tasks import CausalLM


def fake_run(
    directory: Path,
    seed: int = 0,
    *,
    task=CausalLM,
    model: str = "transformer_lm_tiny",
    model_config: dict | None = None,
    dataset: str = "pg19mini",
) -> Path:
    """A run directory with checkpoints/best.ckpt as `zoo fit` writes it (tiny model, 3 steps)."""
    torch.manual_seed(seed)
    module = task(model=model, model_config=model_config, lr=1e-3)
    ckpt = {
        "state_dict": module.state_dict(),
        "hyper_parameters": dict(module.hparams),
        "datamodule_hyper_parameters": {"dataset": dataset, "batch_size": 2, "seed": 0},
        "pytorch-lightning_version": lightning.__version__,
        "global_step": 3,
        "epoch": 0,
        "callbacks": {
            "TrainingSummary": {
                "tokens": 1536,
                "wall_time": 2.5,
                "hardware": ["test CPU (2 threads)"],
                "precision": "32-true",
                "git_commits": ["0" * 40],
                "data": {"dataset": dataset, "splits": ["train"], "sha256": "f" * 64},
            }
        },
    }
    module.on_save_checkpoint(ckpt)  # what the task adds (the model's architecture, ...)
    (directory / "checkpoints").mkdir(parents=True)
    torch.save(ckpt, directory / "checkpoints" / "best.ckpt")
    return directory


REPO = Path(__file__).resolve().parents[1]


def recipe_module(path: str):
    """The recipe script ``path`` (relative to the repository, e.g.
    ``"experiments/long_context/ablate.py"``) imported as a module, without running its ``main``."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, REPO / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def word_salad(n: int, seed: int) -> bytes:
    """``n`` bytes of common English words in a random order (seeded)."""
    words = b"the of and a to in was he that it his her with as had for you on she be at by".split()
    rng = np.random.default_rng(seed)
    return b" ".join(words[i] for i in rng.integers(0, len(words), n))[:n]


def pg19mini_test_books(root: Path, sizes: tuple[int, int, int]) -> Path:
    """``root`` as a data directory whose pg19mini test split is three books of ``sizes`` bytes
    (found before $ZOO_DATA_DIR when passed as ``data_dir``); returns ``root``."""
    from zoo.data.byte_corpora import PG19MINI_TEST

    (root / "pg19mini").mkdir(parents=True)
    for seed, (ebook, size) in enumerate(zip(PG19MINI_TEST, sizes, strict=True)):
        (root / "pg19mini" / f"{ebook}.txt").write_bytes(word_salad(size, seed))
    return root


def run_zoo(capsys, *args: str) -> tuple[int, str, str]:
    """``zoo ARGS`` in this process: (exit status, stdout, stderr); ``sys.exit(message)``'s
    message, which Python prints at exit, is added to stderr."""
    from zoo.cli import main

    capsys.readouterr()
    message = ""
    try:
        main(list(args))
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
        message = e.code if isinstance(e.code, str) else ""
    out, err = capsys.readouterr()
    return code, out, err + message
