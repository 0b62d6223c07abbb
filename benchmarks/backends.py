"""Does ``ZOO_ATTENTION_BACKEND=auto`` pick the fastest verified backend on this device?

    python -m benchmarks.backends                      # GPU: n = 4,096; CPU: n = 1,024
    python -m benchmarks.backends --n 16384 --out docs/bench/backends_gpu_h200

(from the repository root). For each op of the dispatch table (``zoo.kernels.OPS``) and each
backend (``triton``, ``flex``, ``torch``), forced with ``ZOO_ATTENTION_BACKEND`` through the
dispatching op, so the numbers are those of the code path a model takes:

1. **verified**: the output (and, for the ops that train, the gradients of q, k, v) against the
   fp64 spec at a small ragged shape (n = 500, 4 heads, head dim 64), within 2e-2 in bf16 and
   2e-5 in fp32. A backend that falls back (a warning) or fails is not verified here;
2. **time**: the median of the op at ``--n`` (bf16 on a GPU, fp32 on a CPU; batch and heads as
   ``benchmarks.attention_kernels``): forward only for ``block_sparse_forward``, forward+backward otherwise.
   The block-sparse ops run the fixed pattern of ``benchmarks.attention_kernels`` with 64-blocks; routing
   runs shared causal clusters of 256 random sorted positions.

The last columns say which backend ``auto`` picks here and whether it is the fastest of the
verified ones: the goal of issue 56 is that it always is. The table and a JSON are written to
``--out`` with the device name and the software versions; ``zoo.kernels.FASTEST`` is filled from
such tables, with the GPU and the date.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

import torch
import zoo.kernels as kernels
from zoo.kernels import masked_attention_ref, routing_attention_ref

from benchmarks.attention_kernels import cluster_indices, environment, header, pattern, shape, timer

BACKENDS = ("triton", "flex", "torch")
TOL = {torch.bfloat16: 2e-2, torch.float32: 2e-5}


def call(op: str, q, k, v, n: int, idx=None):
    """The dispatching op for ``op`` on ``q, k, v`` (the fixed pattern, or clusters ``idx``)."""
    if op == "routing":
        return kernels.routing_attention(q, q, v, idx)
    pat = pattern("fixed", 64)
    return kernels.block_sparse_attention(
        q, k, v, pat.layout(n, 64, q.shape[1]), 64, mask_mod=pat.mask_mod
    )


def spec(op: str, q, k, v, n: int, idx=None):
    if op == "routing":
        return routing_attention_ref(q, q, v, idx)
    return masked_attention_ref(q, k, v, pattern("fixed", 64).mask(n, q.shape[1]))


def inputs(n: int, heads: int, batch: int, device, dtype, grad: bool, w: int):
    g = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(batch, heads, n, 64, generator=g, device=device, dtype=dtype)
               .requires_grad_(grad) for _ in range(3))  # fmt: skip
    return q, k, v, cluster_indices(batch, heads, n, min(w, n), device)


def verify(op: str, device, dtype) -> str:
    """``"yes (max error e)"`` or why not, for the backend ``ZOO_ATTENTION_BACKEND`` names."""
    grad = op != "block_sparse_forward"
    n = 500 if op != "routing" else 512
    q, k, v, idx = inputs(n, 4, 2, device, dtype, grad, 128)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a fallback is not this backend
            with torch.set_grad_enabled(grad):
                got = call(op, q, k, v, n, idx)
                want = spec(op, q, k, v, n, idx)
                errors = [(got.double() - want).abs().max().item()]
                if grad:
                    dy = torch.randn_like(want)
                    inputs_ = (q, v) if op == "routing" else (q, k, v)  # routing: k is q
                    g_got = torch.autograd.grad(got, inputs_, dy.to(got.dtype))
                    g_want = torch.autograd.grad(want, inputs_, dy)
                    errors += [(a.double() - b).abs().max().item()
                               for a, b in zip(g_got, g_want, strict=True)]  # fmt: skip
    except Exception as e:  # a fallback warning or a failure: report, go on
        return f"no: {_why(e)}"
    worst = max(errors)
    return f"{'yes' if worst <= TOL[dtype] else 'no'} (max error {worst:.1e})"


def measure(op: str, n: int, device, dtype) -> float | str:
    cuda = device.type == "cuda"
    batch, heads = shape(n, 64, cuda)
    grad = op != "block_sparse_forward"
    q, k, v, idx = inputs(n, heads, batch, device, dtype, grad, 256)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            if not grad:
                with torch.no_grad():
                    return timer(cuda)(lambda: call(op, q, k, v, n, idx))
            dy = torch.randn(batch, heads, n, 64, device=device, dtype=dtype)
            wrt = (q, v) if op == "routing" else (q, k, v)
            return timer(cuda)(lambda: torch.autograd.grad(call(op, q, k, v, n, idx), wrt, dy))
    except Exception as e:
        return _why(e)


def _why(e: Exception) -> str:
    """A short cell: a fallback's reason, or the error's type and first words."""
    text = str(e).splitlines()[0] if str(e) else ""
    if isinstance(e, UserWarning) and "cannot run this call (" in text:
        return "falls back: " + text.split("cannot run this call (", 1)[1].split(")", 1)[0][:70]
    return f"{type(e).__name__}: {text[:70]}"


def run(n: int) -> list[dict]:
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    rows, saved = [], os.environ.get("ZOO_ATTENTION_BACKEND")
    try:
        for op in kernels.OPS:
            for name in BACKENDS:
                os.environ["ZOO_ATTENTION_BACKEND"] = name
                if name == "triton" and not cuda:  # CPU tensors never launch Triton kernels
                    row = {"op": op, "backend": name, "verified": "no: needs CUDA", "ms": "-"}
                else:
                    row = {"op": op, "backend": name, "verified": verify(op, device, dtype)}
                    falls_back = row["verified"].startswith("no: falls back")
                    row["ms"] = "-" if falls_back else measure(op, n, device, dtype)
                rows.append(row)
                print(row, flush=True)
            os.environ.pop("ZOO_ATTENTION_BACKEND")
            probe = torch.zeros(1, device=device)
            auto = kernels.choose(op, probe)
            timed = [r for r in rows if r["op"] == op and r["verified"].startswith("yes")
                     and isinstance(r["ms"], float)]  # fmt: skip
            best = min(timed, key=lambda r: r["ms"])["backend"] if timed else None
            for r in rows:
                if r["op"] == op:
                    r["auto"], r["fastest_verified"] = auto, best
    finally:
        if saved is None:
            os.environ.pop("ZOO_ATTENTION_BACKEND", None)
        else:
            os.environ["ZOO_ATTENTION_BACKEND"] = saved
    return rows


def report(rows: list[dict], env: dict, n: int) -> str:
    lines = [*header("Attention backends against the dispatch table", env), "",
             f"n = {n}, head dim 64; ms: median, forward only for block_sparse_forward, "
             "forward+backward otherwise.", "",
             "| op | backend | verified against the spec | ms | auto picks | fastest verified |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        ms = f"{r['ms']:.3f}" if isinstance(r["ms"], float) else r["ms"]
        lines.append(f"| {r['op']} | {r['backend']} | {r['verified']} | {ms} | {r['auto']} | "
                     f"{r['fastest_verified']} |")  # fmt: skip
    if not torch.cuda.is_available():
        return (
            "\n".join(
                [
                    *lines,
                    "",
                    "On a CPU `auto` is the PyTorch path by design (Flex runs "
                    "eagerly there, with the n x n scores in memory): not checked.",
                ]
            )
            + "\n"
        )
    ok = all(r["auto"] == r["fastest_verified"] for r in rows if r["fastest_verified"])
    lines += [
        "",
        f"auto picks the fastest verified backend for every op: **{'yes' if ok else 'no'}**",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=None, help="sequence length (GPU 4096, CPU 1024)")
    p.add_argument("--out", type=Path, default=None, help="write OUT.md and OUT.json")
    args = p.parse_args(argv)
    n = args.n or (4096 if torch.cuda.is_available() else 1024)
    rows = run(n)
    env = environment()
    env["command"] = "python -m benchmarks.backends " + " ".join(sys.argv[1:])
    text = report(rows, env, n)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".md").write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps({"env": env, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
