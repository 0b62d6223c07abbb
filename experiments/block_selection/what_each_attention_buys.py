"""What each attention buys: the published pg19mini models of one size, side by side.

Every row is a published checkpoint of the same size (4 layers, d = 256, 8 heads, about 3.2M
parameters) trained on pg19mini; the table reads what was measured for each, never a figure typed
in:

- pg19mini test bits/byte, whole split, fp32: the registry (checkpoints.yaml);
- War and Peace, last 5 %, bits/byte: ``docs/bench/held_out_book/NAME.json``
  (experiments/long_range/held_out_book.sh);
- the copy probe's gain by span kind at one distance (1,024 bytes; 128 for the 256-byte models),
  bits/byte with its 95 % interval: ``docs/bench/copy_by_kind/NAME/copy_probe.json``
  (``zoo evaluate NAME --probe copy --span-kind letters text digits --distances D --name NAME``);
- training-step and cached-decoding tokens/s at the model's context on this machine:
  ``docs/bench/copy_by_kind/NAME/bench.json`` (``zoo bench NAME --lengths CONTEXT --threads 2``),
  all measured in one sitting so they compare.

    python experiments/block_selection/what_each_attention_buys.py            # the page, from files
    python experiments/block_selection/what_each_attention_buys.py --measure  # measure what is missing

It writes docs/bench/what_each_attention_buys/ (``.md``, ``.json``, ``.png``).

A row whose files are missing shows a dash; ``--measure`` runs the commands above for them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "docs" / "bench"
KINDS = ("letters", "text", "digits")
# name: (short label, what its attention is)
MODELS = {
    "transformer_lm_small_rotary.pg19mini": ("dense 256", "dense, context 256"),
    "routing_transformer_small_local.pg19mini": ("local", "local, window 128"),
    "routing_transformer_small.pg19mini": ("routing", "local + causal content routing"),
    "routing_transformer_small_top2.pg19mini": (
        "top2 routing", "local + routing (shifted keys) in the top 2 layers",
    ),
    "transformer_lm_small_moba.pg19mini": ("MoBA", "MoBA, blocks of 128, top-4"),
    "transformer_lm_small_nsa.pg19mini": ("NSA", "NSA"),
}


def distance(context: int) -> int:
    return 1024 if context >= 2048 else 128


def measure(name: str, entry: dict) -> None:
    """Run what ``name`` lacks: its War and Peace score, its probe by kind, its bench."""
    context = entry["structure"]["context"]
    out = BENCH / "copy_by_kind" / name
    zoo = str(Path(sys.executable).with_name("zoo"))
    if not (BENCH / "held_out_book" / f"{name}.json").exists():
        subprocess.run(["bash", str(ROOT / "experiments/long_range/held_out_book.sh"),
                        str(BENCH / "held_out_book"), name], check=True)  # fmt: skip
    if not (out / "copy_probe.json").exists():
        subprocess.run([zoo, "evaluate", name, "--probe", "copy", "--span-kind", *KINDS,
                        "--distances", str(distance(context)), "--name", name,
                        "--out-dir", str(out)], check=True)  # fmt: skip
    if not (out / "bench.json").exists():
        subprocess.run([zoo, "bench", name, "--device", "cpu", "--threads", "2", "--lengths",
                        str(context), "--out-dir", str(out)], check=True)  # fmt: skip


def row(name: str, entry: dict) -> dict:
    from zoo.profiles import load_copy_probe

    test = next(
        m["value"] for m in entry["metrics"]
        if m["name"] == "bits_per_byte" and m["split"] == "test" and m["windows"] is None
    )  # fmt: skip
    label, attention = MODELS[name]
    r = {"name": name, "label": label, "attention": attention, "test": test,
         "context": entry["structure"]["context"], "bytes": entry["training"]["tokens"]}  # fmt: skip
    book = BENCH / "held_out_book" / f"{name}.json"
    r["book"] = json.loads(book.read_text())[-1]["value"] if book.exists() else None
    out = BENCH / "copy_by_kind" / name
    if (out / "copy_probe.json").exists():
        probe = load_copy_probe(out)
        d = distance(r["context"])
        r["distance"] = d
        for kind in KINDS:
            p = probe[kind]
            i = p.distances.index(d)
            r[kind] = (p.gain[i], p.gain_low[i], p.gain_high[i])
    if (out / "bench.json").exists():
        bench = json.loads((out / "bench.json").read_text())
        last = bench["rows"][-1]
        r["train_tps"] = last["seq_len"] / last["train_step_s"]
        r["decode_tps"] = last["generate_tokens_per_s"]
        r["hardware"] = bench["hardware"]
    return r


def fmt(x, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def table(rows: list[dict]) -> str:
    hw = sorted({r["hardware"] for r in rows if "hardware" in r})
    lines = [
        "# What each attention buys",
        "",
        "The published pg19mini models of one size (4 layers, d = 256, 8 heads, about 3.2M "
        "parameters), each scored in fp32. Copy gain: the copy probe's saving in bits/byte on the "
        "second copy of a 32-byte span planted d bytes earlier (d = 1,024; 128 for the 256-byte "
        "model), on 32 windows of pg19mini test, with its 95 % interval; `letters` is random "
        "lowercase letters (the kind the top2 model's curriculum planted), `text` natural text "
        "from elsewhere in the split, `digits` random digits. Tokens/s: one training step "
        "(forward and backward, fp32, batch 1) and cached greedy decoding at the model's "
        f"context, measured in one sitting on {', '.join(hw) or '–'}. "
        "`python experiments/block_selection/what_each_attention_buys.py` builds this page.",
        "",
        "| checkpoint | attention | context | training bytes | pg19mini test | War and Peace "
        "| copy gain, letters | text | digits | train tokens/s | decode tokens/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        gains = [
            "–" if kind not in r else f"{r[kind][0]:+.2f} [{r[kind][1]:+.2f}, {r[kind][2]:+.2f}]"
            for kind in KINDS
        ]
        lines.append(
            f"| `{r['name']}` | {r['attention']} | {r['context']:,} | {r['bytes'] / 1e6:.1f}M "
            f"| {r['test']:.4f} | {fmt(r['book'], '.4f')} | {' | '.join(gains)} "
            f"| {fmt(r.get('train_tps'), ',.0f')} | {fmt(r.get('decode_tps'), ',.0f')} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [f"{r['label']}\n{r['bytes'] / 1e6:.1f}M bytes" for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.5))
    x = range(len(rows))
    a.bar([i - 0.2 for i in x], [r["test"] for r in rows], 0.4, label="pg19mini test")
    a.bar([i + 0.2 for i in x], [r["book"] or 0 for r in rows], 0.4, label="War and Peace")
    a.set_ylim(1.4, max(r["test"] for r in rows) + 0.1)
    a.set_ylabel("bits/byte (lower is better)")
    a.set_xticks(list(x), names, )
    a.legend()
    a.set_title("Text")
    for j, kind in enumerate(KINDS):
        vals = [r[kind][0] if kind in r else 0 for r in rows]
        err = [[r[kind][0] - r[kind][1] if kind in r else 0 for r in rows],
               [r[kind][2] - r[kind][0] if kind in r else 0 for r in rows]]  # fmt: skip
        b.bar([i + (j - 1) * 0.27 for i in x], vals, 0.27, yerr=err, label=kind)
    b.axhline(0, color="black", lw=0.5)
    b.set_ylabel("copy gain, bits/byte (higher is better)")
    b.set_xticks(list(x), names, )
    b.legend(title="span kind")
    b.set_title("Retrieval: a span repeated 1,024 bytes back (128 for dense256)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measure", action="store_true", help="first measure what is missing")
    parser.add_argument("--out", type=Path, default=BENCH / "what_each_attention_buys")
    ns = parser.parse_args()
    registry = yaml.safe_load((ROOT / "checkpoints.yaml").read_text())["checkpoints"]
    published = [n for n in MODELS if n in registry]
    if ns.measure:
        for name in published:
            measure(name, registry[name])
    rows = [row(n, registry[n]) for n in published]
    ns.out.mkdir(parents=True, exist_ok=True)
    text = table(rows)
    (ns.out / "what_each_attention_buys.md").write_text(text)
    (ns.out / "what_each_attention_buys.json").write_text(json.dumps(rows, indent=1))
    plot(rows, ns.out / "what_each_attention_buys.png")
    print(text)


if __name__ == "__main__":
    main()
