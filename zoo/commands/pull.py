"""``zoo pull NAME``: download every file of a published checkpoint into the HF cache, verified."""

from __future__ import annotations

import argparse

__all__ = ["pull_main"]


def pull_main(args: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="zoo pull",
        description="Download every file of a published checkpoint at its pinned revision into the "
        "Hugging Face cache and verify its sha256 (resumes interrupted downloads).",
    )
    parser.add_argument("name")
    parser.add_argument("--cache-dir", help="default: the HF cache (HF_HOME)")
    parser.add_argument("--force", action="store_true", help="download again even if cached")
    ns = parser.parse_args(args)

    from zoo.hub import pull

    path = pull(ns.name, cache_dir=ns.cache_dir, force_download=ns.force)
    print(f"{ns.name}: all files verified in {path}")
