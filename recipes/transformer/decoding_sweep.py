"""BLEU of trained translation checkpoints under several decodings: checkpoint averaging, beam size
and the length penalty, on Multi30k splits.

Each (checkpoint, split, beam size, alpha) is translated with zoo.translate in fp32 and scored with
sacrebleu against the raw references (default signature, printed). Beam size 1 is greedy search.

    python recipes/transformer/decoding_sweep.py \\
        --checkpoints runs/transformer/multi30k_de_en/checkpoints/last.ckpt averaged5.ckpt \\
        --splits val --beams 4 --alphas 0 0.6 1.0 1.5 --out docs/bench/multi30k_decoding.json

Needs the Multi30k files (ZOO_DATA_DIR or --data-dir). Appends to --out (JSON lines of results)
and prints the table; choose settings on val, then report test.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import sacrebleu
import torch
from rich.console import Console
from rich.table import Table

from zoo.beam_search import translate
from zoo.data.translation import load_pairs
from zoo.loading import load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", nargs="+", required=True)
    parser.add_argument("--splits", nargs="+", default=["val"])
    parser.add_argument("--beams", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--alphas", nargs="+", type=float, default=[0.6])
    parser.add_argument("--source-lang", default="de")
    parser.add_argument("--target-lang", default="en")
    parser.add_argument("--data-dir")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--out", help="append results here (JSON lines)")
    ns = parser.parse_args()
    torch.set_num_threads(ns.threads)

    table = Table(title="Multi30k BLEU by decoding")
    for col in ("checkpoint", "split", "beam", "alpha", "BLEU", "BP", "ratio", "seconds"):
        table.add_column(col, justify="left" if col in ("checkpoint", "split") else "right")
    bleu = sacrebleu.metrics.BLEU()
    for ckpt in ns.checkpoints:
        model = load_model(ckpt, task="Translation")
        for split in ns.splits:
            pairs = load_pairs("multi30k", split, ns.source_lang, ns.target_lang,
                               data_dir=ns.data_dir)  # fmt: skip
            sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
            for beam in ns.beams:
                for alpha in ns.alphas if beam > 1 else [None]:
                    start = time.perf_counter()
                    hyps = translate(
                        model, sources, decoding="beam" if beam > 1 else "greedy",
                        beam_size=beam, alpha=alpha or 0.0, progress=True,
                    )  # fmt: skip
                    seconds = time.perf_counter() - start
                    score = bleu.corpus_score(hyps, [refs])
                    row = {
                        "checkpoint": ckpt, "split": split, "beam": beam, "alpha": alpha,
                        "bleu": round(score.score, 2), "bp": round(score.bp, 3),
                        "ratio": round(score.sys_len / score.ref_len, 3),
                        "precisions": [round(p, 1) for p in score.precisions],
                        "seconds": round(seconds, 1), "threads": ns.threads,
                        "signature": str(bleu.get_signature()),
                    }  # fmt: skip
                    table.add_row(Path(ckpt).name, split, str(beam), "-" if alpha is None else
                                  f"{alpha:g}", f"{score.score:.2f}", f"{score.bp:.3f}",
                                  f"{row['ratio']:.3f}", f"{seconds:.0f}")  # fmt: skip
                    if ns.out:
                        with open(ns.out, "a") as f:
                            f.write(json.dumps(row) + "\n")
    console = Console()
    console.print(table)
    console.print(f"sacrebleu signature: {bleu.get_signature()}")


if __name__ == "__main__":
    main()
