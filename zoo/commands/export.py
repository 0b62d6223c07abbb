"""``zoo export``: a trained run to a publishable folder (weights, model card, files)."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["export_main"]


def export_main(args: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="zoo export",
        description="Turn a trained run into the folder that is pushed and shipped: config.json, "
        "model.safetensors, README.md (model card), recipe.yaml, training.json.",
    )
    parser.add_argument("run", help="a run directory (its checkpoints/best.ckpt), a .ckpt, or a "
                        "save_pretrained folder with its own training.json")  # fmt: skip
    parser.add_argument(
        "--name", required=True, help="<model>.<dataset>, e.g. transformer_lm_small.pg19mini"
    )
    parser.add_argument("--recipe", required=True, help="the recipe YAML that trained it")
    parser.add_argument(
        "--results", help="metrics from `zoo evaluate --out` (default RUN/results.json)"
    )
    parser.add_argument("--out", help="default: checkpoints/NAME beside checkpoints.yaml")
    parser.add_argument("--repo-id", help="default: attention-zoo/NAME")
    parser.add_argument("--register", action="store_true", help="add the entry to checkpoints.yaml")
    parser.add_argument("--by-position", metavar="DIR", help="the folder of `zoo evaluate RUN "
                        "--by-position` (by_position.md/.json/.png): published, in the card")  # fmt: skip
    parser.add_argument("--by-context", metavar="DIR", help="the folder of `zoo evaluate RUN "
                        "--by-context` (by_context.md/.json/.png): published, in the card")  # fmt: skip
    parser.add_argument("--copy-probe", metavar="DIR", help="the folder of `zoo evaluate RUN "
                        "--probe copy` (copy_probe.md/.json/.png): published, in the card")  # fmt: skip
    parser.add_argument("--samples", metavar="PNG", help="an image model's `zoo sample --out PNG` "
                        "grid (and its _completions.png): published, in the card")  # fmt: skip
    parser.add_argument("--bench", metavar="DIR", help="the folder of `zoo bench NAME --out-dir "
                        "DIR` (bench.md/.json/.png): published, in the card")  # fmt: skip
    parser.add_argument("--attention", metavar="DIR", help="a translation model's folder of `zoo "
                        "evaluate RUN --attention` (attention.md/.json/.png): published, in the "
                        "card")  # fmt: skip
    ns = parser.parse_args(args)

    from zoo.evaluation import load_metrics
    from zoo.files import contained_path
    from zoo.hub import load_registry
    from zoo.publishing.export import checked_name, export_run, register

    checked_name(ns.name)  # a plain published name: it names the folder under checkpoints/
    if ns.repo_id is not None:
        from zoo.publishing.push import checked_repo_id

        checked_repo_id(ns.repo_id)
    out_dir = ns.out or contained_path(  # by default, a folder under checkpoints/, not a link out
        load_registry().shipped_dir, ns.name, what=f"zoo export --name {ns.name}", directory=True,
        fix="remove the link (the export writes the folder itself) or pass --out",
    )  # fmt: skip
    results = ns.results or str(Path(ns.run) / "results.json")
    metrics = load_metrics(results)
    out = export_run(
        ns.run,
        out_dir,
        name=ns.name,
        recipe=ns.recipe,
        metrics=metrics,
        repo_id=ns.repo_id,
        by_position=ns.by_position,
        by_context=ns.by_context,
        copy_probe=ns.copy_probe,
        samples=ns.samples,
        attention=ns.attention,
        bench=ns.bench,
    )
    print(f"exported {ns.run} to {out}")
    if ns.register:
        entry = register(out, name=ns.name, recipe=ns.recipe, metrics=metrics, repo_id=ns.repo_id)
        print(f"registered {entry.name} in checkpoints.yaml (hub: {entry.repo_id}, not pushed yet)")
