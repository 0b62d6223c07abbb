"""``zoo push``: a folder or run to the Hugging Face Hub."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["push_main"]


def push_main(args: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="zoo push",
        description="Publish an exported folder (or a run, exported on the fly) to the Hugging Face "
        "Hub in one commit. Needs a token with write access (HF_TOKEN or `hf auth login`).",
    )
    parser.add_argument("source", help="a folder from `zoo export` or a run directory")
    parser.add_argument("--repo-id", required=True)
    parser.add_argument("--name", help="for a run: <model>.<dataset>")
    parser.add_argument("--recipe", help="for a run: the recipe YAML")
    parser.add_argument("--results", help="for a run: metrics (default RUN/results.json)")
    parser.add_argument("--branch", help="default: main; created from main if it does not exist")
    parser.add_argument(
        "--create-pr", action="store_true", help="open a pull request against main instead"
    )
    parser.add_argument("--private", action="store_true")
    parser.add_argument("--commit-message")
    parser.add_argument(
        "--update-registry",
        action="store_true",
        help="pin the new commit in checkpoints.yaml (the entry with these files)",
    )
    ns = parser.parse_args(args)

    from zoo.evaluation import load_metrics
    from zoo.publishing.push import checked_repo_id, pin_revision, push

    checked_repo_id(ns.repo_id)  # before anything is read or exported
    metrics = None
    if not (Path(ns.source) / "config.json").is_file() and ns.name:
        metrics = load_metrics(ns.results or str(Path(ns.source) / "results.json"))
    sha = push(ns.source, ns.repo_id, name=ns.name, recipe=ns.recipe, metrics=metrics,
               branch=ns.branch, create_pr=ns.create_pr, private=ns.private,
               commit_message=ns.commit_message)  # fmt: skip
    pr = f" as pull request {sha.pr_url} ({sha.pr_revision})" if sha.pr_url else ""
    print(f"pushed {ns.source} to {ns.repo_id}{pr} at commit {sha}")
    if ns.update_registry:
        entry = pin_revision(ns.source, ns.repo_id, sha)
        print(f"pinned {entry.name} to {entry.repo_id}@{sha} in checkpoints.yaml")
