"""The Python blocks of README.md and docs/**/*.md (not docs/bench/, the measurement records) run as
written, and print or return what they say.

Every block is either run here or listed in NOT_RUN with the reason, so a new block cannot slip in
unchecked. A comment after an expression that is a list is the value the expression must have:
numbers to 0.01 (``sparsemax(s)  # [[0.55, 0.45, 0.00, 0.00]]``), and ``[first, ..., last]`` the
first and last items of a longer list.
"""

import ast
import contextlib
import io
import re
import string
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
FILES = [
    REPO / "README.md",
    *sorted(p for p in DOCS.rglob("*.md") if p.parts[len(DOCS.parts)] != "bench"),
]

# (file, index of its python block) -> why it cannot run in the test suite
NOT_RUN = {
    ("docs/architecture.md", 0): "registers a mechanism: tests/test_architecture.py runs it apart",
    ("docs/architecture.md", 1): "registers a family: tests/test_architecture.py runs it apart",
    ("docs/attention_mechanisms.md", 0): "registers an attention named like a built-in one",
    ("docs/checkpoints.md", 0): "a CUDA device and Hub repo ids",
    ("docs/checkpoints.md", 3): "one call, run in tests/test_pretrained.py",
    ("docs/translation.md", 0): "a checkpoint file from a training run",
}


def python_blocks() -> dict[tuple[str, int], str]:
    blocks = {}
    for path in FILES:
        found = re.findall(r"^```python\n(.*?)^```", path.read_text(), re.S | re.M)
        for i, code in enumerate(found):
            blocks[(path.relative_to(REPO).as_posix(), i)] = code
    return blocks


BLOCKS = python_blocks()
RUN = sorted(set(BLOCKS) - set(NOT_RUN))


def _stated_values(code: str) -> list[tuple[str, list]]:
    """``(expression, value)`` for each line ``EXPR  # [numbers]`` of ``code``."""
    out = []
    for line in code.splitlines():
        expr, sep, comment = line.partition("  #")
        try:
            value = ast.literal_eval(comment.strip()) if sep else None
        except (ValueError, SyntaxError):
            continue
        if isinstance(value, list) and expr.strip():
            out.append((expr.strip(), value))
    return out


def test_every_block_is_run_or_says_why_not():
    assert ("README.md", 0) in RUN
    assert set(NOT_RUN) <= set(BLOCKS), "NOT_RUN names a block that is gone"
    for key, code in BLOCKS.items():
        compile(code, f"{key[0]} block {key[1]}", "exec")  # even the ones not run must parse


@pytest.mark.parametrize("key", RUN, ids=lambda k: f"{k[0]}:{k[1]}")
def test_block_runs_as_written(key, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # blocks may write files (save_pretrained)
    code, scope, printed = BLOCKS[key], {}, io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, f"{key[0]} block {key[1]}", "exec"), scope)
    for expr, value in _stated_values(code):
        got = eval(expr, scope)
        if Ellipsis in value:
            assert [got[0], got[-1]] == [value[0], value[-1]], (expr, got)
        else:
            torch.testing.assert_close(got, torch.tensor(value, dtype=got.dtype), atol=0.01, rtol=0)
    if key == ("README.md", 0):
        text = printed.getvalue()
        assert text.startswith("It was a cold night")
        # a trained byte model continues in English; an untrained one prints random bytes
        readable = sum(c in string.ascii_letters + " " for c in text) / len(text)
        assert readable > 0.8, text
