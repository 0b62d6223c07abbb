"""No folder or module of the checkout takes the top-level import name of an installed distribution.

A directory lands on ``sys.path`` when Python runs from it: the root (``python -c``, a notebook,
pytest's ``pythonpath``), ``benchmarks/`` and each folder of ``experiments/`` (a script run there),
each folder of ``tests/`` (pytest's default import mode puts a test's folder first, as ``tests/``
has no ``__init__.py``). There a module (``x.py``) or a regular package (``x/__init__.py``) wins
over an installed ``x``; a folder without ``__init__.py`` does not (a namespace portion loses to an
installed package), which is why ``kernels/`` has none.
"""

import importlib.metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OURS = "attention-zoo"


def path_folders() -> list[Path]:
    """The checkout's folders that a run puts on ``sys.path``."""
    nested = [
        p for top in ("tests", "experiments") for p in (REPO / top).rglob("*")
        if p.is_dir() and "__pycache__" not in p.parts
    ]  # fmt: skip
    return [REPO, REPO / "benchmarks", REPO / "tests", REPO / "experiments", *nested]


def exposed_names(folder: Path) -> set[str]:
    """Top-level import names that ``folder`` provides when it is on ``sys.path``."""
    modules = {p.name.split(".")[0] for p in folder.iterdir() if p.suffix in (".py", ".so")}
    packages = {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}
    return modules | packages


def installed_names() -> dict[str, list[str]]:
    """Top-level import names of the installed distributions other than the zoo itself."""
    return {
        name: dists
        for name, dists in importlib.metadata.packages_distributions().items()
        if OURS not in dists and not name.startswith("_")
    }


def test_no_checkout_name_shadows_an_installed_distribution():
    installed = installed_names()
    assert "torch" in installed  # the listing works: a broken one would pass vacuously
    clashes = [
        f"{folder.relative_to(REPO) or '.'}/{name} shadows {installed[name]}"
        for folder in path_folders()
        for name in sorted(exposed_names(folder) & installed.keys())
    ]
    assert not clashes, clashes


def test_the_check_sees_a_planted_clash(tmp_path):
    (tmp_path / "torch.py").write_text("")
    (tmp_path / "yaml").mkdir()
    (tmp_path / "yaml" / "__init__.py").write_text("")
    (tmp_path / "kernels").mkdir()  # a namespace folder: it does not shadow
    assert exposed_names(tmp_path) & installed_names().keys() == {"torch", "yaml"}
