"""Pushing to a branch that does not exist yet, and as a pull request (issue 78, item 5), against
the local Hub server: ``model.push_to_hub``, ``zoo.publishing.push`` and ``zoo push``."""

import pytest
import torch
from published import REPO_ID

import zoo
from zoo.errors import ConfigError, HubError
from zoo.publishing import push

REPO = "someone/lm"


def tiny(seed, dtype=torch.float32):
    torch.manual_seed(seed)
    return zoo.create_model("transformer_lm_tiny").to(dtype)


def test_push_to_a_new_branch_creates_it_and_loads_back_from_it(hub):
    main = tiny(0).push_to_hub(REPO)
    dev_model = tiny(1, torch.bfloat16)
    dev = dev_model.push_to_hub(REPO, branch="dev")
    repo = hub.repos[REPO]
    assert repo.refs == {"main": main, "dev": dev}  # main is where it was
    card = repo.commits[dev]["README.md"].data.decode()
    assert "zoo.from_pretrained('someone/lm', revision='dev')" in card
    loaded = zoo.from_pretrained(REPO, revision="dev")
    assert loaded.dtype == torch.bfloat16  # as pushed
    assert torch.equal(loaded.tok_emb.weight, dev_model.tok_emb.weight)
    again = tiny(2).push_to_hub(REPO, branch="dev")  # the branch exists now: one more commit
    assert repo.refs == {"main": main, "dev": again} and again != dev
    assert zoo.from_pretrained(REPO).dtype == torch.float32  # main's


def test_a_new_repo_pushed_to_a_branch_gets_main_too(hub):
    sha = tiny(0).push_to_hub("someone/fresh", branch="feature/x")
    repo = hub.repos["someone/fresh"]
    assert set(repo.refs) == {"main", "feature/x"} and repo.refs["feature/x"] == sha
    assert set(repo.commits[repo.refs["main"]]) == {".gitattributes"}


def test_create_pr_opens_a_pull_request_and_leaves_main_alone(hub):
    first = tiny(0)
    main = first.push_to_hub(REPO)
    proposed = tiny(1, torch.bfloat16)
    pr = proposed.push_to_hub(REPO, create_pr=True, commit_message="Try bf16")
    repo = hub.repos[REPO]
    assert repo.refs["main"] == main
    assert (pr.pr_num, pr.pr_revision) == (1, "refs/pr/1") and repo.refs["refs/pr/1"] == pr
    assert pr.pr_url.endswith(f"/{REPO}/discussions/1") and pr.info.oid == pr
    (opened,) = repo.pull_requests.values()
    assert (opened.title, opened.target) == ("Try bf16", "main")
    card = repo.commits[pr]["README.md"].data.decode()
    assert "zoo.from_pretrained('someone/lm')\n" in card  # the revision once merged
    from_pr = zoo.from_pretrained(REPO, revision=pr.pr_revision)
    assert torch.equal(from_pr.tok_emb.weight, proposed.tok_emb.weight)
    assert torch.equal(zoo.from_pretrained(REPO).tok_emb.weight, first.tok_emb.weight)
    second = tiny(2).push_to_hub(REPO, create_pr=True)
    assert second.pr_revision == "refs/pr/2" and repo.refs["main"] == main
    more = tiny(3).push_to_hub(REPO, branch=pr.pr_revision)  # another commit on the first PR
    assert more.pr_url is None and repo.refs["refs/pr/1"] == more
    assert len(repo.pull_requests) == 2 and repo.refs["main"] == main


def test_what_a_push_cannot_do_is_one_line(hub):
    before = len(hub.requests)
    with pytest.raises(ConfigError, match="create_pr=True opens a pull request against main") as e:
        tiny(0).push_to_hub(REPO, branch="dev", create_pr=True)
    assert "\n" not in str(e.value) and len(hub.requests) == before  # nothing was sent
    tiny(0).push_to_hub(REPO)
    with pytest.raises(HubError, match="has no revision 'refs/pr/7'.*create_pr=True") as e:
        tiny(1).push_to_hub(REPO, branch="refs/pr/7")
    assert "\n" not in str(e.value) and set(hub.repos[REPO].refs) == {"main"}


def test_zoo_push_to_a_branch_and_as_a_pull_request(published, hub, capsys):
    from zoo.cli import main

    main(["push", str(published), "--repo-id", REPO_ID, "--branch", "dev"])
    repo = hub.repos[REPO_ID]
    assert set(repo.refs) == {"main", "dev"}
    assert "model.safetensors" in repo.commits[repo.refs["dev"]]
    main(["push", str(published), "--repo-id", REPO_ID, "--create-pr"])
    out = capsys.readouterr().out
    assert f"as pull request {hub.url}/{REPO_ID}/discussions/1 (refs/pr/1)" in out
    assert "model.safetensors" not in repo.commits[repo.refs["main"]]
    sha = push(published, REPO_ID, branch="dev")
    assert repo.refs["dev"] == sha and sha.pr_url is None
