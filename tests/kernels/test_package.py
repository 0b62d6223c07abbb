"""zoo.kernels is the top-level kernels/ folder, and that folder never shadows the PyPI `kernels`."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(code: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True)


@pytest.mark.parametrize("cwd", ["outside", "root"])
def test_kernels_folder_is_zoo_kernels(tmp_path, cwd):
    code = (
        "import zoo.kernels, zoo.kernels.segment as d, pathlib; "
        "print(pathlib.Path(d.__file__).parent.name, callable(zoo.kernels.block_sparse_attention))"
    )
    ok = _run(code, tmp_path if cwd == "outside" else REPO)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == ["kernels", "True"]


def test_the_folder_is_not_a_regular_package():
    """A regular package at the root would win over the installed `kernels` (transformers')."""
    assert not (REPO / "kernels" / "__init__.py").exists()


@pytest.mark.parametrize("cwd", ["", "benchmarks", "tests", "experiments"])
def test_import_kernels_from_the_checkout_finds_the_installed_package(cwd):
    """`import kernels` from the clone (a notebook, `python -c`, a script in benchmarks/) gets
    Hugging Face's package where it is installed (transformers 5.25 installs and imports it), and
    never runs a file of this repository: without it, only an empty namespace package."""
    code = "import kernels; print(getattr(kernels, '__file__', None))"
    result = _run(code, REPO / cwd)
    installed = importlib.util.find_spec("kernels")
    if installed is None or installed.origin is None:  # not installed
        namespace = result.returncode == 0 and result.stdout.strip() == "None"  # the root's folder
        assert namespace or "No module named 'kernels'" in result.stderr, result.stderr
    else:
        assert result.returncode == 0, result.stderr
        found = Path(result.stdout.strip()).resolve()
        assert found == Path(installed.origin).resolve()
        assert "site-packages" in found.parts


def test_every_subpackage_is_listed_in_pyproject():
    """A plain (non-editable) install ships only the packages pyproject.toml lists."""
    import tomllib

    listed = set(
        tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(("zoo", *p.parent.relative_to(REPO / "zoo").parts))
        for p in (REPO / "zoo").rglob("__init__.py")
    }
    assert found | {"zoo.kernels"} == listed
