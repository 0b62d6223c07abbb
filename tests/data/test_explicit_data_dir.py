"""An explicit ``data_dir`` is the only place every loader searches (issue 52): with the data under
``$ZOO_DATA_DIR`` but not in the directory named, each loader raises a one-line error naming that
directory, instead of reading ``$ZOO_DATA_DIR`` quietly."""

import pytest

from zoo.data.byte_corpora import load_byte_corpus
from zoo.data.images import load_images
from zoo.data.sources import search_dirs
from zoo.data.translation import load_pairs
from zoo.errors import DataNotFoundError

LOADERS = {
    "text": lambda d: load_byte_corpus("tinyshakespeare", data_dir=d),
    "pg19mini": lambda d: load_byte_corpus("pg19mini", data_dir=d, splits=("test",)),
    "images": lambda d: load_images("mnist", data_dir=d, splits=("test",)),
    "cifar10": lambda d: load_images("cifar10", data_dir=d),
    "translation": lambda d: load_pairs("multi30k", "val", "de", "en", data_dir=d),
}


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_an_explicit_data_dir_is_the_only_place_searched(loader, data_dir, tmp_path):
    """$ZOO_DATA_DIR (conftest: the real data) has every one of these data sets."""
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataNotFoundError) as e:
        LOADERS[loader](str(empty))
    message = str(e.value)
    assert "\n" not in message and f"found in {empty}/" in message
    assert "$ZOO_DATA_DIR is not" in message and f"({data_dir}), which has" in message


def test_search_dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_DATA_DIR", str(tmp_path / "env"))
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path / "cache"))
    assert search_dirs(tmp_path / "mine") == [tmp_path / "mine"]
    assert search_dirs(None) == [tmp_path / "env", tmp_path / "cache" / "data"]
