import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Tests never reach the network: offline Hub/datasets, and a cache directory of our own.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def _data_dir() -> Path:
    """The real data sets: $ZOO_DATA_DIR, else the shared/ folder beside the repository."""
    return Path(os.environ.get("ZOO_DATA_DIR") or REPO.parent / "shared" / "data")


# CLI runs inside the tests find the real data the way a user's do: through ZOO_DATA_DIR.
os.environ["ZOO_DATA_DIR"] = str(_data_dir())


@pytest.fixture(scope="session")
def data_dir() -> Path:
    d = _data_dir()
    if not (d / "pg19mini" / "splits.tsv").is_file():
        pytest.fail(f"real data not found at {d}: set ZOO_DATA_DIR to the shared data directory")
    return d


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "zoo-cache"))
