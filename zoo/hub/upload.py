"""Uploading a folder to the Hugging Face Hub in one commit: ``HfApi.create_repo``,
``create_branch`` (a branch that does not exist yet) and ``upload_folder`` (to a branch, or as a
pull request), with the Hub's refusals as one-line :class:`~zoo.errors.HubError` s.

Used by ``zoo push`` (:mod:`zoo.publishing.push`, a published folder) and by every model's
``push_to_hub`` (:mod:`zoo.models.base`, a ``save_pretrained`` folder). The endpoint is read from
``HF_ENDPOINT`` at call time.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from huggingface_hub import CommitInfo, HfApi
from huggingface_hub.errors import (
    HfHubHTTPError,
    HFValidationError,
    LocalTokenNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import validate_repo_id

from zoo.errors import ConfigError, HubError
from zoo.files import contained_path
from zoo.hub.download import endpoint
from zoo.hub.refusals import refusal

__all__ = ["REPO_ID_RULE", "HubCommit", "checked_repo_id", "upload_folder"]

REPO_ID_RULE = (
    "a Hub repo id is 'namespace/name' (or 'name'): letters, digits, '-', '_' and '.', not "
    "starting or ending with '-' or '.', no '--' or '..', the name at most 96 characters"
)


def checked_repo_id(repo_id: str) -> str:
    """``repo_id`` if the Hub accepts it (huggingface_hub's own ``validate_repo_id``).

    Raises:
        ConfigError: a one-line error naming the id and the rule.
    """
    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        raise ConfigError(
            f"--repo-id {repo_id!r} is not a valid repo id: {REPO_ID_RULE} (e.g. "
            "you/transformer_lm_small.pg19mini)"
        ) from None
    return repo_id


class HubCommit(str):
    """The sha of a commit :func:`upload_folder` made (a ``str``, 40 hex digits), carrying what
    ``huggingface_hub``'s ``upload_folder`` returned: :attr:`info`, its ``CommitInfo``, and that
    object's ``commit_url``, ``pr_url``, ``pr_revision`` (``"refs/pr/N"``, a revision
    ``zoo.from_pretrained`` takes) and ``pr_num`` (``None`` unless the commit opened a pull
    request). ``str(commit)`` is the sha as a plain ``str`` (what ``yaml.safe_dump`` takes)."""

    info: CommitInfo

    def __new__(cls, info: CommitInfo) -> HubCommit:
        commit = super().__new__(cls, info.oid)
        commit.info = info
        return commit

    def __reduce__(self):  # pickled and copied with its CommitInfo
        return type(self), (self.info,)

    @property
    def commit_url(self) -> str:
        return self.info.commit_url

    @property
    def pr_url(self) -> str | None:
        return self.info.pr_url

    @property
    def pr_revision(self) -> str | None:
        return self.info.pr_revision

    @property
    def pr_num(self) -> int | None:
        return self.info.pr_num


def _refusal(e: HfHubHTTPError, repo_id: str) -> HubError:
    hint = {
        401: "No valid token was sent: set HF_TOKEN or run `hf auth login` with a write token.",
        403: f"Your token cannot write to {repo_id}: use a token with write access to "
        f"'{repo_id.split('/')[0]}', or push to your own namespace (--repo-id you/name).",
        404: f"The repository {repo_id} does not exist or is not visible to your token.",
    }
    return HubError(f"the Hub refused the push to {repo_id}: {refusal(e, hint)}")


def _checked_branch(branch: str | None, create_pr: bool) -> None:
    """A pull request goes to ``main``, as ``huggingface_hub``'s ``upload_folder`` opens it.

    Raises:
        ConfigError: ``create_pr`` with a ``branch`` other than ``main``.
    """
    if create_pr and branch not in (None, "main"):
        raise ConfigError(
            f"create_pr=True opens a pull request against main (as huggingface_hub's "
            f"upload_folder does), so it takes no branch={branch!r}: drop the branch to open a "
            "pull request, or push to the branch without create_pr."
        )


def upload_folder(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    files: Sequence[str],
    branch: str | None = None,
    create_pr: bool = False,
    private: bool = False,
    token: str | bool | None = None,
    commit_message: str,
) -> HubCommit:
    """Upload ``files`` of ``folder`` to ``repo_id`` (created if needed) in one commit; return its
    sha (a :class:`HubCommit`). ``files`` are plain names of ``folder``; those it lacks are skipped.

    ``branch`` (default ``main``) is created from ``main``'s head if the repo lacks it
    (``HfApi.create_branch``); a pull request's ref (``"refs/pr/N"``) adds a commit to that pull
    request. ``create_pr=True`` commits nothing to ``main``: it opens a pull request against it,
    as ``huggingface_hub``'s ``upload_folder`` does, and the result's ``pr_url``, ``pr_revision``
    and ``pr_num`` name it.

    Raises:
        ConfigError: ``repo_id`` is not a valid Hub repo id; ``create_pr`` with a ``branch``
            other than ``main``; UnsafePathError: one of ``files`` is a symlink (what it points
            to is never uploaded), leads outside ``folder`` or is not a regular file, named
            before anything is sent; HubError: no token, the Hub refused (no rights, ...), with
            the server's message and what to do, or a pull request ref that does not exist.
    """
    checked_repo_id(repo_id)
    _checked_branch(branch, create_pr)
    for name in files:  # the files themselves, never what a link in the folder points to
        contained_path(
            Path(folder), name, what=f"pushing {folder}", allow_links=False,
            fix="replace the link with a copy of the file (or remove it) and push again",
        )  # fmt: skip
    api = HfApi(endpoint=endpoint(), token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        if branch not in (None, "main") and not branch.startswith("refs/"):
            api.create_branch(repo_id, branch=branch, exist_ok=True)  # from main's head
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=folder,
            revision=branch,
            create_pr=create_pr,
            allow_patterns=list(files),
            commit_message=commit_message,
        )
    except LocalTokenNotFoundError:
        raise HubError(
            f"no Hugging Face token to push to {repo_id}: set HF_TOKEN or run `hf auth login`."
        ) from None
    except RevisionNotFoundError:  # refs/pr/N or refs/heads/NAME that does not exist
        raise HubError(
            f"the Hub refused the push to {repo_id}: it has no revision {branch!r}. Push to a "
            "branch by its name (created if needed), to an open pull request's refs/pr/N, or "
            "open one with create_pr=True."
        ) from None
    except HfHubHTTPError as e:
        raise _refusal(e, repo_id) from None
    return HubCommit(info)
