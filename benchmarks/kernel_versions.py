"""The Triton kernels of this checkout against those of another, side by side in one process.

    python -m benchmarks.kernel_versions --old /tmp/old      # GPU: n = 4096, 16384; head dim 64
    python -m benchmarks.kernel_versions --old /tmp/old --sizes 4096 --rounds 5

(from the repository root; ``/tmp/old`` is any checkout, e.g. ``git worktree add /tmp/old HEAD~1``;
the benchmark is not part of the wheel)

The other checkout's ``kernels/triton_flash.py``, ``triton_block_sparse.py`` and
``triton_routing.py`` are loaded beside this checkout's, each ``triton_*`` module bound to its own
``triton_flash``. Everything else (plans, tables, the PyTorch ops) is this checkout's. Both
versions then run on the same inputs, at the shapes of ``python -m benchmarks.attention_kernels``: the fixed
layout (stride 512, c = one block) for block-sparse attention, shared causal clusters of 512
random sorted positions for routing (``--cluster``: the routing presets have 128). The versions
take turns for ``--rounds`` rounds; each time is ``triton.testing.do_bench``'s median, and the
table gives the median over the rounds, with dense causal SDPA over the same sequence as the
yardstick. On a CPU it runs only under
``TRITON_INTERPRET=1``, for the tests. Writes ``kernel_versions_{gpu,cpu}.md`` and ``.json`` to
``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import statistics
import sys
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F
import zoo.kernels
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

MODULES = ("triton_block_sparse", "triton_routing")
OPS = ("block_sparse", "routing")
CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"


@contextlib.contextmanager
def _flash_bound_to(flash: ModuleType):
    """While loading a ``triton_*`` module, ``zoo.kernels.triton_flash`` is ``flash``."""
    name = "zoo.kernels.triton_flash"
    saved = sys.modules.get(name), getattr(zoo.kernels, "triton_flash", None)
    sys.modules[name] = flash
    zoo.kernels.triton_flash = flash
    try:
        yield
    finally:
        if saved[0] is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = saved[0]
        zoo.kernels.triton_flash = saved[1]


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton's jit reads the functions' source through the module
    spec.loader.exec_module(module)
    return module


def load_kernels(checkout: Path) -> dict[str, ModuleType]:
    """``{"triton_block_sparse": module, "triton_routing": module}`` from ``checkout/kernels``.
    Raises ``SystemExit`` naming the missing file when ``checkout`` has no such kernels."""
    where = checkout / "kernels"
    missing = [f for f in ("triton_flash.py", *(m + ".py" for m in MODULES))
               if not (where / f).is_file()]  # fmt: skip
    if missing:
        raise SystemExit(f"--old {checkout}: no {', '.join(missing)} under {where}; "
                         "pass the root of a checkout of this repository")  # fmt: skip
    tag = f"_kernels_of_{abs(hash(str(checkout.resolve())))}"
    flash = _load(where / "triton_flash.py", f"{tag}.triton_flash")
    with _flash_bound_to(flash):
        return {m: _load(where / f"{m}.py", f"{tag}.{m}") for m in MODULES}


def _inputs(n: int, d: int, requires_grad: bool):
    B, H = shape(n, d, CUDA)
    dtype = torch.bfloat16 if CUDA else torch.float32
    g = torch.Generator(device=DEVICE).manual_seed(0)
    return [torch.randn(B, H, n, d, device=DEVICE, dtype=dtype, generator=g,
                        requires_grad=requires_grad) for _ in range(3)]  # fmt: skip


def op(kind: str, module: ModuleType, n: int, d: int, block: int, backward: bool,
       cluster: int = CLUSTER):  # fmt: skip
    """A callable running one pass (forward, or forward and backward) of ``kind`` through the
    Triton module ``module``."""
    q, k, v = _inputs(n, d, backward)
    if kind == "block_sparse":
        pat = pattern("fixed", block)
        H = q.shape[1]
        plan = BlockSparsePlan(
            pat.layout(n, block, H if pat.per_head else None), block, n, mask_mod=pat.mask_mod
        ).to(q.device)
        tables = plan.kernel_tables(H)

        def attend():
            return module.block_sparse_attention_triton(q, k, v, tables, block, d**-0.5)
    else:
        idx = cluster_indices(*q.shape[:2], n, min(cluster, n), DEVICE)

        def attend():
            return module.routing_attention_triton(q, k, v, idx)

    if not backward:

        def forward():
            with torch.no_grad():
                return attend()

        return forward
    grad = torch.randn_like(q)
    return lambda: attend().backward(grad)


def sdpa(n: int, d: int, backward: bool):
    """Dense causal SDPA over the same sequence, the yardstick."""
    q, k, v = _inputs(n, d, backward)
    if not backward:
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    grad = torch.randn_like(q)
    return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)


def measure(new: dict, old: dict, sizes, d: int, block: int, rounds: int, ops=OPS,
            cluster: int = CLUSTER) -> list[dict]:  # fmt: skip
    """One row per (op, n, pass): the median over ``rounds`` of each version's time, the
    versions taking turns within every round."""
    bench = timer(CUDA)
    rows = []
    for kind in ops:
        module = f"triton_{kind}"
        for n in sizes:
            for backward in (False, True):
                runs = {"new": op(kind, new[module], n, d, block, backward, cluster),
                        "old": op(kind, old[module], n, d, block, backward, cluster)}  # fmt: skip
                times = {name: [] for name in runs}
                for _ in range(rounds):
                    for name, fn in runs.items():
                        times[name].append(bench(fn))
                row = {"op": kind if kind == "block_sparse" else f"routing w={min(cluster, n)}",
                       "n": n, "d": d, "pass": "fwd+bwd" if backward else "fwd",
                       **{f"{name}_ms": statistics.median(t) for name, t in times.items()},
                       "sdpa_ms": bench(sdpa(n, d, backward))}  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
                if CUDA:
                    torch.cuda.empty_cache()
    return rows


def report(rows: list[dict], env: dict, old: str) -> str:
    lines = header(f"Triton kernels, this checkout against {old}", env)
    lines += [
        "",
        "Milliseconds (`--help`). old ÷ new > 1 means this checkout is faster.",
        "",
        "| op | n | d | pass | new ms | old ms | old ÷ new | dense causal SDPA ms | new ÷ SDPA |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['op']} | {r['n']} | {r['d']} | {r['pass']} | {r['new_ms']:.3g} "
            f"| {r['old_ms']:.3g} | {r['old_ms'] / r['new_ms']:.2f} | {r['sdpa_ms']:.3g} "
            f"| {r['new_ms'] / r['sdpa_ms']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", type=Path, required=True, help="the other checkout's root")
    p.add_argument("--sizes", type=int, nargs="+", default=[4096, 16384])
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--block", type=int, default=64, help="layout block size")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cluster", type=int, default=CLUSTER,
                   help="routing: tokens per cluster (the routing presets have 128)")  # fmt: skip
    p.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    p.add_argument("--out", type=Path, default=Path("docs/bench"))
    args = p.parse_args(argv)
    new = {m: importlib.import_module(f"zoo.kernels.{m}") for m in MODULES}
    old = load_kernels(args.old)
    rows = measure(new, old, args.sizes, args.head_dim, args.block, args.rounds, args.ops,
                   args.cluster)  # fmt: skip
    env = environment()
    env["command"] = env["command"].replace("benchmarks.attention_kernels", "benchmarks.kernel_versions", 1)
    text = report(rows, env, str(args.old))
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"kernel_versions_{'gpu' if CUDA else 'cpu'}"
    stem.with_suffix(".md").write_text(text)
    stem.with_suffix(".json").write_text(json.dumps({"env": env, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
