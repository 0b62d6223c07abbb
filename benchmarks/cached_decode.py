"""Benchmark: cached decoding at a long context, one token at a time, batch 1, on this CPU.

    python -m benchmarks.cached_decode                   # context 4,096, writes docs/bench/
    python -m benchmarks.cached_decode --sizes 1024 4096 --out /tmp/bench

(from the repository root; the benchmark is not part of the wheel)

Each method is a whole 4,096-context model at the zoo's small size (4 layers, d_model 256, 8
heads of 32, random weights: speed does not depend on them) with one attention mechanism:
``dense`` (``transformer_lm_small_moba`` with ``attention: dense``), ``moba``
(``transformer_lm_small_moba``) and ``nsa`` (``transformer_lm_small_nsa``). A prompt of ``n - 64``
tokens fills the key/value cache; then 64 greedy tokens are decoded one forward call each, and
the rate is 64 over their time (the median of 3 such runs in a fresh process, fp32). Every
mechanism decodes with its own cache exactly as its full forward computes (the tests check it):
MoBA scores the cached blocks, NSA keeps its compressed tokens.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from benchmarks import harness
from benchmarks.harness import machine, time_and_peak, write_report

METHODS = ("dense", "moba", "nsa")
NEW = 64  # tokens decoded per run
PRESETS = {"dense": "transformer_lm_small_moba", "moba": "transformer_lm_small_moba",
           "nsa": "transformer_lm_small_nsa"}  # fmt: skip


def run_one(method: str, n: int) -> dict:
    """Measure one (method, context) in this process."""
    import zoo
    from zoo.attention import KVCache

    torch.manual_seed(0)
    extra = {"attention": "dense"} if method == "dense" else {}
    model = zoo.create_model(PRESETS[method], max_seq_len=n, **extra).eval()
    prompt = torch.randint(0, 256, (1, n - NEW))

    @torch.inference_mode()
    def step() -> float:
        cache = KVCache(model.config.n_layers, n)
        token = model(prompt, past_key_values=cache).logits[:, -1:].argmax(-1)
        t = time.perf_counter()
        for _ in range(NEW):
            token = model(token, past_key_values=cache).logits[:, -1:].argmax(-1)
        return time.perf_counter() - t

    ms, peak = time_and_peak(step)
    return {"method": method, "n": n, "tokens_per_s": NEW / (ms / 1e3), "peak_mib": peak}


def report(rows: list[dict], out: Path) -> str:
    header = [
        "# Cached decoding at a long context, batch 1, CPU",
        "",
        f"`python -m benchmarks.cached_decode` on {machine()}; the zoo's small 4,096-context"
        f" size, fp32; {NEW} greedy tokens after a prompt of n - {NEW}, one forward call per"
        " token. Rate: tokens/s (median of 3). Memory: peak RSS growth (MiB).",
    ]
    metrics = [("tokens_per_s", "tok/s", "tokens/s"), ("peak_mib", "MiB", "peak MiB")]
    text = write_report(rows, METHODS, metrics, header, out, "cached_decode_cpu")
    (out / "cached_decode_cpu.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, METHODS)
    parser.set_defaults(sizes=[4096])
    ns = parser.parse_args(argv)
    if ns.one:
        print(json.dumps(run_one(ns.one[0], int(ns.one[1]))))
        return
    rows = harness.measure_all("benchmarks.cached_decode", ns)
    print(report(rows, ns.out))


if __name__ == "__main__":
    main()
