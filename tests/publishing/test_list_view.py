"""`zoo list` fits the terminal (issue 52): a narrow view at 80 and 120 columns whose every cell
reads whole, every column when they fit or with --wide, --markdown / --json for scripts, and a
reader that closes the pipe (`zoo list | head`) ends it quietly."""

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from zoo.cli import main
from zoo.commands.listing import _family
from zoo.hub import load_registry

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def entries(monkeypatch):
    """The repository's published checkpoints."""
    monkeypatch.delenv("ZOO_CHECKPOINTS", raising=False)
    return list(load_registry(REPO / "checkpoints.yaml").entries.values())


@pytest.fixture
def active(entries):
    """Those `zoo list` shows without --all (the retired ones are hidden)."""
    return [e for e in entries if e.retired is None]


def zoo_list(capsys, monkeypatch, columns: int, *args: str) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))  # rich's Console takes its width from it
    capsys.readouterr()
    main(["list", *args])
    return capsys.readouterr().out


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("flags", [[], ["--all"]])
def test_the_narrow_view_reads_whole_at_80_and_120_columns(entries, active, capsys, monkeypatch,
                                                           columns, flags):  # fmt: skip
    out = zoo_list(capsys, monkeypatch, columns, *flags)
    lines = out.splitlines()
    assert "…" not in out and max(len(line) for line in lines) <= columns
    assert "weights from" not in out and "zoo list --wide" in out
    for e in entries if flags else active:  # one line per checkpoint holding each cell whole
        (row,) = [line for line in lines if line.startswith(e.name + " ")]
        cells = row.split()
        assert cells[0] == e.name and cells[1:3] == [_family(e.model_type),
                                                     f"{e.structure['context']:,}"]  # fmt: skip
        shown = len(cells[4].partition(".")[2])  # the test metric, rounded to what is shown
        assert (
            cells[3] == f"{e.parameters / 1e6:.2f}M" and cells[4] == f"{e.headline.value:.{shown}f}"
        )


def test_every_column_when_they_fit_or_with_wide(entries, capsys, monkeypatch):
    wide = zoo_list(capsys, monkeypatch, 250, "--all")
    assert "weights from" in wide and "repository copy" in wide and "…" not in wide
    assert "./runs/" not in wide and "./checkpoints/" not in wide  # parents are named
    assert "recipes/sparse_transformer/sparse_transformer_small.pg19mini.stage1.yaml" in wide
    assert "weights from" in zoo_list(capsys, monkeypatch, 80, "--wide")


def test_json_for_scripts(entries, capsys, monkeypatch):
    records = json.loads(zoo_list(capsys, monkeypatch, 80, "--json"))
    assert [r["name"] for r in records] == [e.name for e in entries]
    first = records[0]
    assert {"family", "context", "parameters", "headline", "parent", "weights_from"} <= set(first)
    assert first["headline"]["value"] == entries[0].headline.value


class ClosedPipe(io.StringIO):
    """A stdout whose reader has gone: writing anything (and flushing it) raises BrokenPipeError."""

    def write(self, text: str) -> int:
        if text:
            raise BrokenPipeError(32, "Broken pipe")
        return 0

    def fileno(self) -> int:
        raise io.UnsupportedOperation("fileno")


@pytest.mark.parametrize("mode", [[], ["--wide"], ["--markdown"], ["--json"], ["nothing*"]])
def test_a_closed_pipe_ends_quietly_in_every_mode(entries, monkeypatch, capsys, mode):
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    with pytest.raises(SystemExit) as e:
        main(["list", *mode])
    assert e.value.code == 0 and capsys.readouterr().err == ""


def test_zoo_list_into_head_has_no_traceback(entries):
    """The real thing: the reader closes the pipe before zoo writes."""
    child = subprocess.Popen(
        [sys.executable, "-c", "from zoo.cli import main; main(['list', '--markdown'])"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
    )  # fmt: skip
    child.stdout.close()  # `head` has read what it wanted
    err = child.stderr.read().decode()
    assert child.wait(timeout=120) == 0 and "Traceback" not in err and "BrokenPipe" not in err


def test_the_readme_table_says_when_a_wall_time_was_not_recorded(entries):
    """A checkpoint whose training.json has no wall time (stages exported from a saved folder)
    reads 'wall time not recorded' in the README's table, not '0 s'."""
    import dataclasses

    from zoo.commands.listing import markdown_table

    timed = next(e for e in entries if e.training.get("wall_time_s") and e.retired is None)
    untimed = dataclasses.replace(timed, training={**timed.training, "wall_time_s": None})
    assert f"{timed.training['wall_time_s']:,.0f} s" in markdown_table([timed])
    row = markdown_table([untimed])
    assert "wall time not recorded" in row and " 0 s" not in row
