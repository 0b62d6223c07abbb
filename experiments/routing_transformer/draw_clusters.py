"""Draw what a trained Routing Transformer's heads attend to on a real validation window.

Left: the (query, key) pairs of the first ``--n`` positions that one routing head of ``--layer``
computes under top-w routing, coloured by cluster, over the local heads' window (grey). Right: the
same head's clusters under causal routing. Like Figure 1 of Roy et al. (2020), but measured.

    python experiments/routing_transformer/draw_clusters.py \\
        --ckpt runs/routing_transformer/pg19mini/checkpoints/last.ckpt --out docs/img/routing_clusters.png

Needs the pg19mini validation books (ZOO_DATA_DIR or --data-dir).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from zoo.attention import RoutingSelfAttention
from zoo.data import ByteTextDataModule
from zoo.tasks import CausalLM


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", type=Path, required=True)
    parser.add_argument("--data-dir")
    parser.add_argument("--layer", type=int, default=-1, help="layer (default: the top one)")
    parser.add_argument("--head", type=int, default=0, help="routing head within the layer")
    parser.add_argument("--n", type=int, default=384, help="positions drawn")
    parser.add_argument("--out", type=Path, default=Path("docs/img/routing_clusters.png"))
    ns = parser.parse_args()

    model = CausalLM.load_from_checkpoint(ns.ckpt, map_location="cpu").model.eval()
    T = model.config.max_seq_len
    data = ByteTextDataModule("pg19mini", data_dir=ns.data_dir, seq_len=T, eval_batch_size=1)
    data.setup("validate")
    idx = next(iter(data.val_dataloader()))[0]  # (1, T)
    attn = model.blocks[ns.layer].attention
    if not isinstance(attn, RoutingSelfAttention) or attn.kmeans is None:
        raise SystemExit(f"layer {ns.layer} has no routing heads")
    captured = {}
    handle = attn.register_forward_pre_hook(lambda m, args: captured.setdefault("x", args[0]))
    with torch.no_grad():
        model(idx)
    handle.remove()
    with torch.no_grad():
        *_, qr, kr, _ = attn.project(captured["x"])
        q_idx, _ = attn.select(qr, kr)  # (1, h, k, w) top-w members over the whole window
        nearest = attn.kmeans.assign(qr)[0, ns.head]  # (T,) causal routing's clusters

    n, h = ns.n, ns.head
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    local = (i - j >= 0) & (i - j < attn.window)
    topw = np.full((n, n), -1)
    for c, members in enumerate(q_idx[0, h].tolist()):
        m = np.array([p for p in members if p < n], dtype=int)
        if len(m):
            qi, kj = np.meshgrid(m, m, indexing="ij")
            keep = kj <= qi
            topw[qi[keep], kj[keep]] = c
    near = nearest[:n].numpy()
    causal = np.full((n, n), -1)
    for q in range(n):  # the last causal_window members of q's cluster, up to q
        members = np.flatnonzero(near[: q + 1] == near[q])[-attn.causal_window :]
        causal[q, members] = near[q]

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = attn.kmeans.centroids.shape[1]
    cmap = plt.get_cmap("tab20", k)
    fig, axes = plt.subplots(1, 2, figsize=(11, 5.4))
    for ax, clusters, title in (
        (axes[0], topw, f"top-w routing (w = {q_idx.shape[-1]} over {T} positions)"),
        (axes[1], causal, "causal routing (nearest centroid)"),
    ):
        img = np.ones((n, n, 3))
        img[local] = 0.85
        on = clusters >= 0
        img[on] = cmap(clusters[on] % 20)[:, :3]
        ax.imshow(img, interpolation="nearest")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
    fig.suptitle(
        f"layer {ns.layer % len(model.blocks)}, routing head {h}, first {n} bytes of a validation "
        f"window; grey: the local heads' window ({attn.window}); colours: clusters",
        fontsize=10,
    )
    fig.tight_layout()
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(ns.out, dpi=110)
    print(f"wrote {ns.out}")


if __name__ == "__main__":
    main()
