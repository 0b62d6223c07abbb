"""Files stay in their folder (issue 77, item 2): every file name taken from data (a manifest, the
registry, a Hub repo, a command-line name) is checked by :func:`zoo.files.contained_path` before
anything is opened, hashed, uploaded or deleted.

Each test plants one attack beside a sentinel file outside the folder and asserts that the
sentinel is neither read (its sha256 appears nowhere; ``sha256_file`` is never asked for it),
written nor deleted, and that the refusal is one line (``zoo: error: ...`` for a command)."""

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import signal
import stat
from pathlib import Path

import huggingface_hub.constants as hf_constants
import pytest
import torch
import yaml
from fakes import fake_run
from published import NAME, REPO, REPO_ID

import zoo
from zoo.cli import main
from zoo.errors import ConfigError, RegistryError, UnsafePathError
from zoo.files import contained_path
from zoo.hub import fetch, load_registry, pull
from zoo.hub.cache import evict
from zoo.publishing import export_run, pin_revision, push

SENTINEL = b"outside the folder: never read, written or deleted\n"
SENTINEL_SHA = hashlib.sha256(SENTINEL).hexdigest()
RECIPE = REPO / "recipes/transformer_lm/pg19mini.yaml"


@pytest.fixture
def outside(tmp_path) -> Path:
    """A file outside every folder under test; checked untouched after each test."""
    folder = tmp_path / "outside"
    folder.mkdir()
    sentinel = folder / "sentinel.txt"
    sentinel.write_bytes(SENTINEL)
    yield sentinel
    assert sentinel.is_file() and not sentinel.is_symlink(), "the sentinel was deleted"
    assert sentinel.read_bytes() == SENTINEL, "the sentinel was written"
    assert sorted(folder.iterdir()) == [sentinel], "a file was written beside the sentinel"


@pytest.fixture
def hashed(monkeypatch, outside) -> list[str]:
    """The files the zoo hashed. Hashing a file outside (the sentinel, /proc, /etc) or one that
    is not a regular file (a FIFO: it would block) fails the test at once instead."""
    import importlib

    modules = ("zoo.files", "zoo.hub.download", "zoo.publishing.export", "zoo.publishing.push")
    original, seen = importlib.import_module("zoo.files").sha256_file, []

    def guarded(path, *args, **kwargs):
        real = os.path.realpath(path)
        assert not real.startswith((str(outside.parent), "/proc", "/sys", "/etc")), real
        assert stat.S_ISREG(os.stat(path).st_mode), f"{path} is not a regular file"
        seen.append(real)
        return original(path, *args, **kwargs)

    for module in modules:
        monkeypatch.setattr(importlib.import_module(module), "sha256_file", guarded)
    return seen


@contextlib.contextmanager
def deadline(seconds: int = 20):
    """Fail instead of hanging (a FIFO or /proc/self/pagemap opened by mistake)."""

    def expired(*_):
        raise TimeoutError(f"blocked for {seconds} s: a special file was opened")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def one_line(err: BaseException) -> str:
    text = str(err)
    assert text and "\n" not in text, text
    assert SENTINEL_SHA not in text
    return text


def cli_error(capsys, *args: str) -> str:
    """Run ``zoo ARGS``; its stderr must be one ``zoo[ COMMAND]: error:`` line, exit status 2."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as e, deadline():
        main(list(args))
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert e.value.code == 2, captured
    assert len(err.splitlines()) == 1 and re.match(r"zoo( \w+)?: error: ", err), err
    assert "Traceback" not in err and SENTINEL_SHA not in captured.out + err
    return err


@pytest.fixture
def saved(tmp_path) -> Path:
    """A tiny model written by save_pretrained, with its manifest."""
    torch.manual_seed(0)
    return zoo.create_model("transformer_lm_tiny").save_pretrained(tmp_path / "model")


def edit_manifest(folder: Path, **names: str) -> None:
    manifest = folder / "manifest.json"
    data = json.loads(manifest.read_text())
    data["sha256"].update(names)
    manifest.write_text(json.dumps(data))


# --- the helper ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, problem",
    [
        ("", "is not a file name"),
        ("/etc/passwd", "is an absolute path"),
        ("~/.ssh/id_rsa", "is an absolute path"),
        ("../outside/sentinel.txt", "climbs out"),
        ("sub/../../outside/sentinel.txt", "climbs out"),
        ("..\\outside\\sentinel.txt", "'\\\\'"),
        ("C:/Windows/win.ini", "drive letter"),
        ("config.json\n/etc/passwd", "control character"),
    ],
)
def test_contained_path_refuses_a_name_without_looking_at_the_disk(tmp_path, name, problem):
    (tmp_path / "folder").mkdir()
    with pytest.raises(UnsafePathError, match=problem) as err:
        contained_path(tmp_path / "folder", name, what="test.json, key 'files'", fix="fix it")
    text = one_line(err.value)
    assert text.startswith("test.json, key 'files': ") and text.endswith("; fix it.")


def test_contained_path_refuses_links_leading_out_and_special_files(tmp_path, outside):
    folder = tmp_path / "folder"
    (folder / "sub").mkdir(parents=True)
    (folder / "out").symlink_to(outside)
    (folder / "dir_out").symlink_to(outside.parent, target_is_directory=True)
    (folder / "proc").symlink_to("/proc/self/pagemap")
    (folder / "in").symlink_to("sub/file")
    (folder / "sub" / "file").write_text("ok")
    os.mkfifo(folder / "fifo")
    for name, problem in [
        ("out", "symlink leading outside"),
        ("dir_out/sentinel.txt", "symlink leading outside"),  # a link on the way
        ("dir_out/no_such_file", "symlink leading outside"),  # the same, whether it exists or not
        ("proc", "symlink leading outside"),
        ("fifo", "not a regular file"),
        ("sub", "not a regular file"),
    ]:
        with pytest.raises(UnsafePathError, match=problem) as err:
            contained_path(folder, name, what="test")
        one_line(err.value)
    assert contained_path(folder, "in", what="test") == folder / "in"  # a link that stays inside
    with pytest.raises(UnsafePathError, match="is a symlink"):
        contained_path(folder, "in", what="test", allow_links=False)
    assert contained_path(folder, "missing.json", what="test") == folder / "missing.json"


def test_a_refusal_never_tells_whether_a_path_outside_exists(tmp_path, outside):
    def message(name: str) -> str:
        with pytest.raises(UnsafePathError) as err:
            contained_path(tmp_path / "folder", name, what="test")
        return str(err.value).replace(name, "NAME")

    assert message(str(outside)) == message(str(outside.parent / "no_such_file"))
    assert message("../outside/sentinel.txt") == message("../outside/no_such_file")


def test_hf_cache_snapshot_links_may_lead_into_their_repo_blobs_only(tmp_path, outside):
    repo = tmp_path / "hub" / "models--ns--name"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "abc").write_text("{}")
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to("../../blobs/abc")
    (snapshot / "model.safetensors").symlink_to(outside)
    assert contained_path(snapshot, "config.json", what="cache") == snapshot / "config.json"
    with pytest.raises(UnsafePathError, match="symlink leading outside"):
        contained_path(snapshot, "model.safetensors", what="cache")


# --- manifests: a local folder and a Hub repo ----------------------------------------------------

OUTSIDE_NAMES = [
    "../outside/sentinel.txt",
    "{outside}",  # the sentinel's absolute path
    "/etc/passwd",
    "/proc/self/pagemap",  # read, it never ends
    "sub/../../outside/sentinel.txt",
    "..\\outside\\sentinel.txt",
]


@pytest.mark.parametrize("name", OUTSIDE_NAMES)
def test_a_manifest_naming_a_file_outside_is_refused_before_hashing(saved, outside, hashed, name):
    name = name.format(outside=outside)
    edit_manifest(saved, **{name: "0" * 64})
    with pytest.raises(UnsafePathError) as err, deadline():
        zoo.from_pretrained(saved)
    text = one_line(err.value)
    assert f"{saved / 'manifest.json'}, key 'sha256': {name!r}" in text
    assert hashed == []  # every name is checked before any file is hashed


def test_a_manifest_naming_a_path_outside_is_one_line_from_the_command(saved, outside, capsys):
    edit_manifest(saved, **{"../outside/sentinel.txt": "0" * 64})
    err = cli_error(capsys, "generate", "--checkpoint", str(saved), "--prompt", "a")
    assert "'../outside/sentinel.txt' climbs out of" in err


@pytest.mark.parametrize("target", ["copy", "/proc/self/pagemap"])
def test_a_saved_file_linked_outside_the_folder_is_refused(saved, outside, hashed, target):
    weights = saved / "model.safetensors"
    if target == "copy":  # the very weights the manifest records, but read from outside
        target = outside.parent / "weights.safetensors"
        shutil.move(weights, target)
    else:
        weights.unlink()
    weights.symlink_to(target)
    with pytest.raises(
        UnsafePathError, match="model.safetensors is a symlink leading outside"
    ) as e:
        with deadline():
            zoo.from_pretrained(saved)
    one_line(e.value)
    if isinstance(target, Path):
        target.unlink()  # leave only the sentinel outside


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "extra.bin"])
def test_a_fifo_in_a_saved_folder_is_refused_without_blocking(saved, hashed, name):
    if name != "extra.bin":
        (saved / name).unlink()
    else:
        edit_manifest(saved, **{name: "0" * 64})
    os.mkfifo(saved / name)
    with pytest.raises(UnsafePathError, match=f"{name} is not a regular file") as err:
        with deadline():
            zoo.from_pretrained(saved)
    one_line(err.value)


@pytest.mark.parametrize("name", ["relative", "{outside}", "/proc/self/pagemap"])
def test_a_hub_repo_whose_manifest_names_a_file_outside_is_refused(
    hub, saved, outside, hashed, tmp_path, name
):
    from zoo.hub.upload import upload_folder

    snapshot = tmp_path / "hf_home" / "hub" / "models--evil--model" / "snapshots" / ("0" * 40)
    if name == "relative":  # from the snapshot the client writes, up to the sentinel
        name = os.path.relpath(outside, snapshot)
    name = name.format(outside=outside)
    edit_manifest(saved, **{name: "0" * 64})
    upload_folder(saved, "evil/model", files=["config.json", "model.safetensors", "manifest.json"],
                  commit_message="a manifest that names a file outside")  # fmt: skip
    with pytest.raises(UnsafePathError) as err, deadline():
        zoo.from_pretrained("evil/model")
    text = one_line(err.value)
    assert f"manifest.json, key 'sha256': {name!r}" in text and "models--evil--model" in text
    assert hashed == []


# --- the registry --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "edit, shown",
    [
        (lambda e: e["files"].update({"../../outside/sentinel.txt": e["files"]["config.json"]}),
         "files names '../../outside/sentinel.txt', which is not a plain file name"),
        (lambda e: e["files"].update({"/etc/passwd": e["files"]["config.json"]}),
         "files names '/etc/passwd', which is not a plain file name"),
        (lambda e: e["files"].update({"sub/config.json": e["files"]["config.json"]}),
         "files names 'sub/config.json'"),
        (lambda e: e["hub"].update(repo_id="../../outside"),
         "hub.repo_id names '../../outside', which is not a Hub repo id"),
        (lambda e: e["hub"].update(repo_id="/abs/path"), "hub.repo_id names '/abs/path'"),
        (lambda e: e["hub"].update(repo_id="ns/.."), "hub.repo_id names 'ns/..'"),
        (lambda e: e["hub"].update(repo_id="ns--x/name"), "hub.repo_id names 'ns--x/name'"),
        (lambda e: e["hub"].update(repo_id="name"), "hub.repo_id names 'name'"),
    ],
)  # fmt: skip
def test_a_registry_entry_naming_a_path_outside_is_one_line(
    published, outside, capsys, edit, shown
):
    path = load_registry().path
    data = yaml.safe_load(path.read_text())
    edit(data["checkpoints"][NAME])
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(RegistryError) as err:
        load_registry()
    assert f"checkpoints.{NAME}.{shown}" in one_line(err.value)
    assert shown in cli_error(capsys, "list")


def test_a_registry_entry_named_like_a_path_is_one_line(published, capsys):
    path = load_registry().path
    data = yaml.safe_load(path.read_text())
    data["checkpoints"]["../outside"] = data["checkpoints"].pop(NAME)
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(RegistryError, match="checkpoints names '../outside'") as err:
        load_registry()
    one_line(err.value)


def test_fetch_checks_an_entry_built_in_code_before_hashing(published, outside, hashed):
    """An entry that never went through the schema (built in code) is checked all the same."""
    registry = load_registry()
    entry = registry.get(NAME)
    name = os.path.relpath(outside, published)
    bad = dataclasses.replace(entry, files={**entry.files, name: {"sha256": "0" * 64, "size": 1}})
    with pytest.raises(UnsafePathError, match=f"checkpoints.{NAME}.files: {name!r} climbs out"):
        fetch(bad, ("config.json", name), registry=registry)
    assert hashed == []


def test_a_shipped_file_linked_outside_is_refused(published, outside, hashed):
    target = outside.parent / "weights.safetensors"
    shutil.move(published / "model.safetensors", target)
    (published / "model.safetensors").symlink_to(target)  # the registered bytes, outside
    with pytest.raises(UnsafePathError, match="model.safetensors is a symlink leading outside"):
        zoo.from_pretrained(NAME)
    target.unlink()


# --- zoo export ----------------------------------------------------------------------------------


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


@pytest.mark.parametrize(
    "name", ["../x.y", "../../escaped", "{tmp}/abs.x", "sub/x.y", "x.y/../../z", "X.Y", ""]
)
def test_zoo_export_takes_only_a_plain_published_name(registry, tmp_path, outside, capsys, name):
    run = fake_run(tmp_path / "run")
    name = name.format(tmp=tmp_path)
    before = files_under(tmp_path)
    err = cli_error(capsys, "export", str(run), "--name", name, "--recipe", str(RECIPE))
    assert f"{name!r} (--name) is not a published name" in err
    assert files_under(tmp_path) == before  # nothing written, inside checkpoints/ or outside
    with pytest.raises(ConfigError, match="is not a published name") as e:
        export_run(run, tmp_path / "out", name=name, recipe=RECIPE, metrics=[])
    one_line(e.value)
    assert files_under(tmp_path) == before


def test_zoo_export_never_writes_through_a_link_out_of_checkpoints(registry, tmp_path, outside,
                                                                   capsys):  # fmt: skip
    run = fake_run(tmp_path / "run")
    registry.shipped_dir.mkdir(exist_ok=True)
    (registry.shipped_dir / NAME).symlink_to(outside.parent, target_is_directory=True)
    err = cli_error(capsys, "export", str(run), "--name", NAME, "--recipe", str(RECIPE))
    assert f"zoo export --name {NAME}: " in err and "symlink leading outside" in err


def test_export_never_writes_through_a_link_in_the_output_folder(registry, tmp_path, outside):
    run = fake_run(tmp_path / "run")
    out = tmp_path / "exported"
    out.mkdir()
    (out / "README.md").symlink_to(outside)  # the card would be written over the sentinel
    with pytest.raises(UnsafePathError, match="README.md is a symlink") as err:
        export_run(run, out, name=NAME, recipe=RECIPE, metrics=[])
    one_line(err.value)
    assert sorted(p.name for p in out.iterdir()) == ["README.md"]


# --- zoo push ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["outside", "inside", "fifo"])
def test_push_uploads_only_regular_files_never_what_a_link_points_to(
    published, hub, outside, capsys, kind
):
    recipe = published / "recipe.yaml"
    recipe.unlink()
    if kind == "outside":
        recipe.symlink_to(outside)
    elif kind == "inside":  # even a link that stays inside: the Hub gets files, not links
        recipe.symlink_to("README.md")
    else:
        os.mkfifo(recipe)
    problem = "is not a regular file" if kind == "fifo" else "is a symlink"
    with pytest.raises(UnsafePathError, match=f"recipe.yaml {problem}") as err, deadline():
        push(published, REPO_ID)
    assert one_line(err.value).startswith(f"pushing {published}: ")
    err = cli_error(capsys, "push", str(published), "--repo-id", REPO_ID)
    assert f"{published / 'recipe.yaml'} {problem}" in err
    assert REPO_ID not in hub.repos  # nothing was sent
    assert not any(SENTINEL in b.data for r in hub.repos.values() for c in r.commits.values()
                   for b in c.values())  # fmt: skip


# --- evicting a bad file from the Hub cache ------------------------------------------------------


@pytest.fixture
def cache_repo(tmp_path) -> Path:
    repo = tmp_path / "hub" / "models--ns--name"
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / ("0" * 40)).mkdir(parents=True)
    return repo


def test_evict_removes_the_link_and_its_blob_in_the_repo_cache(cache_repo):
    (cache_repo / "blobs" / "abc").write_bytes(b"bad")
    link = cache_repo / "snapshots" / ("0" * 40) / "model.safetensors"
    link.symlink_to("../../blobs/abc")
    evict(link)
    assert not os.path.lexists(link) and not os.path.lexists(cache_repo / "blobs" / "abc")


@pytest.mark.parametrize("layout", ["snapshot link out", "blob link out", "blobs folder linked"])
def test_evict_never_follows_a_link_out_of_the_cache(cache_repo, outside, layout):
    link = cache_repo / "snapshots" / ("0" * 40) / "model.safetensors"
    if layout == "snapshot link out":
        link.symlink_to(outside)
    elif layout == "blob link out":
        (cache_repo / "blobs" / "abc").symlink_to(outside)
        link.symlink_to("../../blobs/abc")
    else:  # blobs/ itself leads out: the blob "blobs/sentinel.txt" is the sentinel
        (cache_repo / "blobs").rmdir()
        (cache_repo / "blobs").symlink_to(outside.parent, target_is_directory=True)
        link.symlink_to(f"../../blobs/{outside.name}")
    evict(link)
    assert not os.path.lexists(link)  # the bad entry is gone; the sentinel is checked by `outside`
    if layout == "blob link out":
        assert not os.path.lexists(cache_repo / "blobs" / "abc")  # the link, not its target


@pytest.mark.parametrize("planted", ["snapshot", "blob"])
def test_a_cached_file_linked_outside_is_neither_hashed_nor_deleted(
    published, hub, outside, hashed, planted
):
    sha = push(published, REPO_ID)
    pin_revision(published, REPO_ID, sha)
    pull(NAME)  # every file in the HF cache
    hashed.clear()
    shutil.rmtree(published)  # no shipped copy: the cache is used
    link = (Path(hf_constants.HF_HUB_CACHE) / f"models--{REPO_ID.replace('/', '--')}" / "snapshots"
            / sha / "model.safetensors")  # fmt: skip
    if planted == "snapshot":
        link.unlink()
        link.symlink_to(outside)
    else:
        blob = link.resolve()
        blob.unlink()
        blob.symlink_to(outside)
    with pytest.raises(UnsafePathError, match="model.safetensors is a symlink leading out") as err:
        zoo.from_pretrained(NAME)
    assert "the link was removed from the cache" in one_line(err.value)
    assert not os.path.lexists(link)
    assert all("model.safetensors" not in h for h in hashed)
