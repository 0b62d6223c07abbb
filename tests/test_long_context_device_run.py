"""experiments/long_context/device_run.py: train, measure and pack each recipe's run in one command on a
lent GPU. Here `zoo fit` is replaced by a stand-in that leaves a tiny run, as fit would."""

import json
import tarfile
from pathlib import Path

import pytest
from fakes import fake_run, pg19mini_test_books, recipe_module
from safetensors import safe_open

device_run = recipe_module("experiments/long_context/device_run.py")


def _recipe(path: Path, run: Path) -> Path:
    path.write_text(f"seed_everything: 0\ntrainer:\n  default_root_dir: {run}\n")
    return path


def _unpack(out: Path, name: str, dest: Path) -> Path:
    pieces = sorted(out.glob(f"{name}.tar.*"))
    dest.mkdir(parents=True, exist_ok=True)
    joined = dest / f"{name}.tar"
    joined.write_bytes(b"".join(p.read_bytes() for p in pieces))
    with tarfile.open(joined) as tar:
        tar.extractall(dest, filter="data")
    return dest / name


@pytest.fixture
def fit(monkeypatch):
    """`zoo fit` as a stand-in: a run with a tiny best.ckpt (or exit 1 for a recipe named bad*)."""
    calls = []

    def call(cmd, stdout=None, stderr=None):
        recipe = Path(cmd[cmd.index("--config") + 1])
        calls.append(cmd)
        stdout.write(f"fitting {recipe.name}\n")
        if recipe.name.startswith("bad"):
            return 1
        fake_run(device_run.run_dir_of(recipe))
        return 0

    monkeypatch.setattr(device_run.subprocess, "call", call)
    return calls


def test_trains_measures_saves_bf16_and_packs_each_run(tmp_path, monkeypatch, fit):
    monkeypatch.setenv("ZOO_DATA_DIR", str(pg19mini_test_books(tmp_path / "data", (600, 400, 50))))
    monkeypatch.chdir(tmp_path)
    a = _recipe(tmp_path / "a.yaml", Path("runs/a"))
    b = _recipe(tmp_path / "b.yaml", Path("runs/b"))
    out = tmp_path / "out"
    device_run.main([str(a), f"{b}:no-weights", "--out", str(out), "--block-spacing", "320",
                     "--windows", "2", "--piece-mb", "1", "--", "--seed_everything", "1"])  # fmt: skip

    assert [c[c.index("--config") + 1 :] for c in fit] == [
        [str(a), "--seed_everything", "1"],
        [str(b), "--seed_everything", "1"],
    ]
    run_a = _unpack(out, "a", tmp_path / "back")
    results = json.loads((run_a / "results.json").read_text())
    assert [(m["split"], m["windows"]) for m in results] == [("test", 2)]  # no valid books here
    assert (run_a / "by_position" / "by_position.json").is_file()
    profile = json.loads((run_a / "by_context" / "by_context.json").read_text())
    assert profile["block_spacing"] == 320 and profile["blocks"] == 2
    assert (run_a / "fit.log").read_text() == "fitting a.yaml\n"
    with safe_open(run_a / "model" / "model.safetensors", "pt") as f:
        assert {str(f.get_tensor(k).dtype) for k in f.keys()} == {"torch.bfloat16"}
    facts = json.loads((run_a / "model" / "training.json").read_text())
    assert facts["optimizer_steps"] == 3 and facts["checkpoint"] == "best.ckpt"

    run_b = _unpack(out, "b", tmp_path / "back")
    assert not (run_b / "model").exists()  # :no-weights
    assert (run_b / "results.json").is_file()
    log = (out / "device_run.log").read_text()
    assert (
        "--split valid --out runs/a/results.json --windows 2: exit 2: zoo: error: pg19mini" in log
    )
    assert "evaluate --split test --by-position" in log  # a failed measurement, then the next
    assert not (out / "a").exists() and not (out / "b").exists()  # only the pieces are left


def test_a_failed_fit_returns_its_log_and_the_deadline_skips_the_rest(tmp_path, monkeypatch, fit):
    monkeypatch.chdir(tmp_path)
    bad = _recipe(tmp_path / "bad.yaml", Path("runs/bad"))
    out = tmp_path / "out"
    device_run.main([str(bad), "--out", str(out)])
    run = _unpack(out, "bad", tmp_path / "back")
    assert (run / "fit.log").read_text() == "fitting bad.yaml\n"
    assert "exit 1" in (out / "device_run.log").read_text()

    late = _recipe(tmp_path / "late.yaml", Path("runs/late"))
    device_run.main([str(late), "--out", str(out), "--deadline", "-1"])
    assert len(fit) == 1
    assert "late.yaml: skipped, past the deadline" in (out / "device_run.log").read_text()


def test_pack_splits_into_pieces_that_join_back(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    data = bytes(range(256)) * (10 << 10)  # 2.5 MiB
    (folder / "weights.bin").write_bytes(data)
    pieces = device_run.pack(folder, 1)
    assert [p.name for p in pieces] == ["run.tar.000", "run.tar.001", "run.tar.002"]
    assert all(p.stat().st_size <= 1 << 20 for p in pieces)
    assert (_unpack(tmp_path, "run", tmp_path / "back") / "weights.bin").read_bytes() == data
