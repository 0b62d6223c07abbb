"""``zoo migrate CKPT``: record the architecture of a ``.ckpt`` written before it was recorded."""

from __future__ import annotations

import argparse

__all__ = ["migrate_main"]


def migrate_main(args: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="zoo migrate",
        description="Record in a Lightning checkpoint of `zoo fit` the architecture of its model, "
        "so it loads without fetching its init_from. A checkpoint written before the zoo recorded "
        "it names its base weights by a path or Hub repo id, which the zoo no longer follows from "
        "a file: run this once on a checkpoint you trust, which follows that source one last time.",
    )
    parser.add_argument("checkpoint", help="a .ckpt written by `zoo fit`")
    parser.add_argument("--out", default=None, help="write here instead of replacing CHECKPOINT")
    ns = parser.parse_args(args)

    from zoo.tasks.checkpoint import migrate_checkpoint

    out = migrate_checkpoint(ns.checkpoint, ns.out)
    print(f"{out}: the architecture is recorded; it loads without following its init_from")
