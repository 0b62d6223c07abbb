"""What each attention buys: the published pg19mini models of one size, side by side.

Every row is a published checkpoint of the same size (4 layers, d = 256, 8 heads, about 3.2M
parameters) trained on pg19mini; the tables read what was measured for each, never a figure typed
in:

- pg19mini test bits/byte, whole split, fp32: the registry (checkpoints.yaml);
- War and Peace, last 5 %, bits/byte: ``docs/bench/held_out_book/NAME.json``
  (experiments/long_range/held_out_book.sh);
- bits/byte of the same test bytes by context length: the card's ``by_context.json``
  (``zoo evaluate NAME --by-context --block-spacing 4096``);
- the copy probe's gain by span kind at one distance (1,024 bytes; 128 for the 256-byte models),
  bits/byte with its 95 % interval: ``docs/bench/copy_by_kind/NAME/copy_probe.json``
  (``zoo evaluate NAME --probe copy --span-kind letters text digits --distances D``);
- the gain by distance: random letters from the card's ``copy_probe.json``, natural text from the
  card where it has that kind, else ``docs/bench/copy_by_kind/NAME/by_distance/copy_probe.json``
  (``zoo evaluate NAME --probe copy --span-kind text --distances 32 64 ...``);
- training-step and cached-decoding tokens/s at the model's context on this machine:
  ``docs/bench/copy_by_kind/NAME/bench.json`` (``zoo bench NAME --lengths CONTEXT --threads 2``),
  all measured in one sitting so they compare.

    python experiments/block_selection/what_each_attention_buys.py            # the page, from files
    python experiments/block_selection/what_each_attention_buys.py --measure  # measure what is missing

It writes docs/bench/what_each_attention_buys/ (``.md``, ``.json``, ``.png``) and the README's
table (between its ``what-each-attention-buys`` markers). A row whose files are missing shows a
dash; ``--measure`` runs the commands above for them.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "docs" / "bench"
CARDS = ROOT / "checkpoints"
README = ROOT / "README.md"
KINDS = ("letters", "text", "digits")
BY_DISTANCE = ("letters", "text")  # the kinds shown at every distance
DISTANCES = (32, 64, 128, 256, 512, 1024, 2048)
MARKERS = ("<!-- what-each-attention-buys:start", "<!-- what-each-attention-buys:end -->")
# name: (short label, what its attention is)
MODELS = {
    "transformer_lm_small_rotary.pg19mini": ("dense 256", "dense, context 256"),
    "routing_transformer_small_local.pg19mini": ("local", "local, window 128"),
    "routing_transformer_small.pg19mini": ("routing", "local + causal content routing"),
    "routing_transformer_small_top2.pg19mini": (
        "top2 routing", "local + routing (shifted keys) in the top 2 layers",
    ),
    "transformer_lm_small_moba.pg19mini": ("MoBA", "MoBA, blocks of 128, top-4"),
    "transformer_lm_small_nsa.pg19mini": (
        "NSA", "NSA: compressed 32/16, 6 blocks of 64, window 128",
    ),
}


def distance(context: int) -> int:
    return 1024 if context >= 2048 else 128


def measure(name: str, entry: dict) -> None:
    """Run what ``name`` lacks: its War and Peace score, its probes, its bench."""
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
    missing = [k for k in BY_DISTANCE if k not in by_distance(name)]
    if missing:
        fits = [str(d) for d in DISTANCES if d <= context - 32]
        subprocess.run([zoo, "evaluate", name, "--probe", "copy", "--span-kind", *missing,
                        "--distances", *fits, "--name", name,
                        "--out-dir", str(out / "by_distance")], check=True)  # fmt: skip
    if not (out / "bench.json").exists():
        subprocess.run([zoo, "bench", name, "--device", "cpu", "--threads", "2", "--lengths",
                        str(context), "--out-dir", str(out)], check=True)  # fmt: skip


def by_distance(name: str) -> dict[str, dict[int, tuple[float, float, float]]]:
    """``{kind: {d: (gain, low, high)}}`` for the kinds of :data:`BY_DISTANCE`, from the card's
    probe first, then the one measured here (``copy_by_kind/NAME/by_distance``)."""
    from zoo.profiles import load_copy_probe

    found: dict[str, dict[int, tuple[float, float, float]]] = {}
    for folder in (CARDS / name, BENCH / "copy_by_kind" / name / "by_distance"):
        if not (folder / "copy_probe.json").exists():
            continue
        probe = load_copy_probe(folder)
        for p in getattr(probe, "probes", (probe,)):
            if p.span_kind in BY_DISTANCE and p.span_kind not in found and len(p.distances) > 1:
                found[p.span_kind] = {
                    d: (g, lo, hi)
                    for d, g, lo, hi in zip(p.distances, p.gain, p.gain_low, p.gain_high, strict=True)
                }
    return found


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
    r["by_distance"] = {k: {str(d): g for d, g in v.items()} for k, v in by_distance(name).items()}
    context = CARDS / name / "by_context.json"
    if context.exists():
        c = json.loads(context.read_text())
        r["by_context"] = {str(n): b for n, b in zip(c["contexts"], c["bits"], strict=True)}
        if 256 in c["contexts"] and c["contexts"][-1] > 256:  # what the full context saves over 256
            i = c["contexts"].index(256)
            r["context_gain"] = (c["gain"][i], c["gain_se"][i])
    if (out / "bench.json").exists():
        bench = json.loads((out / "bench.json").read_text())
        last = bench["rows"][-1]
        r["train_tps"] = last["seq_len"] / last["train_step_s"]
        r["decode_tps"] = last["generate_tokens_per_s"]
        r["hardware"] = bench["hardware"]
    return r


def fmt(x, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def gain(r: dict, kind: str, d: int | None = None, interval: bool = True) -> str:
    """A copy gain cell: at the row's distance (``d`` None) or at ``d`` by distance."""
    g = r.get("by_distance", {}).get(kind, {}).get(str(d))
    if d is None or (g is None and r.get("distance") == d):
        g = r.get(kind)  # the probe by kind, at the row's distance
    if g is None:
        return "–"
    return f"{g[0]:+.2f} [{g[1]:+.2f}, {g[2]:+.2f}]" if interval else f"{g[0]:+.2f}"


def context_gain(r: dict) -> str:
    g = r.get("context_gain")
    return "–" if g is None else f"{g[0]:+.3f} ± {g[1]:.3f}"


def summary(rows: list[dict]) -> str:
    """The README's table: one line per model, the figures a user compares first."""
    lines = [
        "| checkpoint | attention | training bytes | pg19mini test | War and Peace "
        "| 4,096 bytes of context save over 256 | copy gain, text, d = 128 | d = 1,024 "
        "| letters, d = 1,024 | train tokens/s | decode tokens/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| `{r['name']}` | {r['attention']} | {r['bytes'] / 1e6:.1f}M | {r['test']:.4f} "
            f"| {fmt(r['book'], '.4f')} | {context_gain(r)} "
            f"| {gain(r, 'text', 128, False)} | {gain(r, 'text', 1024, False)} "
            f"| {gain(r, 'letters', 1024, False)} "
            f"| {fmt(r.get('train_tps'), ',.0f')} | {fmt(r.get('decode_tps'), ',.0f')} |"
        )
    return "\n".join(lines) + "\n"


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
        "![What each attention buys: text, retrieval by distance, context]"
        "(what_each_attention_buys.png)",
        "",
        "| checkpoint | attention | context | training bytes | pg19mini test | War and Peace "
        "| copy gain, letters | text | digits | train tokens/s | decode tokens/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| `{r['name']}` | {r['attention']} | {r['context']:,} | {r['bytes'] / 1e6:.1f}M "
            f"| {r['test']:.4f} | {fmt(r['book'], '.4f')} "
            f"| {' | '.join(gain(r, kind) for kind in KINDS)} "
            f"| {fmt(r.get('train_tps'), ',.0f')} | {fmt(r.get('decode_tps'), ',.0f')} |"
        )
    for kind in BY_DISTANCE:
        lines += [
            "",
            f"## Copy gain by distance: {kind}",
            "",
            f"Bits/byte saved on the second copy of a 32-byte span of {kind} planted d bytes "
            "earlier (32 windows, 95 % intervals), from each card's probe or "
            "`copy_by_kind/NAME/by_distance/`; a dash where d does not fit the context or was "
            "not measured.",
            "",
            "| checkpoint | " + " | ".join(f"d = {d:,}" for d in DISTANCES) + " |",
            "|---|" + "---|" * len(DISTANCES),
        ]
        for r in rows:
            cells = " | ".join(gain(r, kind, d) for d in DISTANCES)
            lines.append(f"| `{r['name']}` | {cells} |")
    contexts = sorted({int(c) for r in rows for c in r.get("by_context", {})})
    lines += [
        "",
        "## Bits/byte by context length",
        "",
        "The same 94,720 bytes of pg19mini test (370 blocks of 256 bytes, one at the end of every "
        "4,096-byte window), scored with windows of each context length (each card's "
        "`by_context.json`, `zoo evaluate NAME --by-context --block-spacing 4096`). The last "
        "column is what the model's full context saves over 256 bytes, ± its standard error over "
        "the blocks.",
        "",
        "| checkpoint | " + " | ".join(f"{c:,}" for c in contexts) + " | saved over 256 |",
        "|---|" + "---|" * (len(contexts) + 1),
    ]
    for r in rows:
        cells = " | ".join(fmt(r.get("by_context", {}).get(str(c)), ".4f") for c in contexts)
        lines.append(f"| `{r['name']}` | {cells} | {context_gain(r)} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [f"{r['label']}\n{r['bytes'] / 1e6:.1f}M bytes" for r in rows]
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(17, 4.8))
    x = range(len(rows))
    a.bar([i - 0.2 for i in x], [r["test"] for r in rows], 0.4, label="pg19mini test")
    a.bar([i + 0.2 for i in x], [r["book"] or 0 for r in rows], 0.4, label="War and Peace")
    a.set_ylim(1.4, max(r["test"] for r in rows) + 0.1)
    a.set_ylabel("bits/byte (lower is better)")
    a.set_xticks(list(x), names, fontsize=8)
    a.legend()
    a.set_title("Text")
    for i, r in enumerate(rows):
        color = f"C{i}"
        for kind, style in zip(BY_DISTANCE, ("-", "--"), strict=True):
            gains = r.get("by_distance", {}).get(kind, {})
            points = sorted((int(d), g[0]) for d, g in gains.items())
            if points:
                b.plot(*zip(*points, strict=True), style, marker="o", ms=3, color=color,
                       label=f"{r['label']}, {kind}")  # fmt: skip
        ctx = sorted((int(n), v) for n, v in r.get("by_context", {}).items())
        if ctx:
            c.plot(*zip(*ctx, strict=True), marker="o", ms=3, color=color, label=r["label"])
    b.axhline(0, color="black", lw=0.5)
    b.set_xscale("log", base=2)
    b.set_xlabel("distance d between the copies (bytes)")
    b.set_ylabel("copy gain, bits/byte (higher is better)")
    b.set_title("Retrieval: a 32-byte span repeated d bytes back")
    b.legend(fontsize=7, ncol=2)
    c.set_xscale("log", base=2)
    c.set_ylim(None, 1.95)
    c.set_xlabel("context length (bytes)")
    c.set_ylabel("bits/byte on the same test bytes")
    c.set_title("Context: the same bytes, more or less context")
    c.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_readme(text: str, readme: Path = README) -> None:
    """Replace the table between the README's markers with ``text``."""
    start, end = MARKERS
    old = readme.read_text()
    pattern = re.compile(re.escape(start) + r".*?-->\n.*?" + re.escape(end), re.S)
    if not pattern.search(old):
        raise SystemExit(f"{readme} has no {start} ... {end} block: add the markers first")
    block = f"{start} (generated by what_each_attention_buys.py) -->\n{text}{end}"
    readme.write_text(pattern.sub(lambda _: block, old))


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
    write_readme(summary(rows))
    print(text)


if __name__ == "__main__":
    main()
