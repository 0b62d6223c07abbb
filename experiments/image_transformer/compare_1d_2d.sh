#!/usr/bin/env bash
# Issue 57's short controlled comparison: the Image Transformer with local 1-D and with local 2-D
# attention (recipes/image_transformer/cifar10_{1d,2d}.yaml), the same seed, data order and
# wall-clock budget (MINUTES each, default 12, Lightning's max_time; the cosine schedule is set for
# STEPS steps so that both decay alike), one after the other on the same CPU; validation bits/dim
# on the same 500 held-out images. The faster attention sees more images in the same time, which
# is the comparison a CPU user faces. Prints each run's steps and val bits/dim.
#   ZOO_DATA_DIR=../shared/data bash experiments/image_transformer/compare_1d_2d.sh [OUT]
set -euo pipefail
OUT=${1:-runs/image_transformer_compare}
ZOO=${ZOO:-zoo}
MINUTES=${MINUTES:-12}
STEPS=${STEPS:-1000}
mkdir -p "$OUT"
for pattern in 1d 2d; do
  sed "s#runs/image_transformer/cifar10_$pattern#$OUT/$pattern#g" \
    "recipes/image_transformer/cifar10_$pattern.yaml" > "$OUT/$pattern.yaml"
  $ZOO fit --config "$OUT/$pattern.yaml" --trainer.max_steps "$STEPS" \
    --trainer.max_time "$(printf '00:00:%02d:00' "$MINUTES")" --trainer.val_check_interval "$STEPS" \
    > "$OUT/$pattern.log" 2>&1
  printf '%s: %s steps; ' "$pattern" \
    "$(awk -F, 'NR > 1 && $2 != "" {s = $2} END {print s + 1}' "$OUT/$pattern/logs/version_0/metrics.csv")"
  $ZOO evaluate "$OUT/$pattern/checkpoints/last.ckpt" --dataset cifar10 --split valid --windows 500 \
    --out "$OUT/$pattern.json" | tail -1
done
