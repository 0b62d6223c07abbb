"""Does FlexAttention run on this CPU with this torch? (issue 56, item 1: a first check)

    python experiments/kernels/flex_cpu_check.py [--n 512] [--window 128] [--threads 1]

Builds a causal sliding-window ``BlockMask`` on the CPU, runs ``flex_attention`` eagerly and under
``torch.compile``, and prints each step's wall time and its largest difference from PyTorch's SDPA
with the same boolean mask (fp32, batch 1, 2 heads, head dim 64). experiments/kernels/log.md records a run.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--window", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    n, w = args.n, args.window
    q, k, v = (torch.randn(1, 2, n, 64) for _ in range(3))

    def causal_window(b, h, qi, ki):
        return (ki <= qi) & (qi - ki < w)

    rows, cols = torch.arange(n)[:, None], torch.arange(n)[None, :]
    dense = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=causal_window(0, 0, rows, cols)
    )
    start = time.perf_counter()
    mask = create_block_mask(causal_window, B=None, H=None, Q_LEN=n, KV_LEN=n, device="cpu")
    print(f"create_block_mask: {time.perf_counter() - start:.1f} s")
    for name, fn in (("eager", flex_attention), ("compiled", torch.compile(flex_attention))):
        start = time.perf_counter()
        try:
            out = fn(q, k, v, block_mask=mask)
        except Exception as e:  # report, do not stop: the question is whether it runs
            print(f"{name}: failed ({type(e).__name__}: {str(e).splitlines()[0][:200]})")
            continue
        diff = (out - dense).abs().max().item()
        print(f"{name}: {time.perf_counter() - start:.1f} s, max |difference| from SDPA {diff:.1e}")


if __name__ == "__main__":
    main()
