"""Benchmark of the kernel layer: our Triton kernels against FlexAttention, dense SDPA and `_torch`.

    python -m benchmarks.attention_kernels                       # all sizes; GPU: n = 1k ... 32k
    python -m benchmarks.attention_kernels --sizes 1024 4096 --head-dims 64 --methods triton flex

(from the repository root; the benchmark is not part of the wheel)

Block-sparse attention, bf16 (fp32 on a CPU), on two layouts of the catalogue with blocks of
``--block`` (64):

- ``causal``: the dense causal Transformer, run as one layout;
- ``fixed``: the Sparse Transformer's fixed pattern (Child et al. 2019 §4.2). The stride is
  512, the summary is one block (``c = block``), and the summaries are distinct per head.

Methods:

- ``triton``: :mod:`zoo.kernels.triton_block_sparse` (CUDA only);
- ``flex``: ``torch.nn.attention.flex_attention`` compiled, with the BlockMask that
  ``create_block_mask`` builds from the same pattern at the same block size. On a CPU it has no
  backward pass;
- ``sdpa``: ``scaled_dot_product_attention(is_causal=True)`` on the whole sequence. On CUDA this
  is the FlashAttention backend; it computes the dense causal triangle whatever the layout;
- ``torch``: :func:`zoo.kernels.block_sparse_attention_torch`, the PyTorch path (what a CPU
  runs for a layout without a structured route; the fixed pattern's CPU route is
  :func:`zoo.kernels.segment_attention`, measured by ``python -m benchmarks.sparse_layer``).

Routing attention, shared causal clusters of ``w = 512`` random sorted positions,
``k = n / w``:

- ``triton``: :mod:`zoo.kernels.triton_routing`;
- ``torch``: :func:`zoo.kernels.routing_attention_torch`;
- ``sdpa``: dense causal SDPA over ``(B, H k, w, D)``, the same score entries without the
  gather and scatter.

Shapes follow FlashAttention's benchmark: batch ``16384 / n`` (at least 1) and ``2048 / D``
heads on a GPU, and 1 x 2 on a CPU. Time is ``triton.testing.do_bench``'s median on a GPU and
the median of 3 after a warm-up on a CPU. TFLOP/s counts the computed entries only, at
``4 n_entries D`` FLOPs forward and 2.5 times that backward (FlashAttention's convention). The
entries are: for the block-sparse methods, the listed blocks (``b^2`` each); for ``sdpa``, the
causal triangle ``n^2 / 2``; for routing, the causal triangles of the clusters. The table and
its JSON are written to ``--out`` (``docs/bench/kernels_<device>.md``) with the GPU name and
the software versions.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from zoo.kernels import BlockSparsePlan, block_sparse_attention_torch, routing_attention_torch

from zoo.attention.patterns import AttentionPattern, causal, fixed

METHODS = ("triton", "flex", "sdpa", "torch")
LAYOUTS = ("causal", "fixed")
CLUSTER = 512  # routing: tokens per cluster


def pattern(name: str, block: int) -> AttentionPattern:
    return causal() if name == "causal" else fixed(512, block, distinct_summaries=True)


def shape(n: int, d: int, cuda: bool) -> tuple[int, int]:
    """``(batch, heads)`` for a sequence of ``n`` and head dim ``d``."""
    return (max(1, 16384 // n), 2048 // d) if cuda else (1, 2)


def timer(cuda: bool) -> Callable[[Callable[[], object]], float]:
    """A function returning the median milliseconds of a callable."""
    if cuda:
        import triton.testing

        return lambda fn: triton.testing.do_bench(fn, warmup=10, rep=50)

    def cpu(fn) -> float:
        fn()
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return 1e3 * statistics.median(times)

    return cpu


def _op_block_sparse(method: str, q, k, v, pat: AttentionPattern, block: int, cuda: bool):
    """``(attention callable, computed score entries per (batch, head))``, or a reason it
    cannot run here."""
    B, H, n, D = q.shape
    plan = BlockSparsePlan(
        pat.layout(n, block, H if pat.per_head else None), block, n, mask_mod=pat.mask_mod
    ).to(q.device)
    if method == "sdpa":
        return (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)), n * n / 2
    if method == "torch":
        return (lambda: block_sparse_attention_torch(q, k, v, plan)), _listed(plan, H) * block**2
    if method == "triton":
        if not cuda:
            return "needs CUDA"
        from zoo.kernels.triton_block_sparse import block_sparse_attention_triton

        tables = plan.kernel_tables(H)
        return (lambda: block_sparse_attention_triton(q, k, v, tables, block, D**-0.5)), _listed(
            plan, H
        ) * block**2
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def mask_mod(b, h, q_idx, kv_idx):
        return pat.mask_mod(h, q_idx, kv_idx)

    mask = create_block_mask(
        mask_mod, None, H if pat.per_head else None, n, n, device=q.device, BLOCK_SIZE=block,
        _compile=cuda,  # compiled, the (H, n, n) mask is never materialised
    )  # fmt: skip
    flex = torch.compile(flex_attention)
    if not cuda:  # FlexAttention refuses inputs that require grad on a CPU
        q, k, v = q.detach(), k.detach(), v.detach()
    # Flex's default tiles (128 on an H100) must divide the BlockMask's blocks: tile at them
    tiles = {"BLOCK_M": block, "BLOCK_N": block, "BLOCK_M1": block // 2, "BLOCK_N1": block,
             "BLOCK_M2": block, "BLOCK_N2": block // 2} if cuda else None  # fmt: skip
    return (lambda: flex(q, k, v, block_mask=mask, kernel_options=tiles)), _listed(
        plan, H
    ) * block**2


def _listed(plan: BlockSparsePlan, n_heads: int) -> float:
    """Computed blocks per head (what the kernel visits: blocks the mask leaves something in)."""
    t = plan.kernel_tables(n_heads)
    return t.n_blocks / t.n_layout_heads


def cluster_indices(B: int, H: int, n: int, w: int, device) -> torch.Tensor:
    """The routing benchmarks' clusters: ``n // w`` clusters of ``w`` distinct random positions
    each, in time order, per (batch, head), int64 ``(B, H, n // w, w)``; seed 0."""
    g = torch.Generator(device=device).manual_seed(0)
    scores = torch.rand(B, H, n // w, n, generator=g, device=device)
    return scores.topk(w, -1).indices.sort(-1).values


def _op_routing(method: str, q, k, v, cuda: bool, cluster: int = CLUSTER):
    B, H, n, D = q.shape
    w = min(cluster, n)
    n_clusters = n // w
    q_idx = cluster_indices(B, H, n, w, q.device)
    entries = n_clusters * w * (w + 1) / 2
    if method == "sdpa":
        qc, kc, vc = (x[:, :, : n_clusters * w].reshape(B, H * n_clusters, w, D) for x in (q, k, v))
        return (lambda: F.scaled_dot_product_attention(qc, kc, vc, is_causal=True)), entries
    if method == "torch":
        return (lambda: routing_attention_torch(q, q, v, q_idx)), entries
    if method == "triton":
        if not cuda:
            return "needs CUDA"
        from zoo.kernels.triton_routing import routing_attention_triton

        return (lambda: routing_attention_triton(q, q, v, q_idx)), entries
    return "not applicable"


def measure(op: str, layout: str, method: str, n: int, d: int, block: int) -> list[dict]:
    """Forward and forward+backward rows for one configuration (``error`` on failure)."""
    cuda = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    B, H = shape(n, d, cuda)
    base = {"op": op, "layout": layout, "method": method, "n": n, "d": d, "batch": B, "heads": H}
    q, k, v = (
        torch.randn(B, H, n, d, device=device, dtype=dtype, requires_grad=True) for _ in range(3)
    )
    try:
        if op == "block_sparse":
            made = _op_block_sparse(method, q, k, v, pattern(layout, block), block, cuda)
        else:
            made = _op_routing(method, q, k, v, cuda, int(layout.removeprefix("w=")))
        if isinstance(made, str):
            return [{**base, "pass": p, "error": made} for p in ("fwd", "fwd+bwd")]
        fn, entries = made
        if method != "sdpa" and op == "block_sparse":
            base["density"] = entries / (n * n)  # of the full n x n scores
        time_ms = timer(cuda)
        rows = []
        flops = 4 * B * H * entries * d
        with torch.no_grad():
            ms = time_ms(fn)
        rows.append({**base, "pass": "fwd", "ms": ms, "tflops": flops / ms / 1e9})
        if method == "flex" and not cuda:
            rows.append({**base, "pass": "fwd+bwd", "error": "no CPU backward"})
            return rows
        grad = torch.randn_like(fn())

        def step():
            fn().backward(grad)
            q.grad = k.grad = v.grad = None

        ms = time_ms(step)
        rows.append({**base, "pass": "fwd+bwd", "ms": ms, "tflops": 3.5 * flops / ms / 1e9})
        return rows
    except torch.OutOfMemoryError:
        return [{**base, "pass": p, "error": "out of memory"} for p in ("fwd", "fwd+bwd")]
    except Exception as e:  # one failing method must not lose the rest of the table
        error = f"{type(e).__name__}: {str(e).splitlines()[0][:60] if str(e) else ''}"
        return [{**base, "pass": p, "error": error} for p in ("fwd", "fwd+bwd")]
    finally:
        if cuda:
            torch.cuda.empty_cache()


def environment() -> dict:
    """Device, software versions and the command, for the table's header."""
    env = {
        "date": datetime.date.today().isoformat(),
        "command": "python -m benchmarks.attention_kernels " + " ".join(sys.argv[1:]),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = "not installed"
    from zoo.lineage import device_name

    if torch.cuda.is_available():
        env["device"] = device_name("cuda")  # with SXM or PCIe where nvidia-smi tells
        try:
            env["nvidia-smi"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,power.limit,driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, check=True,
            ).stdout.strip()  # fmt: skip
        except (OSError, subprocess.CalledProcessError):
            pass
        env["cuda"] = torch.version.cuda
    else:
        env["device"] = f"{device_name('cpu')}, no GPU"
    return env


def header(title: str, env: dict) -> list[str]:
    """A table's first lines: ``# title: device``, then one bullet per other :func:`environment`
    entry."""
    return [f"# {title}: {env['device']}", "", *(f"- {k}: {v}" for k, v in env.items()
                                               if k != "device")]  # fmt: skip


def report(rows: list[dict], env: dict) -> str:
    """The markdown table: one line per (op, layout, n, d, pass), one column pair per method."""
    methods = [m for m in METHODS if any(r["method"] == m for r in rows)]
    keys = sorted({(r["op"], r["layout"], r["n"], r["d"], r["pass"]) for r in rows},
                  key=lambda k: (k[0], k[1], k[3], k[4], k[2]))  # fmt: skip
    cell = {(r["op"], r["layout"], r["n"], r["d"], r["pass"], r["method"]): r for r in rows}
    lines = header("Kernel benchmark", env)
    lines += [
        "",
        "Milliseconds and TFLOP/s on the computed entries; density = computed entries / n^2 (see",
        "`python -m benchmarks.attention_kernels --help`). The last column is FlexAttention's time over ours.",
        "",
        "| op | layout | n | d | pass | density | "
        + " | ".join(f"{m} ms | {m} TFLOP/s" for m in methods)
        + " | flex / triton time |",
        "|---|---|---|---|---|---|" + "---|---|" * len(methods) + "---|",
    ]
    for key in keys:
        vals = []
        for m in methods:
            r = cell.get((*key, m))
            if r is None:
                vals += ["", ""]
            elif "error" in r:
                vals += [r["error"], ""]
            else:
                vals += [f"{r['ms']:.3g}", f"{r['tflops']:.3g}"]
        op, layout, n, d, p = key
        mine = [cell.get((*key, m), {}) for m in methods]
        density = next((f"{r['density']:.3f}" for r in mine if "density" in r), "")
        triton, flex = cell.get((*key, "triton"), {}), cell.get((*key, "flex"), {})
        speedup = f"{flex['ms'] / triton['ms']:.2f}" if "ms" in triton and "ms" in flex else ""
        lines.append(
            f"| {op} | {layout} | {n} | {d} | {p} | {density} | "
            + " | ".join(vals)
            + f" | {speedup} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[1024, 2048, 4096, 8192, 16384, 32768] if cuda else [1024, 2048, 4096],
    )
    p.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=LAYOUTS)
    p.add_argument(
        "--ops", nargs="+", default=["block_sparse", "routing"], choices=["block_sparse", "routing"]
    )
    p.add_argument("--block", type=int, default=64, help="layout block size (and Flex's)")
    p.add_argument(
        "--clusters",
        type=int,
        nargs="+",
        default=[CLUSTER],
        help="routing: tokens per cluster (the routing presets have 4,096 / 32 = 128)",
    )
    p.add_argument("--out", type=Path, default=Path("docs/bench"))
    args = p.parse_args(argv)  # fmt: skip
    from rich.progress import track

    jobs = [
        ("block_sparse", layout, m, n, d)
        for layout in args.layouts
        for m in args.methods
        for n in args.sizes
        for d in args.head_dims
        if "block_sparse" in args.ops
    ]
    jobs += [
        ("routing", f"w={w}", m, n, d)
        for w in args.clusters
        for m in args.methods
        if m != "flex" and "routing" in args.ops
        for n in args.sizes
        for d in args.head_dims
    ]
    rows = []
    for job in track(jobs, description="benchmarking"):
        rows += measure(*job, block=args.block)
    env = environment()
    text = report(rows, env)
    print(text)
    stem = "kernels_" + ("gpu" if cuda else "cpu")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.md").write_text(text)
    (args.out / f"{stem}.json").write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
    print(f"wrote {args.out / stem}.md and .json")


if __name__ == "__main__":
    main()
