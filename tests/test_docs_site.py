"""The documentation site (mkdocs.yml, docs/hooks.py, docs/api/; issue 80).

- Every public name (``__all__``) of ``zoo``, ``zoo.kernels`` and each module the API reference
  documents is rendered by one of docs/api's ``::: identifier`` directives.
- docs/cli.md is generated: the hook prints the ``--help`` of every command of zoo/cli.py.
- README.md <= 250 lines, no Markdown page under docs/ over 600.
- ``mkdocs build --strict`` passes (skipped only where mkdocs is not installed:
  ``pip install -e ".[docs]"``), and the built site holds every name, command and model card.
"""

import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
API = REPO / "docs" / "api"
# the modules whose every public name the reference must hold (and any other it documents)
REQUIRED = [
    "zoo", "zoo.pretrained", "zoo.loading", "zoo.errors",
    "zoo.models", "zoo.models.registry", "zoo.models.outputs",
    "zoo.attention", "zoo.attention.mechanisms", "zoo.attention.patterns", "zoo.attention.mappings",
    "zoo.attention.scores", "zoo.attention.rotary",
    "zoo.kernels",
    "zoo.tasks", "zoo.callbacks", "zoo.averaging",
    "zoo.data",
    "zoo.generation", "zoo.beam_search",
    "zoo.evaluation", "zoo.metrics",
    "zoo.hub", "zoo.publishing",
    "zoo.integrations.transformers", "zoo.integrations.lm_eval_harness",
]  # fmt: skip
DIRECTIVE = re.compile(r"^::: ([\w.]+)\n((?:[ \t]+\S.*\n)*)", re.M)


def load_hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def directives() -> dict[str, list[str] | None]:
    """docs/api's ``::: identifier`` -> its ``members:`` option (None: the module's ``__all__``)."""
    found = {}
    for page in sorted(API.glob("*.md")):
        for identifier, options in DIRECTIVE.findall(page.read_text()):
            members = yaml.safe_load(options).get("options", {}).get("members") if options else None
            found[identifier] = members
    return found


def rendered() -> dict[str, object]:
    """The dotted paths the directives render (a module's: one per name of ``__all__``), each
    with the object it names."""
    paths = {}
    for identifier, members in directives().items():
        try:
            module = importlib.import_module(identifier)
        except ImportError:  # an object, not a module
            parent, _, name = identifier.rpartition(".")
            paths[identifier] = getattr(importlib.import_module(parent), name)
            continue
        for name in module.__all__ if members is None else members:
            paths[f"{identifier}.{name}"] = getattr(module, name)
    return paths


def public_modules() -> list[str]:
    """REQUIRED, and every module docs/api documents."""
    return sorted({i for i in directives() if _is_module(i)} | set(REQUIRED))


def _is_module(identifier: str) -> bool:
    try:
        return importlib.util.find_spec(identifier) is not None
    except ImportError:
        return False


def test_directives_are_read():
    found = directives()
    assert found["zoo"] == ["__version__"]  # docs/api/zoo.md names zoo's one eager attribute
    assert found["zoo.kernels"] is None
    assert "zoo.kernels.block_sparse_attention" in rendered()


@pytest.mark.parametrize("module_name", public_modules())
def test_every_public_name_is_in_the_api_reference(module_name):
    module = importlib.import_module(module_name)
    objects = rendered()
    missing = [
        name
        for name in module.__all__
        if not any(obj is getattr(module, name) for obj in objects.values())
    ]
    assert not missing, f"{module_name}: {missing} are in __all__ but not in docs/api"


def test_the_cli_page_generates_every_command():
    from zoo.cli import COMMANDS, LIGHTNING_COMMANDS, USAGE

    hooks = load_hooks()
    commands = hooks.zoo_commands()
    usage = USAGE.split("commands:\n")[1].split("\n\n")[0]
    rows = re.findall(r"^  (\S+(?: \| \S+)*)  ", usage, re.M)  # "  fit | validate | test   ..."
    listed = {command for row in rows for command in row.split(" | ")}
    assert listed == set(COMMANDS) | set(LIGHTNING_COMMANDS)
    assert sorted(commands) == sorted(listed)
    assert hooks.CLI_MARKER in (REPO / "docs" / "cli.md").read_text()
    assert hooks.command_help(["list", "--help"]).startswith("usage: zoo list")


def test_links_to_repository_files_are_rewritten():
    hooks = load_hooks()
    page = "[r](../../recipes/transformer_lm/pg19mini.yaml) ![p](../img/pattern_fixed.png)"
    assert hooks.rewrite(page, "results/x.md") == (
        "[r](../repo/recipes/transformer_lm/pg19mini.yaml) ![p](../img/pattern_fixed.png)"
    )
    card = "checkpoints/transformer_lm_small.pg19mini/README.md"
    assert hooks.rewrite("![b](bench.png) [w](model.safetensors)", hooks.site_path(card)) == (
        "![b](bench.png) [w](model.safetensors)"  # beside the card in the site; weights stay out
    )
    assert hooks.rewrite("```\n[a](../Makefile)\n```", "cli.md") == "```\n[a](../Makefile)\n```"
    assert hooks.rewrite("[a](../Makefile#L1)", "cli.md") == "[a](repo/Makefile#L1)"


def test_links_that_leave_the_repository_stay_out_of_the_site(tmp_path, monkeypatch):
    hooks = load_hooks()
    (tmp_path / "repo" / "docs").mkdir(parents=True)
    (tmp_path / "secret.txt").write_text("outside")
    (tmp_path / "repo" / "inside.txt").write_text("inside")
    (tmp_path / "repo" / "escape").symlink_to(tmp_path / "secret.txt")
    monkeypatch.setattr(hooks, "ROOT", tmp_path / "repo")
    assert hooks.linked("page.md", "../inside.txt") == "inside.txt"
    assert hooks.linked("page.md", "../../secret.txt") is None  # by ..
    assert hooks.linked("page.md", "../escape") is None  # by a symlink
    assert hooks.rewrite("[s](../escape)", "page.md") == "[s](../escape)"  # left to --strict


def test_readme_is_a_front_door():
    lines = len((REPO / "README.md").read_text().splitlines())
    assert lines <= 250, f"README.md has {lines} lines"


def test_no_docs_page_is_over_600_lines():
    long = {
        str(p.relative_to(REPO)): n
        for p in (REPO / "docs").rglob("*.md")
        if (n := len(p.read_text().splitlines())) > 600
    }
    assert not long, f"pages over 600 lines: {long}"


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs is not installed")
def test_the_site_builds_in_strict_mode(tmp_path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "HF_HUB_OFFLINE": "1"}
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(REPO / "mkdocs.yml"), "--site-dir", str(site)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    warnings = [line for line in build.stderr.splitlines() if "WARNING" in line]
    assert build.returncode == 0, "\n".join(warnings or build.stderr.splitlines()[-20:])

    api = "".join(p.read_text() for p in (site / "api").rglob("*.html"))
    missing = [path for path in rendered() if f'id="{path}"' not in api]
    assert not missing, f"directives that rendered nothing: {missing}"
    cli = (site / "cli" / "index.html").read_text()
    hooks = load_hooks()
    assert all(f"usage: zoo {c}" in cli for c in hooks.zoo_commands())
    for card in hooks.model_cards():
        page = site / hooks.site_path(card).replace("README.md", "index.html")
        assert page.is_file() and "model-index" not in page.read_text(), card
