"""The layers of the house (docs/architecture.md): the import-linter contract in pyproject.toml holds,
fails on a planted upward import, and kernels/ (installed as zoo.kernels, which import-linter does not
see) imports nothing of zoo but itself."""

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")  # the dev extra installs it


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "NO_COLOR": "1"}
    return subprocess.run([str(LINT), "--no-cache"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "zoo", tmp_path / "zoo", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_layer_contract_holds(tmp_path):
    done = _lint(_copy(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 kept, 0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "planted", "named"),
    [
        ("zoo/errors.py", "import zoo.cli  # noqa\n", "zoo.errors -> zoo.cli"),
        # deferred imports count too: the attention layer may not build a model
        ("zoo/attention/dense.py", "def _up():\n    from zoo.models import TransformerLM\n",
         "zoo.attention.dense -> zoo.models"),
    ],
)  # fmt: skip
def test_a_planted_upward_import_breaks_the_contract(tmp_path, module, planted, named):
    root = _copy(tmp_path)
    path = root / module
    path.write_text(path.read_text() + "\n" + planted)
    done = _lint(root)
    assert done.returncode != 0
    assert "BROKEN" in done.stdout and named in done.stdout, done.stdout


def test_kernels_import_nothing_of_zoo_but_themselves():
    upward = []
    for path in sorted((REPO / "kernels").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom) and not node.level
                    else []
                )
            )
            upward += [f"{path.name}: {n}" for n in names
                       if n.split(".")[0] == "zoo" and not n.startswith("zoo.kernels")]  # fmt: skip
    assert upward == []


def _doc_blocks() -> list[str]:
    text = (REPO / "docs" / "architecture.md").read_text()
    return re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)


def _run(code: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=dict(os.environ))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_mechanism_registered_outside_zoo_trains_one_step_through_zoo_fit(tmp_path):
    """docs/architecture.md's mechanism, registered from here (not a file of zoo/), then `zoo fit`."""
    recipe = REPO / "recipes" / "transformer_lm" / "pg19mini.yaml"
    fit = ["fit", "--config", str(recipe), "--model.model=transformer_lm_tiny",
           "--model.model_config={attention: entmax15}", "--trainer.max_steps=1",
           "--trainer.val_check_interval=1", "--trainer.limit_val_batches=1",
           "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]  # fmt: skip
    code = (
        _doc_blocks()[0]
        + f"""
import torch
from zoo.cli import main
from zoo.tasks import CausalLM
try:
    main({fit!r})
except SystemExit as e:
    assert e.code in (0, None), e.code
ckpt = "runs/transformer_lm/pg19mini/checkpoints/last.ckpt"
task = CausalLM.load_from_checkpoint(ckpt, map_location="cpu")
print(type(task.model).__name__,
      {{b.attention.mapping for b in task.model.blocks}},
      torch.load(ckpt, weights_only=True)["global_step"])
"""
    )
    out = _run(code, tmp_path).split()
    assert out[-3:] == ["TransformerLM", "{'entmax15'}", "1"], out


def test_a_family_in_one_file_builds_saves_and_loads(tmp_path):
    """docs/architecture.md's family: registered by its own file, saved and loaded by model_type."""
    code = (
        _doc_blocks()[1]
        + """
import torch
import zoo
assert zoo.list_models("my_lm*") == ["my_lm_small"]
model = zoo.create_model("my_lm_small", **MyLM.TINY).eval()
x = torch.randint(0, model.config.vocab_size, (1, 20))
model.save_pretrained("saved")
again = zoo.from_pretrained("./saved")
torch.testing.assert_close(again(x).logits, model(x).logits)
print(type(again).__name__, model.blocks[0].attention.groups[0].pattern.name)
"""
    )
    assert _run(code, tmp_path).split() == ["MyLM", "local(window=6)"]


def test_every_module_of_zoo_has_a_layer():
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = config["contracts"]
    placed = {m.strip() for layer in contract["layers"] for m in layer.split("|")}
    tops = {
        f"zoo.{p.stem}"
        for p in (REPO / "zoo").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }
    assert tops - placed == set(), "a module of zoo/ without a layer: add it to pyproject.toml"


MAX_FILE_LINES, MAX_FUNCTION_LINES = 500, 80
LONG_REASON = "# long because"  # the comment that lets a function be longer (issue 54, step 5)


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """``(name, lines)`` of the functions in ``source`` whose code (their docstring aside) runs
    over ``limit`` lines, unless a ``# long because ...`` comment opens their body."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        first = node.body[0]
        has_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
        doc = (
            first.end_lineno - first.lineno + 1
            if has_doc and isinstance(first.value.value, str)
            else 0
        )
        # the lines right after the docstring, or right before the first statement
        near = lines[first.end_lineno : first.end_lineno + 3] if doc else lines[
            max(0, first.lineno - 4) : first.lineno - 1
        ]  # fmt: skip
        if any(line.strip().startswith(LONG_REASON) for line in near):
            continue
        n = node.end_lineno - node.lineno + 1 - doc
        if n > limit:
            found.append((node.name, n))
    return found


def _library_files():
    return sorted([*(REPO / "zoo").rglob("*.py"), *(REPO / "kernels").rglob("*.py")])


def test_no_library_file_over_500_lines():
    long = {str(p.relative_to(REPO)): n for p in _library_files()
            if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES}  # fmt: skip
    assert long == {}, f"split these files (at most {MAX_FILE_LINES} lines): {long}"


def test_no_library_function_over_80_lines_of_code():
    long = {f"{p.relative_to(REPO)}:{name}": n for p in _library_files()
            for name, n in long_functions(p.read_text())}  # fmt: skip
    assert long == {}, (
        f"split these functions (at most {MAX_FUNCTION_LINES} lines besides the docstring), or "
        f"open them with a '{LONG_REASON} ...' comment: {long}"
    )


def test_the_function_length_check_can_fail():
    body = "\n".join(f"    x{i} = {i}" for i in range(81))
    assert long_functions(f'def f():\n    """Doc."""\n{body}\n') == [("f", 82)]  # def line too
    assert long_functions(f"def f():\n    {LONG_REASON}: one table\n{body}\n") == []
    short = "\n".join(f"    x{i} = {i}" for i in range(79))
    doc = '    """' + "\n".join(["Doc."] * 30) + '"""'
    assert long_functions(f"def f():\n{doc}\n{short}\n") == []  # a long docstring is fine
