"""Benchmark: one training step (forward + loss + backward) of a routing LM, ours vs the PyPI
``routing-transformer`` package, on this machine's CPU.

    python -m benchmarks.routing_lm                                    # ours only
    python -m benchmarks.routing_lm --baseline-path .bench-pkgs        # and the package

(from the repository root; the benchmark is not part of the wheel)

The package is never a dependency of the zoo. Install it (with the versions of its dependencies
that still import together; newer ``local-attention`` releases need extra packages) into a folder
of its own and point ``--baseline-path`` at it::

    pip install --no-deps --target .bench-pkgs routing-transformer==1.6.1 einops \\
        "local-attention<1.5" "mixture-of-experts<0.3" "product-key-memory<0.2" \\
        "axial-positional-embedding<0.3"

Configuration, identical for every method: byte vocabulary, d_model 256, 4 layers, 8 heads of
head dim 32 of which 4 local, local window 128, clusters of 128 tokens (``k = n / 128``), feed-forward
1024, batch 1, fp32 (or bf16 autocast), no dropout. Methods:

- ``ours_topw``: :class:`~zoo.models.RoutingTransformerLM`, top-w routing (Algorithm 1);
- ``ours_causal``: the same with causal routing;
- ``routing_transformer``: ``routing_transformer.RoutingTransformerLM(causal=True, ...)`` with its
  defaults otherwise (loss includes its auxiliary commitment loss);
- ``floor``: the part of the step that every implementation of this configuration computes, with
  PyTorch's own ops: the byte embedding, per layer a LayerNorm, the values' projection, the output
  projection (attention replaced by the identity: no queries, keys or scores), a LayerNorm and the
  feed-forward layer, then the final LayerNorm and the logits. A step of either model costs at
  least this at the same precision, so one implementation is twice as fast as the other only if
  the slower one's step takes at least twice the floor;
- ``..._bf16``: the same step under ``torch.autocast("cpu", torch.bfloat16)`` (what ``zoo fit``'s
  bf16-mixed does on CPUs with AVX512-BF16 or AMX; the package runs under it unchanged).

Each (method, n) runs in a fresh process: time is the median of 3 steps after a warm-up; memory
is the growth of the process's peak resident set (``ru_maxrss``) over the step.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks import harness
from benchmarks.harness import machine, measure, time_and_peak, write_report

BASE = ("ours_topw", "ours_causal", "routing_transformer", "floor")
METHODS = (*BASE, *(f"{m}_bf16" for m in BASE))
D_MODEL, LAYERS, HEADS, LOCAL_HEADS, WINDOW, CLUSTER_SIZE = 256, 4, 8, 4, 128, 128


class Floor(torch.nn.Module):
    """The dense work every implementation of the configuration does: attention replaced by its
    values (no queries, keys or scores)."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.embed = nn.Embedding(256, D_MODEL)
        self.layers = nn.ModuleList(
            nn.ModuleDict(
                {
                    "norm1": nn.LayerNorm(D_MODEL),
                    "v": nn.Linear(D_MODEL, D_MODEL),
                    "out": nn.Linear(D_MODEL, D_MODEL),
                    "norm2": nn.LayerNorm(D_MODEL),
                    "ff": nn.Sequential(
                        nn.Linear(D_MODEL, 4 * D_MODEL), nn.GELU(), nn.Linear(4 * D_MODEL, D_MODEL)
                    ),
                }
            )
            for _ in range(LAYERS)
        )
        self.norm, self.head = nn.LayerNorm(D_MODEL), nn.Linear(D_MODEL, 256, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.embed(idx)
        for layer in self.layers:
            h = h + layer["out"](layer["v"](layer["norm1"](h)))
            h = h + layer["ff"](layer["norm2"](h))
        return self.head(self.norm(h))


def build(method: str, n: int) -> torch.nn.Module:
    method = method.removesuffix("_bf16")
    if method == "floor":
        return Floor()
    if method == "routing_transformer":
        try:
            from routing_transformer import RoutingTransformerLM
        except ImportError as e:
            raise SystemExit(
                "routing-transformer is not importable: install it into a folder and pass "
                "--baseline-path (see this module's docstring)"
            ) from e
        return RoutingTransformerLM(
            num_tokens=256, dim=D_MODEL, depth=LAYERS, max_seq_len=n, heads=HEADS,
            dim_head=D_MODEL // HEADS, window_size=CLUSTER_SIZE, n_local_attn_heads=LOCAL_HEADS,
            causal=True,
        )  # fmt: skip
    from zoo.models import RoutingTransformerConfig, RoutingTransformerLM

    config = RoutingTransformerConfig(
        vocab_size=256, max_seq_len=n, d_model=D_MODEL, n_layers=LAYERS, n_heads=HEADS,
        d_ff=4 * D_MODEL, dropout=0.0, n_local_heads=LOCAL_HEADS, window=WINDOW,
        n_clusters=max(1, n // CLUSTER_SIZE), routing=method.removeprefix("ours_"),
    )  # fmt: skip
    return RoutingTransformerLM(config)


def run_one(method: str, n: int) -> dict:
    """Measure one (method, n) in this process."""
    torch.manual_seed(0)
    model = build(method, n).train()
    tokens = torch.randint(0, 256, (1, n + 1))
    x, y = tokens[:, :-1], tokens[:, 1:]

    bf16 = method.endswith("_bf16")

    def step() -> float:
        t = time.perf_counter()
        with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
            out = model(x)
        out = getattr(out, "logits", out)  # a zoo model's output, or a tensor / (logits, aux)
        logits, aux = out if isinstance(out, tuple) else (out, 0.0)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten()) + aux
        loss.backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - t

    ms, peak = time_and_peak(step)
    params = sum(p.numel() for p in model.parameters())
    return {"method": method, "n": n, "ms": ms, "peak_mib": peak, "params": params}


def report(rows: list[dict], out: Path) -> str:
    params = {r["method"]: r["params"] for r in rows if "params" in r}
    header = [
        "# Routing Transformer LM, one training step (forward + loss + backward), CPU",
        "",
        f"`python -m benchmarks.routing_lm` on {machine()}; d_model {D_MODEL}, {LAYERS} "
        f"layers, {HEADS} heads ({LOCAL_HEADS} local, window {WINDOW}), clusters of "
        f"{CLUSTER_SIZE} tokens, batch 1, fp32 or (`_bf16`) bf16 autocast. Time: median of 3 "
        "steps (ms). Memory: peak RSS growth (MiB). Parameters: "
        + ", ".join(f"{m} {p / 1e6:.2f}M (at the largest n)" for m, p in params.items()),
    ]
    metrics = [("ms", "ms", "training step (ms)"), ("peak_mib", "MiB", "peak MiB")]
    return write_report(rows, METHODS, metrics, header, out, "routing_lm_cpu")


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__, METHODS)
    parser.add_argument("--baseline-path", type=Path, help="folder holding routing-transformer")
    ns = parser.parse_args(argv)
    if ns.one:
        print(json.dumps(run_one(ns.one[0], int(ns.one[1]))))
        return
    from rich.progress import track

    methods = list(ns.methods)
    if ns.baseline_path is None and any(m.startswith("routing_transformer") for m in methods):
        methods = [m for m in methods if not m.startswith("routing_transformer")]
        print("no --baseline-path: measuring ours only")
    env = {"PYTHONPATH": str(ns.baseline_path.resolve())} if ns.baseline_path else None
    jobs = [(m, n) for n in ns.sizes for m in methods]
    module = "benchmarks.routing_lm"
    rows = [
        measure(module, m, n, ns.timeout, env if m.startswith("routing_transformer") else None)
        for m, n in track(jobs, description="measuring")
    ]
    print(report(rows, ns.out))


if __name__ == "__main__":
    main()
