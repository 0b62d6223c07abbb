#!/usr/bin/env bash
# Test bits per byte of every published pg19mini language model on a book that no recipe trains
# on: War and Peace (Project Gutenberg ebook 2600, not one of pg19mini's 60 books), its last 5 %
# (`zoo evaluate --text-file` splits a file 90/5/5 % in order: 164,516 bytes), in fp32, each model
# at its own context in non-overlapping windows as for the registered test metric (issue 53, the
# goal "every 4,096-context LM beats every <= 512-context LM on a held-out book").
#   ZOO_DATA_DIR=... bash experiments/long_range/held_out_book.sh [OUT_DIR [NAME ...]]
# writes OUT_DIR/<name>.json (zoo evaluate --out) and OUT_DIR/held_out_book.md (the table, from
# every JSON in OUT_DIR: name checkpoints after OUT_DIR to measure only those).
set -euo pipefail
book=${ZOO_DATA_DIR:?set ZOO_DATA_DIR to the folder holding gutenberg/}/gutenberg/pg2600_war_and_peace.txt.gz
out=${1:-docs/bench/held_out_book}
mkdir -p "$out"
names=("${@:2}")
[ ${#names[@]} -gt 0 ] || names=(transformer_lm_small.pg19mini transformer_lm_small_rotary.pg19mini
    routing_transformer_small.pg19mini routing_transformer_small_local.pg19mini
    routing_transformer_small_top2.pg19mini sparse_transformer_small.pg19mini
    sparse_transformer_small_strided.pg19mini sparse_transformer_strided_8k.pg19mini
    transformer_lm_small_moba.pg19mini)
for name in "${names[@]}"; do
  /usr/bin/time -f "$name: %e s" zoo evaluate "$name" --text-file "$book" --split test \
      --out "$out/$name.json"
done
python - "$out" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = ["| checkpoint | context | War and Peace, last 5 % (bits/byte) | bytes |", "|---|---|---|---|"]
for f in sorted(out.glob("*.json"), key=lambda f: json.loads(f.read_text())[-1]["value"]):
    m = json.loads(f.read_text())[-1]
    rows.append(f"| {f.stem} | {m['context']:,} | {m['value']:.4f} | {m['targets']:,} |")
(out / "held_out_book.md").write_text("\n".join(rows) + "\n")
print("\n".join(rows))
PY
