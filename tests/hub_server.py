"""A local Hugging Face Hub-compatible server for tests (stdlib only).

The zoo's Hub code uses the official ``huggingface_hub`` client; tests point it at this server with
``HF_ENDPOINT=http://127.0.0.1:PORT`` and ``HF_HUB_DISABLE_XET=1`` (the client cannot upload to a
server without Xet otherwise). It implements the endpoints that client uses for model repos:
create repo, create branch, YAML validation, preupload, git-LFS batch/upload/verify, NDJSON commits
(to a branch, or ``?create_pr=1``: a pull request against it), repo info (also at old revisions),
refs, tree listings and ``resolve`` (HEAD and GET, byte ranges), with the Hub's error headers.
Repos live in memory as immutable commits (``sha -> {path: blob}``) and refs (branches, and
``refs/pr/N`` for pull requests, recorded in ``Repo.pull_requests``), so pinned revisions keep
resolving after new commits. Revisions travel URL-encoded whole (``refs%2Fpr%2F1``) and are
decoded after the route is matched. ``../shared/TOOLCHAIN.md`` lists what the
client needs from a server; this file follows it.

Usage::

    with HubServer() as hub:         # hub.url = "http://127.0.0.1:PORT"
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        ...
    hub.fail_next["commit"] = 500    # inject a fault into the next commit (tests of interruptions)
    hub.cut_downloads["model.safetensors"] = [1000, 0]  # its next two downloads stop after
                                                        # 1000 and 0 bytes (dropped connections)
    hub.tokens = {"ro": set()}       # token -> namespaces it may write to (None: all)
    hub.check_read_tokens = True     # reads with a token the server does not know: 401

Writes (create, preupload, LFS batch, commit) need ``Authorization: Bearer <token>`` with rights to
the repo's namespace: no token is answered 401, a token without rights 403, as the Hub does.
Reads need no token; with ``check_read_tokens``, a read that sends a token the server does not know
is answered 401, as the Hub answers an invalid token even for a public repo.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

LFS_THRESHOLD = 10 * 1024 * 1024  # the Hub stores files this large (or binary ones) in LFS


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Blob:
    data: bytes
    lfs: bool

    @property
    def etag(self) -> str:
        return hashlib.sha256(self.data).hexdigest() if self.lfs else git_blob_sha1(self.data)


@dataclass
class PullRequest:
    num: int
    title: str  # the first commit's summary
    target: str  # the branch it would merge into
    ref: str  # "refs/pr/{num}", a revision that resolves to its head


@dataclass
class Repo:
    commits: dict[str, dict[str, Blob]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)  # branch or refs/pr/N -> commit sha
    pull_requests: dict[int, PullRequest] = field(default_factory=dict)

    def resolve(self, rev: str) -> str | None:
        if rev in self.refs:
            return self.refs[rev]
        return rev if rev in self.commits else None


class HubServer:
    """Start with ``with HubServer() as hub`` (or ``start()``/``stop()``); ``hub.url`` is the
    endpoint. ``hub.repos`` maps ``"ns/name"`` to :class:`Repo` for assertions."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.lfs_objects: dict[str, bytes] = {}
        self.fail_next: dict[str, int] = {}  # endpoint name -> HTTP status to answer once
        self.requests: list[tuple[str, str]] = []
        self.ranges: list[str] = []  # Range headers of file downloads, in order
        self.read_auth: list[str | None] = []  # Authorization headers of reads, in order
        self.cut_downloads: dict[str, list[int]] = {}  # file -> bytes sent before each drop
        self.tokens: dict[str, set[str] | None] = {"test-token": None}
        self.check_read_tokens = False
        self._lock = threading.Lock()
        self._counter = 0
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def start(self) -> HubServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def new_commit(self, repo: Repo, branch: str, files: dict[str, Blob]) -> str:
        with self._lock:
            self._counter += 1
            sha = hashlib.sha1(f"commit {self._counter} {sorted(files)}".encode()).hexdigest()
            repo.commits[sha] = files
            repo.refs[branch] = sha
        return sha


def _handler(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    # matched on the raw path: a revision is one URL-encoded segment (refs%2Fpr%2F1)
    api_repo = re.compile(r"^/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?$")
    api_action = re.compile(
        r"^/api/models/([^/]+/[^/]+)/(preupload|commit|tree|branch)/([^/]+)(?:/(.*))?$"
    )
    api_refs = re.compile(r"^/api/models/([^/]+/[^/]+)/refs$")
    resolve = re.compile(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
    lfs_batch = re.compile(r"^/([^/]+/[^/]+)\.git/info/lfs/objects/batch$")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        # --- plumbing -----------------------------------------------------------------------
        def _send(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, str(v))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, status: int, obj, headers: dict | None = None) -> None:
            body = json.dumps(obj).encode()
            self._send(status, body, {"Content-Type": "application/json", **(headers or {})})

        def _error(self, status: int, code: str, message: str, headers: dict | None = None):
            extra = {"X-Error-Code": code, "X-Error-Message": message, **(headers or {})}
            self._json(status, {"error": message}, extra)

        def _body(self) -> bytes:
            """The request body, read once (a second call returns b"")."""
            if self.body_read:
                return b""
            self.body_read = True
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def parse_request(self) -> bool:  # per request: its body is unread
            self.body_read = False
            return super().parse_request()

        def _fault(self, name: str) -> bool:
            status = hub.fail_next.pop(name, None)
            if status is None:
                return False
            self._body()
            self._error(status, "InjectedFault", f"injected {status} on {name}")
            return True

        def _authorized(self, namespace: str) -> bool:
            """The Hub's answers to writes without a token (401) or without rights (403)."""
            auth = self.headers.get("Authorization", "")
            token = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else None
            if token is None or token not in hub.tokens:
                self._body()  # drain it (unless read already), so the client reads the answer
                self._error(401, "Unauthorized", "Invalid credentials in Authorization header")
                return False
            rights = hub.tokens[token]
            if rights is not None and namespace not in rights:
                self._body()
                message = f"You don't have the rights to write to the namespace {namespace}"
                self._error(403, "Forbidden", message)
                return False
            return True

        def _repo(self, repo_id: str) -> Repo | None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", f"Repository {repo_id} not found")
            return repo

        def _revision(self, repo_id: str, rev: str) -> tuple[Repo, str] | None:
            """The repo and the commit ``rev`` names, or None after answering the Hub's error."""
            if (repo := self._repo(repo_id)) is None:
                return None
            if (sha := repo.resolve(rev)) is None:
                self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
                return None
            return repo, sha

        # --- verbs ---------------------------------------------------------------------------
        def do_HEAD(self) -> None:
            self.do_GET()

        def _route(self, pattern: re.Pattern) -> tuple[str | None, ...] | None:
            """The decoded groups of ``pattern`` matched on the raw path, or None."""
            m = pattern.match(urlparse(self.path).path)
            return None if m is None else tuple(g and unquote(g) for g in m.groups())

        def do_GET(self) -> None:
            url = urlparse(self.path)
            path, query = unquote(url.path), parse_qs(url.query)
            hub.requests.append((self.command, path))
            hub.read_auth.append(auth := self.headers.get("Authorization"))
            if hub.check_read_tokens and auth and auth.removeprefix("Bearer ") not in hub.tokens:
                return self._error(
                    401, "Unauthorized", "Invalid credentials in Authorization header"
                )
            if m := self._route(api_repo):
                return self._info(m[0], m[1] or "main")
            if m := self._route(api_refs):
                return self._refs(m[0], query.get("include_prs", ["0"])[0] in ("1", "true"))
            if (m := self._route(api_action)) and m[1] == "tree":
                recursive = query.get("recursive", ["false"])[0] == "true"
                return self._tree(m[0], m[2], m[3] or "", recursive)
            if m := self._route(resolve):
                return self._resolve(*m)
            self._error(404, "EntryNotFound", f"no route for {path}")

        def do_PUT(self) -> None:
            path = urlparse(self.path).path
            hub.requests.append(("PUT", path))
            if self._fault("upload"):
                return
            if m := re.match(r"^/lfs-upload/([0-9a-f]{64})$", path):
                data = self._body()
                if hashlib.sha256(data).hexdigest() != m.group(1):
                    return self._error(400, "BadRequest", "sha256 mismatch")
                hub.lfs_objects[m.group(1)] = data
                return self._send(200)
            self._error(404, "EntryNotFound", path)

        def do_POST(self) -> None:
            url = urlparse(self.path)
            path, query = unquote(url.path), parse_qs(url.query)
            hub.requests.append(("POST", path))
            if path == "/api/repos/create":
                return self._create(json.loads(self._body() or b"{}"))
            if path == "/api/validate-yaml":
                self._body()
                return self._json(200, {"errors": [], "warnings": []})
            if m := lfs_batch.match(path):
                if not self._authorized(m.group(1).split("/")[0]):
                    return
                return self._lfs_batch(json.loads(self._body()))
            if re.match(r"^/lfs-verify/[0-9a-f]{64}$", path):
                self._body()
                return self._json(200, {})
            if m := self._route(api_action):
                repo_id, action, rev = m[0], m[1], m[2]
                if not self._authorized(repo_id.split("/")[0]) or self._fault(action):
                    return
                if action == "preupload":
                    return self._preupload(repo_id, json.loads(self._body()))
                if action == "commit":
                    create_pr = query.get("create_pr", ["0"])[0] in ("1", "true")
                    return self._commit(repo_id, rev, self._body(), create_pr)
                if action == "branch":
                    return self._create_branch(repo_id, rev, json.loads(self._body() or b"{}"))
            self._error(404, "EntryNotFound", f"no route for {path}")

        # --- endpoints -----------------------------------------------------------------------
        def _create(self, req: dict) -> None:
            repo_id = f"{req.get('organization') or 'user'}/{req['name']}"
            if not self._authorized(repo_id.split("/")[0]) or self._fault("create"):
                return
            url = {"url": f"{hub.url}/{repo_id}", "name": repo_id}
            if repo_id in hub.repos:  # the client's exist_ok=True still reads "url"
                message = "You already created this model repo"
                return self._json(409, {"error": message, **url},
                                  {"X-Error-Code": "RepoExists", "X-Error-Message": message})  # fmt: skip
            repo = Repo()
            hub.repos[repo_id] = repo
            hub.new_commit(repo, "main", {".gitattributes": Blob(b"", lfs=False)})
            self._json(200, url)

        def _info(self, repo_id: str, rev: str) -> None:
            if self._fault("info") or (found := self._revision(repo_id, rev)) is None:
                return
            repo, sha = found
            files = repo.commits[sha]
            self._json(200, {
                "id": repo_id, "modelId": repo_id, "sha": sha, "private": False,
                "siblings": [{"rfilename": p} for p in sorted(files)],
            })  # fmt: skip

        def _tree(self, repo_id: str, rev: str, prefix: str, recursive: bool) -> None:
            if (found := self._revision(repo_id, rev)) is None:
                return
            repo, sha = found
            entries, folders = [], set()
            for p, blob in sorted(repo.commits[sha].items()):
                if prefix and not p.startswith(prefix.rstrip("/") + "/"):
                    continue
                rest = p[len(prefix.rstrip("/")) + 1 :] if prefix else p
                if not recursive and "/" in rest:
                    folders.add((prefix.rstrip("/") + "/" if prefix else "") + rest.split("/")[0])
                    continue
                entry = {"type": "file", "path": p, "size": len(blob.data),
                         "oid": git_blob_sha1(blob.data)}  # fmt: skip
                if blob.lfs:
                    entry["lfs"] = {"oid": blob.etag, "size": len(blob.data), "pointerSize": 134}
                entries.append(entry)
            entries += [{"type": "directory", "path": f, "oid": "0" * 40} for f in sorted(folders)]
            self._json(200, entries)

        def _resolve(self, repo_id: str, rev: str, file: str) -> None:
            if (found := self._revision(repo_id, rev)) is None:
                return
            repo, sha = found
            blob = repo.commits[sha].get(file)
            if blob is None:
                return self._error(404, "EntryNotFound", f"{file} not found",
                                   {"X-Repo-Commit": sha})  # fmt: skip
            headers = {"X-Repo-Commit": sha, "ETag": f'"{blob.etag}"',
                       "Content-Type": "application/octet-stream", "Accept-Ranges": "bytes"}  # fmt: skip
            if blob.lfs:
                headers |= {"X-Linked-Etag": f'"{blob.etag}"', "X-Linked-Size": len(blob.data)}
            data, status = blob.data, 200
            if self.command == "GET":
                hub.ranges.append(self.headers.get("Range", ""))
            if m := re.match(r"bytes=(\d+)-(\d*)", self.headers.get("Range", "")):
                start = int(m.group(1))
                end = int(m.group(2)) if m.group(2) else len(data) - 1
                headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
                data, status = data[start : end + 1], 206
            if self.command == "GET" and hub.cut_downloads.get(file):  # dropped mid-file
                cut = hub.cut_downloads[file].pop(0)
                self.send_response(status)
                for k, v in (headers | {"Content-Length": len(data)}).items():
                    self.send_header(k, str(v))
                self.end_headers()
                self.wfile.write(data[:cut])
                self.wfile.flush()
                self.close_connection = True
                return
            self._send(status, data, headers)

        def _preupload(self, repo_id: str, req: dict) -> None:
            if self._repo(repo_id) is None:
                return
            out = []
            for f in req["files"]:
                sample = base64.b64decode(f.get("sample", ""))
                lfs = f["size"] >= LFS_THRESHOLD or b"\0" in sample
                out.append({"path": f["path"], "uploadMode": "lfs" if lfs else "regular",
                            "shouldIgnore": False})  # fmt: skip
            self._json(200, {"files": out})

        def _lfs_batch(self, req: dict) -> None:
            objects = []
            for o in req.get("objects", []):
                entry = {"oid": o["oid"], "size": o["size"]}
                if o["oid"] not in hub.lfs_objects:
                    entry["actions"] = {
                        "upload": {"href": f"{hub.url}/lfs-upload/{o['oid']}"},
                        "verify": {"href": f"{hub.url}/lfs-verify/{o['oid']}"},
                    }
                objects.append(entry)
            self._json(200, {"transfer": "basic", "objects": objects})

        def _refs(self, repo_id: str, include_prs: bool) -> None:
            """``GET /api/models/{id}/refs[?include_prs=1]``: branches (and pull requests)."""
            if (repo := self._repo(repo_id)) is None:
                return
            branches = [{"name": b, "ref": f"refs/heads/{b}", "targetCommit": sha}
                        for b, sha in sorted(repo.refs.items()) if not b.startswith("refs/")]  # fmt: skip
            out = {"branches": branches, "converts": [], "tags": []}
            if include_prs:
                out["pullRequests"] = [
                    {"name": pr.ref, "ref": pr.ref, "targetCommit": repo.refs[pr.ref]}
                    for pr in repo.pull_requests.values()
                ]
            self._json(200, out)

        def _create_branch(self, repo_id: str, branch: str, req: dict) -> None:
            """``POST /api/models/{id}/branch/{branch}`` ``{"startingPoint"?: rev}``: a new branch
            at ``startingPoint`` (default: main's head); 409 if it exists."""
            if (repo := self._repo(repo_id)) is None:
                return
            valid = re.fullmatch(r"[\w.\-/]+", branch) and ".." not in branch
            if branch.startswith("refs/") or not valid:
                return self._error(400, "BadRequest", f"Invalid reference for a branch: {branch}")
            if branch in repo.refs:
                return self._error(409, "Conflict", f"Reference {branch} already exists")
            start = req.get("startingPoint") or "main"
            if (sha := repo.resolve(start)) is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {start}")
            repo.refs[branch] = sha
            self._json(200, {})

        def _commit(self, repo_id: str, rev: str, body: bytes, create_pr: bool) -> None:
            """``POST /api/models/{id}/commit/{rev}[?create_pr=1]``: NDJSON operations committed
            to the branch (or ``refs/pr/N``) ``rev``, or with ``create_pr`` to a new pull request
            against the branch ``rev`` (from ``parentCommit`` if given), which stays where it is."""
            if (found := self._revision(repo_id, rev)) is None:
                return
            repo, base = found
            if create_pr and (rev not in repo.refs or rev.startswith("refs/")):
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev} (no branch)")
            items = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
            header = next((i["value"] for i in items if i["key"] == "header"), {})
            parent = header.get("parentCommit")
            if create_pr and parent in repo.commits:
                base = parent  # the pull request starts from the given parent
            elif parent not in (None, base):
                return self._error(412, "BadRequest", "parentCommit is not the branch head")
            files = dict(repo.commits[base])
            for item in items:
                key, value = item["key"], item["value"]
                if key == "file":
                    files[value["path"]] = Blob(base64.b64decode(value["content"]), lfs=False)
                elif key == "lfsFile":
                    data = hub.lfs_objects.get(value["oid"])
                    if data is None:
                        return self._error(400, "BadRequest", f"LFS object {value['oid']} missing")
                    files[value["path"]] = Blob(data, lfs=True)
                elif key == "deletedFile":
                    files.pop(value["path"], None)
                elif key == "deletedFolder":
                    folder = value["path"].rstrip("/") + "/"
                    files = {p: b for p, b in files.items() if not p.startswith(folder)}
            pr_url = None
            if create_pr:
                num = len(repo.pull_requests) + 1
                pr = PullRequest(num, header.get("summary", ""), rev, f"refs/pr/{num}")
                repo.pull_requests[num] = pr
                rev, pr_url = pr.ref, f"{hub.url}/{repo_id}/discussions/{num}"
            sha = hub.new_commit(repo, rev, files)
            self._json(200, {"commitOid": sha, "commitUrl": f"{hub.url}/{repo_id}/commit/{sha}",
                             "pullRequestUrl": pr_url})  # fmt: skip

    return Handler
