import subprocess
import sys


def _run(code: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True)


def test_kernels_folder_is_installed_as_zoo_kernels(tmp_path):
    # run outside the repository so the source tree is not on sys.path
    ok = _run(
        "import zoo.kernels, pathlib; print(pathlib.Path(zoo.kernels.__file__).parent.name)",
        tmp_path,
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == "kernels"


def test_no_top_level_kernels_module_is_installed(tmp_path):
    """The PyPI package `kernels` (used by transformers) owns that name."""
    result = _run("import kernels", tmp_path)
    assert result.returncode != 0 and "No module named 'kernels'" in result.stderr


def test_every_subpackage_is_listed_in_pyproject():
    """A plain (non-editable) install ships only the packages pyproject.toml lists."""
    import tomllib
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    listed = set(
        tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(("zoo", *p.parent.relative_to(repo / "zoo").parts))
        for p in (repo / "zoo").rglob("__init__.py")
    }
    assert found | {"zoo.kernels"} == listed
