#!/usr/bin/env bash
# Publish a finished training stage (a Lightning .ckpt of the whole run) as a checkpoint of the
# zoo, with every curve of the other 4,096-context cards: what recipes/hub/publish.sh does for a
# run directory, plus the copy probe by span kind, its registered copy_gain and the bench.
#
#   ZOO_DATA_DIR=... bash experiments/block_selection/publish_stage.sh STAGE NAME RECIPE [OUT]
#   bash experiments/block_selection/publish_stage.sh experiments/block_selection/stages/nsa_pg19mini.ckpt \
#       transformer_lm_small_nsa.pg19mini "$RECIPE"
#
# RECIPE is the stage's recipe moved to recipes/<family>/ and named after the checkpoint (a
# published checkpoint's recipe lives there: tests/test_docs_paths.py).
# OUT (default runs/publish/NAME) keeps the measurements: results.json (test, valid, the
# 65,536-byte test slice and copy_gain at d = 1,024), by_position/, by_context/, copy_probe/ (six
# span kinds at seven distances), bench/. Then `zoo export --register` writes checkpoints/NAME/
# and its checkpoints.yaml entry, `zoo list --write-readme` the README's table, and
# what_each_attention_buys.py --measure adds its row (War and Peace, probes, tokens/s) to the
# comparison. About 40 minutes on 2 CPU cores for a 3.2M-parameter model at 4,096 bytes.
# A step whose output is already in OUT is skipped, so a run cut short goes on where it stopped
# (give the same OUT; delete an output to measure it again).
set -euo pipefail
STAGE=${1:?usage: publish_stage.sh STAGE NAME RECIPE [OUT]}
NAME=${2:?usage: publish_stage.sh STAGE NAME RECIPE [OUT]}
RECIPE=${3:?usage: publish_stage.sh STAGE NAME RECIPE [OUT]}
OUT=${4:-runs/publish/$NAME}
ZOO=${ZOO:-zoo}
mkdir -p "$OUT"
have() { [ -e "$1" ] && echo "publish_stage.sh: $1 is there, not measured again"; }
if ! have "$OUT/results.json"; then  # the three bits/byte, moved into place once all are measured
  rm -f "$OUT/results.partial.json"
  $ZOO evaluate "$STAGE" --split test --out "$OUT/results.partial.json"
  $ZOO evaluate "$STAGE" --split valid --out "$OUT/results.partial.json"
  $ZOO evaluate "$STAGE" --split test --first-bytes 65536 --out "$OUT/results.partial.json"
  mv "$OUT/results.partial.json" "$OUT/results.json"
fi
have "$OUT/by_position/by_position.json" ||
  $ZOO evaluate "$STAGE" --split test --by-position --name "$NAME" --out-dir "$OUT/by_position"
have "$OUT/by_context/by_context.json" ||
  $ZOO evaluate "$STAGE" --by-context --block-spacing 4096 --name "$NAME" --out-dir "$OUT/by_context"
have "$OUT/copy_probe/copy_probe.json" ||
  $ZOO evaluate "$STAGE" --probe copy --distances 32 64 128 256 512 1024 2048 \
    --span-kind letters uppercase digits printable bytes text --name "$NAME" --out-dir "$OUT/copy_probe"
python - "$OUT" <<'PY'
import datetime
import json
import sys

from zoo.callbacks import hardware
from zoo.evaluation import save_metric
from zoo.probes import gain_metric
from zoo.profiles import load_copy_probe

out = sys.argv[1]
if any(m["name"] == "copy_gain" for m in json.load(open(f"{out}/results.json"))):
    sys.exit(0)  # recorded by an earlier run
metric = gain_metric(load_copy_probe(f"{out}/copy_probe"), 1024, hardware=hardware(),
                     date=datetime.date.today().isoformat())
save_metric(metric, f"{out}/results.json")
print(metric)
PY
CURVES=(--by-position "$OUT/by_position" --by-context "$OUT/by_context" --copy-probe "$OUT/copy_probe")
$ZOO export "$STAGE" --name "$NAME" --recipe "$RECIPE" --results "$OUT/results.json" --register "${CURVES[@]}"
have "$OUT/bench/bench.json" ||
  $ZOO bench "./checkpoints/$NAME" --device cpu --threads 2 --out-dir "$OUT/bench"
$ZOO export "$STAGE" --name "$NAME" --recipe "$RECIPE" --results "$OUT/results.json" --register \
  "${CURVES[@]}" --bench "$OUT/bench"
$ZOO list --write-readme
python experiments/block_selection/what_each_attention_buys.py --measure
