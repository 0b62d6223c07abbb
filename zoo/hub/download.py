"""Finding a checkpoint's files: the shipped copy, the Hugging Face cache, or the Hub; always verified.

For a registry name, every file is checked against the sha256 of ``checkpoints.yaml``:

1. the copy shipped in the repository (``checkpoints/<name>/``) is used when all its files match;
2. otherwise each file comes through ``hf_hub_download`` at the pinned revision, which uses the
   Hugging Face cache (``HF_HOME``), resumes interrupted downloads from the ``.incomplete`` file it
   keeps, and respects ``HF_HUB_OFFLINE``. A downloaded file that fails the check is removed from
   the cache and a :class:`~zoo.errors.ChecksumError` names it and both hashes. A file not cached
   on a machine that cannot connect to the Hub is a :class:`~zoo.errors.HubError` at once
   (:func:`connect_problem`), not after the client's retries.

A Hub repo id that is not in the registry is downloaded with ``snapshot_download`` and not verified
(there is nothing to verify against). The Hub endpoint is read from ``HF_ENDPOINT`` at call time.
A retired entry loads like any other, with one :class:`~zoo.errors.RetiredCheckpointWarning` per
load or pull (:func:`warn_if_retired`).
"""

from __future__ import annotations

import os
import socket
import urllib.parse
import warnings
from collections.abc import Iterable
from pathlib import Path

import httpx2  # the HTTP client huggingface_hub uses
from huggingface_hub import constants, hf_hub_download, snapshot_download, try_to_load_from_cache
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from zoo.errors import (
    ChecksumError,
    ConfigError,
    HubError,
    RetiredCheckpointWarning,
    UnknownModelError,
)
from zoo.files import explicit_path, sha256_file
from zoo.hub.cache import checked_cached, evict
from zoo.hub.refusals import download_refusal
from zoo.hub.registry import Registry, load_registry
from zoo.hub.schema import CheckpointEntry

__all__ = [
    "LOAD_FILES",
    "OPTIONAL_FILES",
    "connect_problem",
    "fetch",
    "load_files",
    "pull",
    "resolve",
    "sha256_file",
    "warn_if_retired",
    "weights_source",
]

LOAD_FILES = ("config.json", "model.safetensors")  # what from_pretrained needs
# loaded too when a checkpoint has them: translation models' tokenizer; save_pretrained's manifest;
# the golden logits that `zoo verify` compares with (zoo.golden)
OPTIONAL_FILES = ("tokenizer.json", "manifest.json", "golden.json")


def load_files(entry: CheckpointEntry) -> tuple[str, ...]:
    """The files of ``entry`` that ``from_pretrained`` reads."""
    return LOAD_FILES + tuple(f for f in OPTIONAL_FILES if f in entry.files)


def warn_if_retired(entry: CheckpointEntry | None, stacklevel: int = 2) -> None:
    """Warn in one line, ``NAME is retired (reason); use OTHER``, when ``entry`` is retired.

    Called once per :func:`zoo.from_pretrained` of a registry name and once per :func:`pull`, not
    by :func:`resolve` (commands that resolve a name again for its other files would repeat it).
    ``stacklevel`` counts from the caller of this function, as :func:`warnings.warn`'s does.
    """
    if entry is not None and entry.retired is not None:
        warnings.warn(
            entry.retired.message(entry.name), RetiredCheckpointWarning, stacklevel=stacklevel + 1
        )


def endpoint() -> str | None:
    """``HF_ENDPOINT`` now (``huggingface_hub`` reads it once, at import)."""
    return os.environ.get("HF_ENDPOINT") or None


def _mismatches(directory: Path, entry: CheckpointEntry, files: Iterable[str]) -> dict:
    """``{file: its sha256, or None if missing}`` for the files of ``directory`` that are missing
    or differ from the registry; every name is checked before any file is hashed (raises
    UnsafePathError: :meth:`CheckpointEntry.file_in`)."""
    bad = {}
    paths = {name: entry.file_in(directory, name) for name in files}
    for name, path in paths.items():
        actual = sha256_file(path) if path.is_file() else None
        if actual != entry.files[name]["sha256"]:
            bad[name] = actual
    return bad


def weights_source(entry: CheckpointEntry, registry: Registry | None = None) -> str:
    """Where :func:`fetch` would take ``entry``'s weights from on this machine, in words.

    Raises:
        UnsafePathError: as :func:`fetch`, for a file of the shipped copy.
    """
    registry = registry or load_registry()
    shipped = registry.shipped_dir / entry.name
    if shipped.is_dir() and not _mismatches(shipped, entry, LOAD_FILES):
        return "repository copy"
    if entry.revision is None:
        return f"Hub: {entry.repo_id}, default branch (revision not pinned yet; sha256-checked)"
    try:
        hf_hub_download(
            entry.repo_id, "model.safetensors", revision=entry.revision, local_files_only=True
        )
        return f"HF cache ({entry.repo_id})"
    except LocalEntryNotFoundError:
        return f"Hub: {entry.repo_id}@{entry.revision[:7]}"


def _no_copy_hint(entry: CheckpointEntry) -> str:
    return (
        f"Restore checkpoints/{entry.name}/ from the repository (git checkout -- "
        f"checkpoints/{entry.name}), or run `zoo pull {entry.name}` where the Hub is reachable."
    )


def _offline_hint(entry: CheckpointEntry, registry: Registry, pulling: bool) -> str:
    """What to do when the Hub cannot be reached: connect, ``zoo pull`` elsewhere, or (in a clone)
    restore the shipped copy; when pulling, what the shipped copy offers.

    Only a clone ships copies (``checkpoints/`` beside ``checkpoints.yaml``); an installed wheel
    has none, so its hint never mentions one."""
    if not pulling:
        elsewhere = (
            f"run `zoo pull {entry.name}` on a machine that can reach the Hub and copy its HF "
            f"cache ({constants.HF_HUB_CACHE}) here"
        )
        if constants.HF_HUB_OFFLINE:
            hint = f"Unset HF_HUB_OFFLINE where the Hub is reachable, or {elsewhere}."
        else:
            hint = (
                f"Connect to the network, or {elsewhere}; set HF_HUB_OFFLINE=1 to fail at once "
                "instead of trying the network."
            )
        if registry.shipped_dir.is_dir():  # a clone: the repository ships verified copies
            hint += (
                f" The repository's copy {registry.shipped_dir / entry.name}/ is missing or "
                f"altered; restored (git checkout -- checkpoints/{entry.name}), it loads "
                "without network."
            )
        return hint
    shipped = registry.shipped_dir / entry.name
    if shipped.is_dir() and not _mismatches(shipped, entry, LOAD_FILES):
        return (
            f"Nothing is lost: the shipped copy {shipped} is intact, and "
            f"from_pretrained({entry.name!r}) loads it without the Hub."
        )
    return f"There is no intact shipped copy at {shipped} either; pull where the Hub is reachable."


PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
                   "all_proxy")  # fmt: skip


def connect_problem(url: str, timeout: float | None = None) -> str | None:
    """Why a TCP connection to ``url``'s host cannot be opened (``"gaierror: [Errno -2] Name or
    service not known"``), or ``None`` when it can, or when a proxy is configured (the proxy
    reaches the host, not this machine). ``timeout`` (seconds) defaults to
    ``HF_HUB_ETAG_TIMEOUT``, the client's own wait for the Hub's first answer.

    A machine without network fails here at once, instead of after the client's retries (five,
    1 + 2 + 4 + 8 + 8 s apart).
    """
    if any(os.environ.get(v) for v in PROXY_VARIABLES):
        return None
    parts = urllib.parse.urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection(
            (parts.hostname, port), timeout=timeout or constants.HF_HUB_ETAG_TIMEOUT
        ):
            return None
    except OSError as e:
        return f"{type(e).__name__}: {e}"


def _offline_reason(local_files_only: bool) -> str | None:
    """Why the Hub is not tried at all (``HF_HUB_OFFLINE``, ``local_files_only=True``), or None."""
    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE=1 is set"
    return "local_files_only=True was passed" if local_files_only else None


def _download(
    entry: CheckpointEntry, name: str, cache_dir, force_download: bool, hint: str = "", *,
    local_files_only: bool = False, token: str | bool | None = None,
) -> Path:  # fmt: skip
    cached = try_to_load_from_cache(
        entry.repo_id, name, cache_dir=cache_dir, revision=entry.revision
    )
    offline = _offline_reason(local_files_only)
    if offline is None and (force_download or not isinstance(cached, str)):
        problem = connect_problem(endpoint() or constants.ENDPOINT)
        if problem is not None:
            raise HubError(
                f"{entry.name}: {name} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) "
                f"and the Hub ({endpoint() or constants.ENDPOINT}) could not be reached "
                f"({problem}). {hint}"
            )
    try:
        return Path(
            hf_hub_download(
                entry.repo_id,
                name,
                revision=entry.revision,
                cache_dir=cache_dir,
                force_download=force_download,
                local_files_only=local_files_only,
                token=token,
                endpoint=endpoint(),
            )
        )
    except (LocalEntryNotFoundError, OfflineModeIsEnabled):
        why = offline or f"the Hub ({endpoint() or constants.ENDPOINT}) could not be reached"
        raise HubError(
            f"{entry.name}: {name} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and "
            f"{why}. {hint}"
        ) from None
    except RepositoryNotFoundError:
        raise HubError(
            f"{entry.name}: the Hub has no repository {entry.repo_id} (or it is private and your "
            "token cannot read it)."
            + ("" if entry.revision else f" It is not pushed yet. {_no_copy_hint(entry)}")
        ) from None
    except RevisionNotFoundError:
        raise HubError(
            f"{entry.name}: {entry.repo_id} has no revision {entry.revision}, the one "
            "checkpoints.yaml pins."
        ) from None
    except EntryNotFoundError:
        raise HubError(
            f"{entry.name}: {entry.repo_id}@{entry.revision or 'main'} has no file {name}."
        ) from None
    except HfHubHTTPError as e:
        raise HubError(f"{entry.name}: {download_refusal(e, name, entry.repo_id)}") from None
    except (httpx2.HTTPError, OSError) as e:  # the connection dropped and retries ran out
        raise HubError(
            f"{entry.name}: the download of {name} was interrupted ({type(e).__name__}: {e}) "
            "and the client's resumes ran out. Nothing partial was cached under the file's "
            "name: run the same command again."
        ) from None


def fetch(
    entry: CheckpointEntry,
    files: Iterable[str] = LOAD_FILES,
    *,
    registry: Registry | None = None,
    cache_dir: str | os.PathLike | None = None,
    force_download: bool = False,
    use_shipped: bool = True,
    local_files_only: bool = False,
    token: str | bool | None = None,
) -> Path:
    """A local directory holding ``files`` of ``entry``, each verified against its sha256.

    ``use_shipped=False`` skips the repository copy (``zoo pull`` fills the Hugging Face cache).
    ``local_files_only`` and ``token`` are ``hf_hub_download``'s: the shipped copy or the cache
    only, and the token to read a private repo with.

    Raises:
        ChecksumError: a downloaded file differs from the registry (it is evicted from the cache).
        HubError: the Hub refused or could not be reached and the files are not cached (offline).
        UnsafePathError: a file name of ``entry`` leads outside its folder, or a file of the
            shipped copy or the cache is a link out of it or not a regular file (a link of the
            cache is removed); nothing was hashed.
    """
    registry = registry or load_registry()
    files = tuple(files)
    unknown = [f for f in files if f not in entry.files]
    if unknown:
        raise ConfigError(f"{entry.name} has no file(s) {unknown}; it has {sorted(entry.files)}.")
    shipped = registry.shipped_dir / entry.name
    for name in files:  # before anything is hashed, or written to the cache
        entry.file_in(shipped, name)
    if use_shipped and not force_download and shipped.is_dir():
        bad = _mismatches(shipped, entry, files)
        if not bad:
            return shipped
        if entry.revision is None:  # nowhere else to get it from
            name, actual = next(iter(bad.items()))
            if actual is None:
                raise HubError(f"{shipped / name} is missing. {_no_copy_hint(entry)}")
            raise ChecksumError(
                str(shipped / name), entry.files[name]["sha256"], actual,
                hint=f"{entry.name} is not on the Hub yet. {_no_copy_hint(entry)}",
            )  # fmt: skip
        details = "; ".join(
            f"{shipped / n} (sha256 {a or 'missing'}, registered {entry.files[n]['sha256']})"
            for n, a in bad.items()
        )
        warnings.warn(
            f"the shipped copy of {entry.name} differs from checkpoints.yaml: {details}. "
            f"Using the Hub ({entry.repo_id}@{entry.revision[:7]}).",
            stacklevel=2,
        )
    # no shipped copy: the pinned revision, or (not pinned yet) the repo's default branch; every
    # file is checked against its registered sha256 either way
    directory = None
    hint = (
        "Call it without local_files_only=True where the Hub is reachable to download it."
        if local_files_only and not constants.HF_HUB_OFFLINE
        else _offline_hint(entry, registry, pulling=not use_shipped)
    )
    for name in files:
        path = _download(
            entry, name, cache_dir, force_download, hint,
            local_files_only=local_files_only, token=token,
        )  # fmt: skip
        actual = sha256_file(checked_cached(path, entry.repo_id))
        expected = entry.files[name]["sha256"]
        if actual != expected:
            evict(path)
            raise ChecksumError(
                f"{entry.repo_id}@{entry.revision or 'main'}/{name}",
                expected,
                actual,
                hint="The download was removed from the cache; try again, and report it if it "
                "persists.",
            )
        directory = path.parent
    assert directory is not None
    return directory


def pull(
    name: str,
    *,
    registry: Registry | None = None,
    cache_dir: str | os.PathLike | None = None,
    force_download: bool = False,
) -> Path:
    """Download every file of the published checkpoint ``name`` at its pinned revision into the
    Hugging Face cache, verify each, and return the snapshot directory (``zoo pull``).

    Raises:
        UnknownModelError: as :func:`fetch`.
        ChecksumError: as :func:`fetch`.
        HubError: as :func:`fetch`, and when the checkpoint has no Hub revision yet.
    """
    registry = registry or load_registry()
    entry = registry.get(name)
    warn_if_retired(entry)
    return fetch(
        entry,
        tuple(entry.files),
        registry=registry,
        cache_dir=cache_dir,
        force_download=force_download,
        use_shipped=False,
    )


def resolve(
    name_or_path: str | os.PathLike,
    revision: str | None = None,
    *,
    registry: Registry | None = None,
    cache_dir: str | os.PathLike | None = None,
    force_download: bool = False,
    local_files_only: bool = False,
    token: str | bool | None = None,
) -> tuple[Path, CheckpointEntry | None]:
    """The local directory for ``from_pretrained(name_or_path)`` and its registry entry (if any).

    ``name_or_path``: an existing directory; a registry name (``transformer_lm_small.pg19mini``, or
    the bare model name when it has one checkpoint); or a Hub repo id, ``"ns/name"`` or
    ``"ns/name@revision"``. A published repo id at its pinned revision (or none) is verified like
    its name; at another revision it is loaded as any Hub repo, unverified. ``local_files_only``
    and ``token`` are passed to huggingface_hub (:func:`fetch`).

    Raises:
        UnknownModelError: not a directory, a registry name or a repo id (close names suggested).
        ConfigError: a revision other than the pinned one requested for a registry name (the
            message says how to load it by repo id).
        ChecksumError, HubError: see :func:`fetch`.
    """
    local = explicit_path(name_or_path)
    if local is not None:
        return local, None
    text = str(name_or_path)
    name, _, at = text.partition("@")
    if at and revision and at != revision:
        raise ConfigError(f"two revisions given: {text!r} and revision={revision!r}")
    revision = at or revision
    registry = registry or load_registry()
    entry = registry.by_repo_id(name) if "/" in name else None
    if entry is not None and revision not in (None, entry.revision):
        entry = None  # another revision of a published repo: a Hub repo like any other, unverified
    if "/" not in name:
        try:
            entry = registry.get(name)  # raises UnknownModelError with suggestions
        except UnknownModelError as e:
            if Path(name).is_dir():
                raise UnknownModelError(
                    f"{e} A folder named {name!r} is here, but a bare name never loads a folder: "
                    f"pass './{name}' (or a pathlib.Path) to load it."
                ) from None
            raise
    if entry is not None:
        if revision not in (None, entry.revision):
            raise ConfigError(_pinned_message(entry, revision))
        fetched = fetch(
            entry, load_files(entry), registry=registry, cache_dir=cache_dir,
            force_download=force_download, local_files_only=local_files_only, token=token,
        )  # fmt: skip
        return fetched, entry
    if Path(name).is_dir():  # "runs/my_run": a repo id by its form, but a folder is here
        raise ConfigError(
            f"{name!r} reads as a Hub repo id, and a folder of that name is here: pass "
            f"'./{name}' to use the folder (a path must look like one: ./, /, ~ or a trailing "
            "/), or run this elsewhere to load the Hub repo."
        )
    return _unpublished_repo(
        name, revision, registry, cache_dir, force_download,
        local_files_only=local_files_only, token=token,
    ), None  # fmt: skip


def _unpublished_repo(
    name: str, revision: str | None, registry: Registry, cache_dir, force_download: bool, *,
    local_files_only: bool = False, token: str | bool | None = None,
) -> Path:  # fmt: skip
    """The snapshot of a Hub repo that is not published at this revision (unverified), with
    huggingface_hub's failures turned into one-line HubErrors."""
    try:
        path = snapshot_download(
            name,
            revision=revision,
            allow_patterns=list(LOAD_FILES + OPTIONAL_FILES),
            cache_dir=cache_dir,
            force_download=force_download,
            local_files_only=local_files_only,
            token=token,
            endpoint=endpoint(),
        )
    except (LocalEntryNotFoundError, OfflineModeIsEnabled):
        why = _offline_reason(local_files_only) or "the Hub is unreachable"
        raise HubError(
            f"{name} is not in the Hugging Face cache and {why}. Download it where the Hub is "
            f"reachable (`zoo pull {name}`)."
        ) from None
    except RepositoryNotFoundError:
        raise HubError(
            f"{name!r} is neither a local directory, a published checkpoint (`zoo list`) nor a "
            "Hub repository the Hub knows (or it is private and your token cannot read it)."
        ) from None
    except RevisionNotFoundError:
        published = registry.by_repo_id(name)
        pinned = (
            f" The published {published.name} is revision {published.revision} (pinned in "
            f"checkpoints.yaml): from_pretrained({published.name!r}) loads it, verified."
            if published is not None and published.revision
            else ""
        )
        raise HubError(
            f"the Hub repository {name} has no revision {revision!r}: pass a branch, tag or "
            f"commit that exists there.{pinned}"
        ) from None
    except HfHubHTTPError as e:
        raise HubError(download_refusal(e, "its files", name)) from None
    return Path(path)


def _pinned_message(entry: CheckpointEntry, revision: str) -> str:
    """Why a published name takes no other revision, and how to load one."""
    if entry.revision is None:
        return (
            f"{entry.name} is not pinned to a Hub revision yet (checkpoints.yaml: revision null), "
            f"so revision={revision!r} cannot be verified: from_pretrained({entry.name!r}) loads "
            "the files checkpoints.yaml records, verified; "
            f"from_pretrained({entry.repo_id!r}, revision={revision!r}) loads that revision "
            "unverified, if the Hub has it."
        )
    return (
        f"{entry.name} is pinned to revision {entry.revision} in checkpoints.yaml, and a "
        f"published name loads only that revision (verified against its sha256). To load "
        f"revision {revision!r} instead, pass the Hub repo id, unverified: "
        f"from_pretrained({entry.repo_id!r}, revision={revision!r}); that revision must exist "
        "on the Hub."
    )
