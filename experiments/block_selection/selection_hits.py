"""Does a block-selection model select the block that holds a repeat's first copy?

The copy probe (:mod:`zoo.probes`) finds that the published MoBA and NSA models gain almost
nothing from a span repeated 1,024 bytes back. Copying needs two things: the block that holds the
first copy must be among the query's selected blocks, and the attention inside must use it. This
script measures the first, on the copy probe's own trials (same windows, spans and distances for a
seed):

- for each trial the span is written at the window's end (``q = n - m``) and, for distance ``d``,
  also at ``p = q - d`` (the *repeat*), or only at the end (the *control*);
- each layer's selected blocks are read where the model calls
  :func:`zoo.kernels.block_select.block_select_attention` (MoBA's gated blocks; NSA's selected
  branch), for the queries whose next byte the probe scores (``q + cue - 1 .. n - 2``);
- the query at ``q + i`` needs the byte after the first copy's ``i``-th, at ``p + i + 1``: a *hit*
  is a (query, head) whose selected blocks include the block holding that position. The hit rate
  is the share of hits over trials, heads and scored queries, per layer. The control's rate is
  the same block's when it holds the original text: what the gate gives that block anyway;
- beside it the gain in bits/byte as the probe scores it (control - repeat, mean over trials, with
  the 95 % Student-t half-width).

A gate that finds repeats selects the first copy's block far more often with it than without it.

    python experiments/block_selection/selection_hits.py \
        transformer_lm_small_moba.pg19mini transformer_lm_small_nsa.pg19mini \
        --spans 32 128 512 --distances 256 1024 2048 --out docs/bench/selection_hits

It writes ``selection_hits.md`` and ``selection_hits.json`` under ``--out``. fp32, eval mode.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from pathlib import Path
from unittest import mock

import torch
import torch.nn.functional as F

from zoo.attention.mechanisms import moba, nsa
from zoo.data.span_kinds import documents, draw_spans, draw_windows
from zoo.errors import ConfigError
from zoo.lineage import device_name
from zoo.probes import copy_inputs, t_critical

SELECTING = (moba, nsa)  # the mechanisms that call block_select_attention by this name


@contextlib.contextmanager
def recording(rows: slice):
    """Within it, every call of ``block_select_attention`` by a selecting mechanism appends
    ``(blocks[:, :, rows], block_size)`` to the yielded list: ``(B, H, R, n)`` int64 block
    indices (-1: an empty slot), one entry per layer, in the order the layers run."""
    calls: list[tuple[torch.Tensor, int]] = []
    real = moba.block_select_attention

    def recorded(q, k, v, blocks, block_size, *args, **kwargs):  # noqa: ANN001, ANN202
        calls.append((blocks[:, :, rows].cpu(), block_size))
        return real(q, k, v, blocks, block_size, *args, **kwargs)

    with contextlib.ExitStack() as stack:
        for module in SELECTING:
            stack.enter_context(mock.patch.object(module, "block_select_attention", recorded))
        yield calls


def hits(blocks: torch.Tensor, block_size: int, targets: torch.Tensor) -> torch.Tensor:
    """``(B, H, R)`` bool: whether a query's selected ``blocks`` ``(B, H, R, n)`` include the
    block holding its target key position, ``targets`` ``(R,)`` or ``(B, R)`` int64."""
    want = (targets // block_size).expand(blocks.shape[0], -1)[:, None, :, None]  # (B, 1, R, 1)
    return (blocks == want).any(-1)


def uniform_chance(spec: dict, positions: torch.Tensor) -> float:
    """The hit rate of a gate that picked its free blocks uniformly among the eligible ones,
    averaged over the query ``positions`` (the target block taken as eligible and not forced).
    ``spec``: the model's attention, ``{"name": "moba" | "nsa", **params}``."""
    params = {k: v for k, v in spec.items() if k != "name"}
    if spec["name"] == "moba":
        m = moba.MoBAParams(**params)
        b, free, eligible = m.block_size, m.top_k - 1, positions // m.block_size
    elif spec["name"] == "nsa":
        s = nsa.NSAParams(**params)
        b, free = s.select_block, s.n_selected - s.n_initial - s.n_local
        eligible = positions // b - s.n_local + 1 - s.n_initial
    else:
        raise ConfigError(f"attention {spec['name']!r} selects no blocks: give a MoBA or NSA model")
    eligible = eligible.clamp(min=1).double()
    return float((eligible.clamp(max=free) / eligible).mean())


def _run(model, windows, spans, distance, rows, cue, batch_size):
    """Bits per byte of each trial ``(trials,)`` float64 on the scored bytes, and each layer's
    selected blocks of the scored queries, ``[(B=trials, H, R, n), block_size]`` per layer."""
    n, q = windows.shape[1], windows.shape[1] - spans.shape[1]
    bits, layers = [], []
    for s in range(0, len(windows), batch_size):
        x = torch.stack([copy_inputs(w, sp, distance) for w, sp in
                         zip(windows[s : s + batch_size], spans[s : s + batch_size],
                             strict=True)])  # fmt: skip
        with torch.no_grad(), recording(rows) as calls:
            logits = model(x).logits[:, q + cue - 1 : n - 1].float()
        nll = F.cross_entropy(logits.transpose(1, 2), x[:, q + cue :], reduction="none")
        bits.append(nll.double().mean(1) / math.log(2))
        layers.append(calls)
    if not layers[0]:
        raise ConfigError("the model selected no blocks: it has no MoBA or NSA layer")
    blocks = [
        (torch.cat([c[i][0] for c in layers]), layers[0][i][1]) for i in range(len(layers[0]))
    ]
    return torch.cat(bits), blocks


def measure(model, docs, *, span: int, distances, trials: int, cue: int, seed: int,
            batch_size: int = 4) -> list[dict]:  # fmt: skip
    """One row per distance of ``span``-byte natural-text spans (module docstring): the gain, and
    the repeat's and the control's hit rates per layer."""
    n = model.config.max_seq_len
    windows, where, rng = draw_windows(docs, n, trials, seed)
    spans = draw_spans("text", rng, docs, where, n, span, seed)
    q = n - span
    rows = slice(q + cue - 1, n - 1)  # the queries whose next byte is scored
    i = torch.arange(cue - 1, span - 1)  # their offset in the second copy
    control, control_blocks = _run(model, windows, spans, None, rows, cue, batch_size)
    out = []
    for d in distances:
        repeat, repeat_blocks = _run(model, windows, spans, d, rows, cue, batch_size)
        target = q - d + i + 1  # the byte after the first copy's i-th
        gains = control - repeat
        half = t_critical(trials - 1) * float(gains.std()) / math.sqrt(trials)

        out.append(dict(
            span=span, distance=d, control_bits=round(float(control.mean()), 4),
            gain=round(float(gains.mean()), 4), gain_half_width=round(half, 4),
            hit_repeat=_rates(repeat_blocks, target), hit_control=_rates(control_blocks, target),
        ))  # fmt: skip
    return out


def _rates(layers, target: torch.Tensor) -> list[float]:
    """Each layer's hit rate: the mean of :func:`hits` over trials, heads and queries."""
    return [round(float(hits(blk, b, target).double().mean()), 4) for blk, b in layers]


def table(results: dict[str, list[dict]], chance: dict[str, float]) -> str:
    """The Markdown table: a row per model, span and distance."""
    lines = [
        "| model | span | d | gain (bits/byte) | first copy's block selected, repeat (layer 0 / 1 / ...) "
        "| control | uniform chance |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, rows in results.items():
        for r in rows:
            rep = " / ".join(f"{x:.2f}" for x in r["hit_repeat"])
            ctl = " / ".join(f"{x:.2f}" for x in r["hit_control"])
            lines.append(
                f"| {name} | {r['span']} | {r['distance']:,} | {r['gain']:+.3f} ± "
                f"{r['gain_half_width']:.3f} | {rep} | {ctl} | {chance[name, r['span']]:.2f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+", help="published names, runs or checkpoints")
    p.add_argument("--spans", type=int, nargs="+", default=[32, 128, 512])
    p.add_argument("--distances", type=int, nargs="+", default=[256, 1024, 2048])
    p.add_argument("--trials", type=int, default=32)
    p.add_argument("--cue", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dataset", default="pg19mini")
    p.add_argument("--split", default="test")
    p.add_argument("--text-file", type=Path, help="windows and spans from this file instead")
    p.add_argument("--out", type=Path, required=True)
    ns = p.parse_args(argv)
    from zoo.loading import load_task
    from zoo.tasks import CausalLM

    results, chance = {}, {}
    for name in ns.models:
        model = load_task(name, CausalLM).model.float().eval()
        n, spec = model.config.max_seq_len, model.config.attention
        docs = documents(n, ns.dataset, ns.split, ns.text_file, None)
        results[name] = []
        for span in ns.spans:
            fit = [d for d in ns.distances if span <= d <= n - span]  # both copies in the window
            if not fit:
                raise ConfigError(f"no distance in [{span}, {n - span}] for a span of {span} bytes")
            results[name] += measure(model, docs, span=span, distances=fit,
                                     trials=ns.trials, cue=ns.cue, seed=ns.seed)  # fmt: skip
            chance[name, span] = uniform_chance(spec, torch.arange(n - span + ns.cue - 1, n - 1))
            print(table({name: [r for r in results[name] if r["span"] == span]}, chance),
                  flush=True)  # fmt: skip
    ns.out.mkdir(parents=True, exist_ok=True)
    cpu = f"{device_name()}, {torch.backends.cpu.get_cpu_capability()}"
    head = (f"# Does the gate select the first copy's block?\n\n`python experiments/block_selection/"
            f"selection_hits.py {' '.join(ns.models)} --spans {' '.join(map(str, ns.spans))} "
            f"--distances {' '.join(map(str, ns.distances))} --trials {ns.trials}`: "
            f"{ns.dataset} {ns.split}, natural-text spans, cue {ns.cue}, seed {ns.seed}; fp32 on "
            f"{cpu}, torch {torch.__version__}.\n\n")  # fmt: skip
    (ns.out / "selection_hits.md").write_text(head + table(results, chance) + "\n")
    (ns.out / "selection_hits.json").write_text(json.dumps(
        {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(ns).items()},
         "results": results,
         "chance": {f"{k[0]}@{k[1]}": v for k, v in chance.items()}}, indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
