"""The zoo as a user installs it: a wheel built from this checkout, used from a directory that is
not the clone. The registry and the recipes ship inside the package; `zoo list`,
`from_pretrained(<published name>)` through the local Hub server, and `zoo fit --config
<packaged recipe>` work with no clone."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from zoo.publishing import push

REPO = Path(__file__).resolve().parents[1]
NAME = "transformer_lm_small.pg19mini"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of a copy of this checkout (the build leaves build/ and egg-info in the copy)."""
    src = tmp_path_factory.mktemp("src") / "attention-zoo"
    ignore = shutil.ignore_patterns(".venv", ".git", "runs", "checkpoints", "build", "*.egg-info",
                                    "__pycache__", ".bench-pkgs", "lightning_logs")  # fmt: skip
    shutil.copytree(REPO, src, symlinks=True, ignore=ignore)
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(src)],
        check=True, capture_output=True,
    )  # fmt: skip
    return next(out.glob("attention_zoo-*.whl"))


@pytest.fixture(scope="module")
def site(wheel, tmp_path_factory) -> Path:
    """The wheel unpacked: what pip puts in site-packages."""
    site = tmp_path_factory.mktemp("site")
    zipfile.ZipFile(wheel).extractall(site)
    return site


def run_installed(site: Path, cwd: Path, code: str) -> subprocess.CompletedProcess:
    """``python -c code`` with the unpacked wheel first on the path, outside the clone."""
    env = dict(os.environ, PYTHONPATH=str(site), OMP_NUM_THREADS="1")
    env.pop("ZOO_CHECKPOINTS", None)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_the_wheel_holds_the_registry_and_the_recipes_but_no_weights(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    packaged = zipfile.ZipFile(wheel).read("zoo/checkpoints.yaml")
    assert packaged == (REPO / "checkpoints.yaml").read_bytes()  # a copy of the one source
    registry = yaml.safe_load(packaged)["checkpoints"]
    for entry in registry.values():
        assert "zoo/" + entry["recipe"] in names  # every published model's recipe
    recipes = {n for n in names if n.startswith("zoo/recipes/")}
    assert recipes == {
        "zoo/" + str(p.relative_to(REPO)) for p in (REPO / "recipes").glob("*/*.yaml")
    }
    assert not [n for n in names if n.endswith((".safetensors", ".ckpt"))]
    # the benchmarks stay in the clone's benchmarks/ (python -m benchmarks.<name>)
    assert not [n for n in names if n.startswith(("benchmarks/", "zoo/kernels/bench"))]
    assert [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]  # Apache-2.0


def test_zoo_list_works_from_the_wheel(site, tmp_path):
    done = run_installed(
        site, tmp_path, "import zoo, zoo.cli; print(zoo.__file__); zoo.cli.main(['list'])"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith(str(site))  # not the clone's zoo
    assert NAME in done.stdout


def test_from_pretrained_a_published_name_through_the_hub(site, tmp_path, hub, monkeypatch):
    """No shipped copy in a wheel: the weights come from the Hub, checked against the packaged
    registry's sha256 (the entry is not pinned to a revision yet: the default branch)."""
    monkeypatch.delenv("ZOO_CHECKPOINTS", raising=False)
    push(REPO / "checkpoints" / NAME, f"attention-zoo/{NAME}")
    code = (
        "import torch, zoo\n"
        f"m = zoo.from_pretrained({NAME!r})\n"
        "x = torch.tensor([list(b'It was a cold night')])\n"
        "print(type(m).__name__, m.config.d_model, float(m(x).logits[0, -1].logsumexp(-1)))\n"
    )
    done = run_installed(site, tmp_path, code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("TransformerLM 256 ")
    # a tampered file on the Hub is refused by the packaged registry's sha256
    folder = tmp_path / "tampered"
    shutil.copytree(REPO / "checkpoints" / NAME, folder)
    (folder / "config.json").write_text(
        (folder / "config.json").read_text().replace("256", "255", 1)
    )
    push(folder, f"attention-zoo/{NAME}")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "fresh_hf_home"))
    done = run_installed(
        site, tmp_path, code.replace("import torch, zoo", "import torch, zoo, zoo.cli")
    )
    assert done.returncode != 0
    assert "checksum mismatch" in done.stderr


def test_zoo_fit_takes_a_packaged_recipe_by_name(site, tmp_path, data_dir):
    done = run_installed(
        site, tmp_path,
        "import zoo.cli; zoo.cli.main(['fit', '--config', 'transformer_lm_small.pg19mini', "
        "'--trainer.max_steps', '1', '--trainer.limit_val_batches', '0', "
        "'--trainer.enable_progress_bar', 'false', '--data.init_args.batch_size', '2'])",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    # the published checkpoint's recipe, by the checkpoint's name, writes where that recipe says
    assert list((tmp_path / "runs" / "transformer_lm" / "pg19mini_v3").rglob("*.ckpt"))
    done = run_installed(
        site,
        tmp_path,
        "import zoo.cli; zoo.cli.main(['fit', '--config', 'transformer_lm/pg19minix'])",
    )
    assert done.returncode == 2
    assert (
        "no packaged recipe of that name. Did you mean 'transformer_lm/pg19mini'" in done.stderr
    )
