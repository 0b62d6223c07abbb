"""The Hub's HTTP refusals as one line: the status, the server's message and what to do, for the
download side (:mod:`zoo.hub.download`) and the upload side (:mod:`zoo.hub.upload`)."""

from __future__ import annotations

from huggingface_hub.errors import HfHubHTTPError

__all__ = ["download_refusal", "refusal"]


def refusal(e: HfHubHTTPError, hints: dict[int, str], default: str = "") -> str:
    """``"STATUS MESSAGE. HINT"`` on one line: ``hints[status]``, else ``default``. The message is
    the server's (``X-Error-Message``), else the first line of the client's."""
    status = e.response.status_code if e.response is not None else None
    message = " ".join((e.server_message or str(e).splitlines()[0]).split())
    return f"{status} {message}. {hints.get(status or 0, default)}".strip()


def download_refusal(e: HfHubHTTPError, what: str, repo_id: str) -> str:
    """One line for a download of ``what`` from ``repo_id`` that the Hub refused; a rejected token
    (401) says how to send another, or none."""
    hints = {
        401: "The Hub rejected the token sent (token= or HF_TOKEN): pass a valid read token, "
        "or token=False to read a public repository without one. Nothing was cached.",
        403: f"Your token may not read {repo_id}: ask its owner. Nothing was cached.",
    }
    again = "Nothing was cached under the file's name: run the same command again."
    return f"downloading {what} from {repo_id} failed: {refusal(e, hints, again)}"
