"""The local Hub-compatible server, driven by the official huggingface_hub client (push and pull
round trips as they would go through the Hub)."""

import os

import pytest
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, RepositoryNotFoundError


def test_push_then_pull_round_trip(hub, tmp_path):
    api = HfApi(endpoint=hub.url, token="test-token")
    url = api.create_repo("zoo/tiny", exist_ok=True)
    assert "zoo/tiny" in str(url)
    api.create_repo("zoo/tiny", exist_ok=True)  # exists: still fine
    folder = tmp_path / "push"
    folder.mkdir()
    (folder / "config.json").write_text('{"d_model": 8}')
    weights = bytes(range(256)) * 64  # binary -> LFS
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "README.md").write_text("---\nlibrary_name: attention-zoo\n---\n# tiny\n")
    first = api.upload_folder(repo_id="zoo/tiny", folder_path=folder)
    sha1 = first.oid
    assert hub.repos["zoo/tiny"].commits[sha1]["model.safetensors"].lfs
    assert not hub.repos["zoo/tiny"].commits[sha1]["config.json"].lfs

    info = api.model_info("zoo/tiny")
    assert info.sha == sha1
    assert {s.rfilename for s in info.siblings} >= {"config.json", "model.safetensors"}
    path = hf_hub_download(
        "zoo/tiny", "model.safetensors", cache_dir=tmp_path / "cache", endpoint=hub.url
    )
    assert open(path, "rb").read() == weights

    (folder / "config.json").write_text('{"d_model": 16}')
    second = api.upload_folder(repo_id="zoo/tiny", folder_path=folder)
    assert second.oid != sha1
    old = hf_hub_download(
        "zoo/tiny", "config.json", revision=sha1, cache_dir=tmp_path / "c2", endpoint=hub.url
    )
    assert open(old).read() == '{"d_model": 8}'  # pinned revisions keep resolving
    snap = snapshot_download("zoo/tiny", cache_dir=tmp_path / "c3", endpoint=hub.url)
    assert open(os.path.join(snap, "config.json")).read() == '{"d_model": 16}'
    assert sorted(api.list_repo_files("zoo/tiny")) == [
        ".gitattributes", "README.md", "config.json", "model.safetensors"
    ]  # fmt: skip


def test_errors_carry_the_hub_codes(hub, tmp_path):
    api = HfApi(endpoint=hub.url, token="test-token")
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("zoo/missing")
    api.create_repo("zoo/tiny")
    with pytest.raises(EntryNotFoundError):
        hf_hub_download("zoo/tiny", "nope.bin", cache_dir=tmp_path / "cache", endpoint=hub.url)
    hub.fail_next["commit"] = 500  # an interrupted push leaves the branch where it was
    head = api.model_info("zoo/tiny").sha
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(HfHubHTTPError):
        api.upload_file(
            path_or_fileobj=tmp_path / "f.txt", path_in_repo="f.txt", repo_id="zoo/tiny"
        )
    assert api.model_info("zoo/tiny").sha == head


def test_branches_and_pull_requests_as_the_client_makes_them(hub, tmp_path):
    from huggingface_hub import CommitOperationAdd

    api = HfApi(endpoint=hub.url, token="test-token")
    api.create_repo("zoo/tiny")
    main = api.model_info("zoo/tiny").sha
    api.create_branch("zoo/tiny", branch="dev")
    with pytest.raises(HfHubHTTPError) as err:
        api.create_branch("zoo/tiny", branch="dev")  # exists
    assert err.value.response.status_code == 409
    api.create_branch("zoo/tiny", branch="dev", exist_ok=True)
    with pytest.raises(HfHubHTTPError):
        api.create_branch("zoo/tiny", branch="refs/pr/1")  # not a branch name
    with pytest.raises(HfHubHTTPError) as err:
        HfApi(endpoint=hub.url, token="nobody").create_branch("zoo/tiny", branch="x")
    assert err.value.response.status_code == 401
    add = CommitOperationAdd("a.txt", b"on dev")
    dev = api.create_commit("zoo/tiny", [add], commit_message="dev", revision="dev").oid
    refs = api.list_repo_refs("zoo/tiny", include_pull_requests=True)
    assert {b.name: b.target_commit for b in refs.branches} == {"main": main, "dev": dev}
    assert refs.pull_requests == []

    add = CommitOperationAdd("a.txt", b"proposed")
    pr = api.create_commit("zoo/tiny", [add], commit_message="Propose", create_pr=True)
    assert (pr.pr_num, pr.pr_revision) == (1, "refs/pr/1")
    assert api.model_info("zoo/tiny").sha == main  # main is unchanged
    assert hub.repos["zoo/tiny"].pull_requests[1].title == "Propose"
    path = hf_hub_download("zoo/tiny", "a.txt", revision="refs/pr/1", cache_dir=tmp_path / "c",
                           endpoint=hub.url)  # fmt: skip
    assert open(path).read() == "proposed"
    refs = api.list_repo_refs("zoo/tiny", include_pull_requests=True)
    assert [(p.ref, p.target_commit) for p in refs.pull_requests] == [("refs/pr/1", pr.oid)]
    with pytest.raises(HfHubHTTPError):  # a pull request opens against a branch, not a commit
        api.create_commit("zoo/tiny", [CommitOperationAdd("b.txt", b"x")], commit_message="x",
                          revision=dev, create_pr=True)  # fmt: skip
