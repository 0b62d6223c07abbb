"""Launch options of the Triton kernels, measured: each kernel's time under each ``num_warps`` x
``num_stages`` (and, for routing, tile edge), on the shapes of ``python -m benchmarks.attention_kernels``.

    python -m benchmarks.kernel_tuning                  # GPU only: n = 4096, 16384; head dim 64
    python -m benchmarks.kernel_tuning --sizes 4096 --warps 4 8 --stages 2 3

(from the repository root; the benchmark is not part of the wheel)

For every option set ``c`` and each kernel ``K`` of an op (``forward``, ``dq``, ``dkdv``), ``K``
is launched with ``c`` while the op's other kernels keep :func:`default_launch_options`
(through :data:`zoo.kernels.triton_flash.LAUNCH`), and the pass that contains ``K`` is timed
(``triton.testing.do_bench``'s median): the forward pass for ``forward``; the backward pass
alone (from a retained graph) for ``dq`` and ``dkdv``. So within one kernel's rows the
differences are that kernel's. The best set per kernel is what ``LAUNCH`` should list.

Routing also gets a breakdown of one step at the default options (:func:`routing_breakdown`).

FlexAttention is tried on the same pattern with several BlockMask block sizes and tiles, and
each variant's time or error is reported. Writes ``kernel_tuning_gpu.md`` and ``.json`` to
``--out``.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import torch
from zoo.kernels import BlockSparsePlan

from benchmarks.attention_kernels import (
    CLUSTER,
    cluster_indices,
    environment,
    header,
    pattern,
    shape,
    timer,
)

KERNELS = ("forward", "dq", "dkdv")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _bench(fn) -> float:
    """Median milliseconds of ``fn``: ``do_bench`` on a GPU; on a CPU (the tests, under
    ``TRITON_INTERPRET=1``) the median of 3 after a warm-up."""
    return timer(torch.cuda.is_available())(fn)


def _forward_ms(make) -> float:
    with torch.no_grad():
        return _bench(make)


def _backward_ms(make) -> float:
    """The backward pass alone, replayed from one retained graph."""
    out = make()
    grad = torch.randn_like(out)
    return _bench(lambda: out.backward(grad, retain_graph=True))


def _inputs(n: int, d: int):
    """``q, k, v`` ``(B, H, n, d)``: bf16 on a GPU, fp32 on a CPU, at the benchmark's shapes."""
    cuda = torch.cuda.is_available()
    B, H = shape(n, d, cuda)
    return [torch.randn(B, H, n, d, device=DEVICE, dtype=torch.bfloat16 if cuda else torch.float32,
                        requires_grad=True) for _ in range(3)]  # fmt: skip


def block_sparse_op(n: int, d: int, block: int, layout: str = "fixed"):
    from zoo.kernels.triton_block_sparse import block_sparse_attention_triton

    q, k, v = _inputs(n, d)
    pat = pattern(layout, block)
    H = q.shape[1]
    plan = BlockSparsePlan(
        pat.layout(n, block, H if pat.per_head else None), block, n, mask_mod=pat.mask_mod
    ).to(q.device)
    tables = plan.kernel_tables(H)
    return lambda: block_sparse_attention_triton(q, k, v, tables, block, d**-0.5)


def routing_inputs(n: int, d: int, cluster: int = CLUSTER):
    q, _, v = _inputs(n, d)
    B, H = q.shape[:2]
    return q, v, cluster_indices(B, H, n, min(cluster, n), DEVICE)


def routing_op(n: int, d: int, block: int, cluster: int = CLUSTER):
    from zoo.kernels.triton_routing import routing_attention_triton

    q, v, idx = routing_inputs(n, d, cluster)
    return lambda: routing_attention_triton(q, q, v, idx, block=block)


def sweep(op: str, make, n: int, d: int, configs, tile: int) -> list[dict]:
    """One row per (kernel, option set): the time of the pass holding that kernel."""
    from zoo.kernels import triton_flash as flash

    rows = []
    for (warps, stages), kernel in itertools.product(configs, KERNELS):
        flash.LAUNCH.clear()
        flash.LAUNCH[(f"{op}.{kernel}", d)] = {"num_warps": warps, "num_stages": stages}
        row = {"op": op, "n": n, "d": d, "tile": tile, "kernel": kernel, "num_warps": warps,
               "num_stages": stages}  # fmt: skip
        try:
            row["ms"] = _forward_ms(make) if kernel == "forward" else _backward_ms(make)
        except Exception as e:  # a set that does not fit (shared memory) must not stop the sweep
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"
        finally:
            flash.LAUNCH.clear()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def routing_breakdown(n: int, d: int, cluster: int = CLUSTER) -> dict:
    """Milliseconds of the parts of one routing step at the default options: the whole op,
    the scatter back to positions (our :func:`segment_sum` against PyTorch's ``index_add``,
    :func:`zoo.kernels.routing.scatter_mean`), and dense causal SDPA over the same entries."""
    import torch.nn.functional as F
    from zoo.kernels.routing import scatter_mean
    from zoo.kernels.triton_routing import routing_attention_triton, scatter_plan, segment_sum

    q, v, idx = routing_inputs(n, d, cluster)
    B, H, n_clusters, w = idx.shape
    T = q.shape[2]

    def whole():
        return routing_attention_triton(q, q, v, idx)

    y = torch.randn(B, H, n_clusters, w, d, device=DEVICE, dtype=q.dtype)
    plan = scatter_plan(idx, T)
    qc = q.detach()[:, :, : n_clusters * w].reshape(B, H * n_clusters, w, d).requires_grad_()
    parts = {
        "whole forward": _forward_ms(whole),
        "whole backward": _backward_ms(whole),
        "scatter_plan": _bench(lambda: scatter_plan(idx, T)),
        "segment_sum (mean)": _bench(lambda: segment_sum(y, plan, T, mean=True, dtype=q.dtype)),
        "index_add scatter_mean": _bench(lambda: scatter_mean(y, idx, T)),
        "sdpa forward, same entries": _forward_ms(
            lambda: F.scaled_dot_product_attention(qc, qc, qc, is_causal=True)
        ),
        "sdpa backward, same entries": _backward_ms(
            lambda: F.scaled_dot_product_attention(qc, qc, qc, is_causal=True)
        ),
    }
    row = {"op": "routing", "n": n, "d": d, "w": w, "breakdown": parts}
    print(json.dumps(row), flush=True)
    return row


FLEX_VARIANTS = {
    "mask 128, default tiles": (128, None),
    "mask 64, tiles 64": (
        64,
        {
            "BLOCK_M": 64,
            "BLOCK_N": 64,
            "BLOCK_M1": 64,
            "BLOCK_N1": 64,
            "BLOCK_M2": 64,
            "BLOCK_N2": 64,
        },
    ),  # fmt: skip
    "mask 64, forward tiles 64 only": (64, {"BLOCK_M": 64, "BLOCK_N": 64}),
    "mask (128, 64), default tiles": ((128, 64), None),
}


def flex(n: int, d: int, block: int) -> list[dict]:
    """FlexAttention on the benchmark's fixed pattern, one row per variant."""
    import torch._dynamo
    import torch._functorch.config
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    # every variant is a recompile: past Dynamo's limit (8) Flex silently runs unfused; and the
    # backward pass is replayed from a retained graph, which donated buffers forbid
    torch._dynamo.config.recompile_limit = 64
    torch._functorch.config.donated_buffer = False
    pat = pattern("fixed", block)
    compiled = torch.compile(flex_attention)
    rows = []
    for name, (mask_block, tiles) in FLEX_VARIANTS.items():
        q, k, v = _inputs(n, d)
        H = q.shape[1]
        row = {"op": "flex", "n": n, "d": d, "variant": name}
        try:
            mask = torch.compile(create_block_mask)(
                lambda b, h, qi, ki: pat.mask_mod(h, qi, ki), None, H if pat.per_head else None,
                n, n, device="cuda", BLOCK_SIZE=mask_block,
            )  # fmt: skip

            def run(q=q, k=k, v=v, mask=mask, tiles=tiles):
                return compiled(q, k, v, block_mask=mask, kernel_options=tiles)

            row["fwd_ms"] = _forward_ms(run)
            row["bwd_ms"] = _backward_ms(run)
            row["mask_density"] = mask.sparsity() if hasattr(mask, "sparsity") else None
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        torch.cuda.empty_cache()
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def best(rows: list[dict]) -> dict:
    """``{(op, tile, n, kernel): fastest row}``."""
    out = {}
    for r in rows:
        if "ms" not in r:
            continue
        key = (r["op"], r["tile"], r["n"], r["kernel"])
        if key not in out or r["ms"] < out[key]["ms"]:
            out[key] = r
    return out


def report(rows: list[dict], env: dict) -> str:
    """The markdown: per kernel, its time at the default options and at the best set; then the
    routing breakdowns and the Flex variants."""
    from zoo.kernels.triton_flash import default_launch_options

    lines = header("Kernel launch options", env)
    lines += [
        "",
        "Milliseconds of the pass that holds the kernel (`--help`); default = "
        "`default_launch_options`.",
        "",
        "| op | tile | n | d | kernel | default ms | best ms | best num_warps | best num_stages "
        "| gain |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    timed = {
        (r["op"], r["tile"], r["n"], r["kernel"], r["num_warps"], r["num_stages"]): r["ms"]
        for r in rows
        if "ms" in r
    }
    for (op, tile, n, kernel), r in sorted(best(rows).items()):
        dflt = default_launch_options(r["d"])
        base = timed.get((op, tile, n, kernel, dflt["num_warps"], dflt["num_stages"]))
        shown = "" if base is None else f"{base:.3g}"
        gain = "" if base is None else f"{base / r['ms']:.2f}x"
        lines.append(
            f"| {op} | {tile} | {n} | {r['d']} | {kernel} | {shown} | {r['ms']:.3g} "
            f"| {r['num_warps']} | {r['num_stages']} | {gain} |"
        )
    for r in rows:
        if "breakdown" in r:
            lines += ["", f"Routing breakdown, n {r['n']}, d {r['d']} (ms):", ""]
            lines += [f"- {k}: {v:.3g}" for k, v in r["breakdown"].items()]
    flex_rows = [r for r in rows if r["op"] == "flex"]
    if flex_rows:
        lines += [
            "",
            "| FlexAttention variant | n | fwd ms | bwd ms | error |",
            "|---|---|---|---|---|",
        ]
        for r in flex_rows:
            f, b = r.get("fwd_ms"), r.get("bwd_ms")
            lines.append(f"| {r['variant']} | {r['n']} | {'' if f is None else f'{f:.3g}'} | "
                         f"{'' if b is None else f'{b:.3g}'} | {r.get('error', '')} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[4096, 16384])
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--warps", type=int, nargs="+", default=[4, 8])
    p.add_argument("--stages", type=int, nargs="+", default=[2, 3, 4])
    p.add_argument("--routing-tiles", type=int, nargs="+", default=[64, 128])
    p.add_argument("--parts", nargs="+", default=["block_sparse", "routing", "breakdown", "flex"],
                   choices=["block_sparse", "routing", "breakdown", "flex"])  # fmt: skip
    p.add_argument("--block", type=int, default=64, help="layout block size")
    p.add_argument("--cluster", type=int, default=CLUSTER,
                   help="routing: tokens per cluster (the routing presets have 128)")  # fmt: skip
    p.add_argument("--out", type=Path, default=Path("docs/bench"))
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("kernel_tuning needs a CUDA GPU: the launch options are GPU-only")
    configs = list(itertools.product(args.warps, args.stages))
    d, rows = args.head_dim, []
    for part, n in itertools.product(args.parts, args.sizes):  # Flex, which compiles slowly, last
        if part == "block_sparse":
            rows += sweep(
                "block_sparse", block_sparse_op(n, d, args.block), n, d, configs, args.block
            )
        elif part == "routing":
            for tile in args.routing_tiles:
                rows += sweep("routing", routing_op(n, d, tile, args.cluster), n, d, configs, tile)
        elif part == "breakdown":
            rows.append(routing_breakdown(n, d, args.cluster))
        else:
            rows += flex(n, d, args.block)
    env = environment()
    env["command"] = env["command"].replace("benchmarks.attention_kernels", "benchmarks.kernel_tuning", 1)
    text = report(rows, env)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "kernel_tuning_gpu.md").write_text(text)
    (args.out / "kernel_tuning_gpu.json").write_text(
        json.dumps({"environment": env, "rows": rows}, indent=1)
    )


if __name__ == "__main__":
    main()
