"""Where a causal-routing model's shifted-key heads look during the copy probe (issue 53,
docs/long_context.md §11b): for a planted span at ``q = n - m`` and again at ``q - d``, the share
of the second copy's queries whose source key ``t - d`` is in their cluster window, and the
attention weight on it (content scores as the layer computes them; 4 pg19mini test windows).

    python experiments/long_range/attention_on_source.py RUN/checkpoints/best.ckpt 1024
"""

import sys
from collections import defaultdict

import numpy as np
import torch

from zoo.data.byte_corpora import load_byte_corpus
from zoo.tasks import CausalLM


def main(ckpt: str, d: int, trials: int = 4, m: int = 32, cue: int = 8) -> None:
    model = CausalLM.load_from_checkpoint(ckpt, map_location="cpu").model.eval()
    n = model.config.max_seq_len
    text = np.frombuffer(b"".join(load_byte_corpus("pg19mini", splits=("test",))["test"]), np.uint8)
    rng = np.random.default_rng(0)
    rows = defaultdict(list)
    for _ in range(trials):
        start = rng.integers(0, len(text) - n)
        x = torch.tensor(text[start : start + n].astype(np.int64))[None]
        span = torch.tensor(rng.integers(97, 123, m))
        q0 = n - m
        x[0, q0:], x[0, q0 - d : q0 - d + m] = span, span
        inputs = {}
        hooks = [
            b.attention.register_forward_pre_hook(
                lambda _, a, i=i, s=inputs: s.__setitem__(i, a[0])
            )
            for i, b in enumerate(model.blocks)
            if getattr(b.attention, "kmeans", None) is not None
        ]
        with torch.no_grad():
            model(x)
            for h in hooks:
                h.remove()
            for i, h_in in inputs.items():
                attn = model.blocks[i].attention
                q, _ = attn.scaled(*attn.project(h_in)[3:5])
                clusters, before = attn.kmeans.assign(q)[0], torch.arange(n)
                for head in range(q.shape[1]):
                    qh, ch = q[0, head], clusters[head]
                    for t in range(q0 + cue, n - 1):
                        members = ((ch == ch[t]) & (before < t)).nonzero()[:, 0][
                            -attn.causal_window :
                        ]
                        w = torch.softmax((qh[members] @ qh[t]) * qh.shape[-1] ** -0.5, 0)
                        hit = members == t - d
                        rows[(i, head)].append((bool(hit.any()), float(w[hit].sum()), len(members)))
    for (layer, head), r in sorted(rows.items()):
        a = np.array(r, dtype=float)
        print(f"layer {layer} head {head}: source in cluster window {a[:, 0].mean():.2f}, "
              f"weight on source {a[:, 1].mean():.3f}, members {a[:, 2].mean():.0f}")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
