import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]

# Tests never reach the network: offline Hub/datasets, and a cache directory of our own.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# Without a GPU the Triton kernels run in Triton's interpreter on CPU tensors. It is set here, before
# any test module is collected: set later (in tests/kernels/conftest.py), the kernels' helper
# functions were compiled for a GPU when the whole suite ran.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Under pytest-xdist (`make test`: -n 2) each worker computes on one thread: two workers with two
# threads each oversubscribe the two cores.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


def _data_dir() -> Path:
    """The real data sets: $ZOO_DATA_DIR, else the shared/ folder beside the repository."""
    return Path(os.environ.get("ZOO_DATA_DIR") or REPO.parent / "shared" / "data")


# CLI runs inside the tests find the real data the way a user's do: through ZOO_DATA_DIR.
os.environ["ZOO_DATA_DIR"] = str(_data_dir())


# The precision-sensitive tests (pyproject's `precision` marker): `make test` runs them a second
# time with oneDNN and ATen limited to AVX2, so an AMX machine also checks an AVX2-only CPU.
# (The Triton kernels' tests run in Triton's interpreter on NumPy: not precision-sensitive here.)
PRECISION_SENSITIVE = (
    "tests/test_autocast.py",
    "tests/test_lstm_",
    "tests/models/test_rnn_seq2seq.py",
    "tests/kernels/test_backend.py",
    "tests/kernels/test_block_sparse.py",
    "tests/kernels/test_routing_attention.py",
    "tests/kernels/test_segment.py",
    "tests/attention/test_mappings.py",
)


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        path = Path(str(item.fspath)).resolve()
        rel = path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else path.name
        if rel.startswith(PRECISION_SENSITIVE) or "dtype" in item.name:
            item.add_marker(pytest.mark.precision)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    d = _data_dir()
    if not (d / "pg19mini" / "splits.tsv").is_file():
        pytest.fail(f"real data not found at {d}: set ZOO_DATA_DIR to the shared data directory")
    return d


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "zoo-cache"))


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """A local Hub-compatible server (tests/hub_server.py) that the huggingface_hub client uses
    through HF_ENDPOINT, with a token (HF_TOKEN) that may write everywhere and a fresh HF cache."""
    from hub_server import HubServer

    with HubServer() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        monkeypatch.setenv("HF_TOKEN", "test-token")
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
        import huggingface_hub.constants as c

        monkeypatch.setattr(c, "HF_HUB_DISABLE_XET", True)
        monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hf_home" / "hub"))
        monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # the suite is offline; this server is local
        monkeypatch.setattr(c, "HF_HUB_OFFLINE", False)
        yield server


@pytest.fixture
def registry(tmp_path, monkeypatch):
    """An empty registry in a temporary directory (ZOO_CHECKPOINTS points the zoo at it)."""
    from zoo.hub.registry import Registry, load_registry

    path = tmp_path / "reg" / "checkpoints.yaml"
    path.parent.mkdir()
    Registry(path, {}).save()
    monkeypatch.setenv("ZOO_CHECKPOINTS", str(path))
    return load_registry()


@pytest.fixture
def published(registry, tmp_path) -> Path:
    """The tiny checkpoint (tests/published.py) exported and registered: a shipped copy, not pushed."""
    from fakes import fake_run
    from published import METRIC, NAME, REPO

    from zoo.publishing import export_run, register

    run = fake_run(tmp_path / "run")
    recipe = "recipes/transformer_lm/pg19mini.yaml"
    folder = export_run(
        run, registry.shipped_dir / NAME, name=NAME, recipe=REPO / recipe, metrics=[METRIC]
    )
    register(folder, name=NAME, recipe=recipe, metrics=[METRIC])
    return folder


@pytest.fixture(scope="module")
def tokenizer():
    """A joint BPE of 64 tokens learned on German and English toy sentences (translation tests)."""
    from zoo.data.translation import train_bpe

    words = "ein Hund läuft im Park eine Frau liest Buch Mann a dog runs in park woman reads book"
    words = words.split()
    texts = [" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(2 + i % 5))
             for i in range(200)]  # fmt: skip
    return train_bpe(texts, vocab_size=64)
