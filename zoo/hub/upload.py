"""Uploading a folder to the Hugging Face Hub in one commit: ``HfApi.create_repo`` and
``upload_folder``, with the Hub's refusals as one-line :class:`~zoo.errors.HubError` s.

Used by ``zoo push`` (:mod:`zoo.publishing.push`, a published folder) and by every model's
``push_to_hub`` (:mod:`zoo.models.base`, a ``save_pretrained`` folder). The endpoint is read from
``HF_ENDPOINT`` at call time.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError, HFValidationError, LocalTokenNotFoundError
from huggingface_hub.utils import validate_repo_id

from zoo.errors import ConfigError, HubError
from zoo.files import contained_path
from zoo.hub.download import endpoint
from zoo.hub.refusals import refusal

__all__ = ["REPO_ID_RULE", "checked_repo_id", "upload_folder"]

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


def _refusal(e: HfHubHTTPError, repo_id: str) -> HubError:
    hint = {
        401: "No valid token was sent: set HF_TOKEN or run `hf auth login` with a write token.",
        403: f"Your token cannot write to {repo_id}: use a token with write access to "
        f"'{repo_id.split('/')[0]}', or push to your own namespace (--repo-id you/name).",
        404: f"The repository {repo_id} does not exist or is not visible to your token.",
    }
    return HubError(f"the Hub refused the push to {repo_id}: {refusal(e, hint)}")


def upload_folder(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    files: Sequence[str],
    branch: str | None = None,
    private: bool = False,
    token: str | bool | None = None,
    commit_message: str,
) -> str:
    """Upload ``files`` of ``folder`` to ``repo_id`` (created if needed) in one commit; return its
    sha. ``files`` are plain names of ``folder``; those it lacks are skipped.

    Raises:
        ConfigError: ``repo_id`` is not a valid Hub repo id; UnsafePathError: one of ``files``
            is a symlink (what it points to is never uploaded), leads outside ``folder`` or is
            not a regular file, named before anything is sent; HubError: no token, or the Hub
            refused (no rights, ...), with the server's message and what to do.
    """
    checked_repo_id(repo_id)
    for name in files:  # the files themselves, never what a link in the folder points to
        contained_path(
            Path(folder), name, what=f"pushing {folder}", allow_links=False,
            fix="replace the link with a copy of the file (or remove it) and push again",
        )  # fmt: skip
    api = HfApi(endpoint=endpoint(), token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=folder,
            revision=branch,
            allow_patterns=list(files),
            commit_message=commit_message,
        )
    except LocalTokenNotFoundError:
        raise HubError(
            f"no Hugging Face token to push to {repo_id}: set HF_TOKEN or run `hf auth login`."
        ) from None
    except HfHubHTTPError as e:
        raise _refusal(e, repo_id) from None
    return info.oid
