"""Training throughput of the translation models by attention mapping, side by side in one run.

One training step (teacher-forced forward, label-smoothed cross-entropy, backward) of a real
Multi30k De->En batch of about ``--max-tokens`` padded source tokens, under bf16 autocast as the
recipes train, for every (model, mapping) pair; the pairs take turns round by round, so CPU noise
falls on all of them alike. Prints a table of target tokens per second (median over rounds) and
writes it to ``--out``.

    python experiments/lstm_attention/bench_mappings.py --tokenizer CKPT --out docs/bench/mappings_cpu.md

``--tokenizer`` is any Multi30k translation checkpoint (its BPE tokenizer encodes the batch).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import zoo
from zoo.data.translation import BOS_ID, EOS_ID, PAD_ID, load_pairs

MODELS = [  # (preset, config override, label)
    ("lstm_attention_small", {"mapping": "softmax"}, "LSTM, softmax"),
    ("lstm_attention_small", {"mapping": "sparsemax"}, "LSTM, sparsemax"),
    ("lstm_attention_small", {"mapping": "entmax15"}, "LSTM, entmax15"),
    ("lstm_attention_small", {"mapping": "fusedmax"}, "LSTM, fusedmax"),
    ("lstm_attention_small", {"mapping": "csparsemax"}, "LSTM, csparsemax"),
    ("transformer_small", {"attention_mapping": "softmax"}, "Transformer, softmax"),
    ("transformer_small", {"attention_mapping": "entmax15"}, "Transformer, entmax15"),
]


def batch(tokenizer, pairs, max_tokens: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(src, tgt_in, tgt_out)``: the first pairs whose padded source stays within
    ``max_tokens`` (at least one), padded with ``PAD_ID``."""
    src, tgt, longest = [], [], 0
    for s, t in pairs:
        s_ids, t_ids = tokenizer.encode(s).ids, tokenizer.encode(t).ids
        longest_if = max(longest, len(s_ids))
        if src and longest_if * (len(src) + 1) > max_tokens:
            break
        src.append(s_ids)
        tgt.append(t_ids)
        longest = longest_if

    def pad(seqs):
        n = max(map(len, seqs))
        return torch.tensor([q + [PAD_ID] * (n - len(q)) for q in seqs])

    return pad(src), pad([[BOS_ID, *t] for t in tgt]), pad([[*t, EOS_ID] for t in tgt])


def step(model, src, tgt_in, tgt_out) -> None:
    """One training step's compute: forward, label-smoothed cross-entropy, backward."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(src, tgt_in).logits
    loss = F.cross_entropy(
        logits.float().flatten(0, 1), tgt_out.flatten(), ignore_index=PAD_ID, label_smoothing=0.1
    )
    loss.backward()
    model.zero_grad(set_to_none=True)


def main() -> None:
    from zoo.callbacks import hardware
    from zoo.loading import load_model

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tokenizer", required=True, help="a Multi30k translation checkpoint")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    p.add_argument("--data-dir", help="default: $ZOO_DATA_DIR")
    p.add_argument("--out", help="also write the table to this markdown file")
    ns = p.parse_args()
    tokenizer = load_model(ns.tokenizer, task="Translation").tokenizer
    src, tgt_in, tgt_out = batch(
        tokenizer, load_pairs("multi30k", "train", "de", "en", data_dir=ns.data_dir), ns.max_tokens
    )
    n_target = int((tgt_out != PAD_ID).sum())
    torch.manual_seed(0)
    models = [
        zoo.create_model(preset, vocab_size=tokenizer.get_vocab_size(), **override).train()
        for preset, override, _ in MODELS
    ]
    times: list[list[float]] = [[] for _ in MODELS]
    for r in range(ns.warmup + ns.rounds):
        for i, model in enumerate(models):
            start = time.perf_counter()
            step(model, src, tgt_in, tgt_out)
            if r >= ns.warmup:
                times[i].append(time.perf_counter() - start)
    lines = [
        f"One training step (forward, loss, backward; bf16 autocast) of one Multi30k batch: "
        f"{src.shape[0]} sentences, {tuple(src.shape)} source, {n_target} target tokens; "
        f"median of {ns.rounds} rounds, models taking turns; torch {torch.__version__}, {hardware()}.",
        "",
        "| model | step ms (median) | target tokens/s | relative to the family's softmax |",
        "|---|---|---|---|",
    ]
    base: dict[str, float] = {}
    for (preset, _, label), t in zip(MODELS, times, strict=True):
        ms = statistics.median(t) * 1e3
        base.setdefault(preset, ms)
        lines.append(
            f"| {label} | {ms:.0f} | {n_target / ms * 1e3:,.0f} | {base[preset] / ms:.2f}× |"
        )
    table = "\n".join(lines) + "\n"
    print(table)
    if ns.out:
        Path(ns.out).write_text(table)


if __name__ == "__main__":
    main()
