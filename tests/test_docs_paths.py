"""Every recipe, experiment and script that the docs name exists (issue 54, step 4): moving a file
out of `recipes/` or `experiments/` must not break a docs section that cites it.

Scanned: README.md, docs/ (Markdown), checkpoints.yaml, the Makefile, the published cards and
training.json files, and the comments and docstrings of the files in `recipes/` and
`experiments/` (the research log, experiments/long_context/log.md, included). Not scanned: the
published `recipe.yaml` copies (the recipe as it ran, comments included) and the measurement
records under docs/bench/ and experiments/bench/ other than Markdown.
"""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# recipes/... or experiments/... ending in a file suffix; {a,b} alternatives allowed
PATH = re.compile(r"(?:recipes|experiments)/[A-Za-z0-9_./{},-]*?\.(?:yaml|py|sh)\b")
EXAMPLES = {"recipes/my_family/pg19mini.yaml"}  # docs/architecture.md's worked example, not a file


def expand(path: str) -> list[str]:
    """``a{b,c}d`` -> ``[abd, acd]``, for every brace group."""
    group = re.search(r"\{([^{}]*)\}", path)
    if group is None:
        return [path]
    head, tail = path[: group.start()], path[group.end() :]
    return [p for alt in group.group(1).split(",") for p in expand(head + alt + tail)]


def _scanned(path: Path) -> bool:
    """A file of recipes/ or experiments/, but not a measurement record under experiments/bench/
    (JSON, CSV, logs, pictures: what a run wrote, paths included, as it ran)."""
    records = REPO / "experiments" / "bench"
    return path.is_file() and (path.suffix == ".md" or not path.is_relative_to(records))


def cited_paths() -> dict[str, list[str]]:
    sources = [
        REPO / "README.md",
        REPO / "checkpoints.yaml",
        REPO / "Makefile",
        *(p for p in (REPO / "docs").rglob("*.md")),
        *(REPO / "checkpoints").glob("*/README.md"),
        *(REPO / "checkpoints").glob("*/training.json"),
        *(p for d in ("recipes", "experiments") for p in (REPO / d).rglob("*") if _scanned(p)),
    ]
    cited: dict[str, list[str]] = {}
    for source in sources:
        for match in PATH.findall(source.read_text(errors="replace")):
            for path in expand(match):
                cited.setdefault(path, []).append(str(source.relative_to(REPO)))
    return cited


def test_the_scan_finds_the_published_recipes_and_expands_braces():
    cited = cited_paths()
    assert "recipes/transformer_lm/transformer_lm_small.pg19mini.yaml" in cited  # checkpoints.yaml
    assert expand("experiments/x/pg19mini{_a,_b}.yaml") == [
        "experiments/x/pg19mini_a.yaml",
        "experiments/x/pg19mini_b.yaml",
    ]


@pytest.mark.parametrize("path", sorted(set(cited_paths()) - EXAMPLES))
def test_every_cited_recipe_and_experiment_exists(path):
    assert (REPO / path).is_file(), f"{path} is named by {cited_paths()[path]} but does not exist"


def test_recipes_hold_only_what_users_run():
    """Each published checkpoint's recipe is named after it; nothing else in recipes/ is named
    like a checkpoint, and no retired or ablation recipe sits beside them."""
    import yaml

    registry = yaml.safe_load((REPO / "checkpoints.yaml").read_text())["checkpoints"]
    for name, entry in registry.items():
        assert Path(entry["recipe"]).name == f"{name}.yaml", (name, entry["recipe"])
        assert entry["recipe"].startswith("recipes/")
    named = {p.name.split(".yaml")[0] for p in (REPO / "recipes").glob("*/*.*.yaml")}
    assert {re.sub(r"\.stage\d+$", "", n) for n in named} == set(registry)
