#!/usr/bin/env bash
# Publish a CIFAR-10 Image Transformer, end to end after `zoo fit`:
#   1. bits/dim of the chosen checkpoint (CKPT, default the run's best.ckpt) on the whole test
#      split, the validation split (VALID_WINDOWS images, default all 2,000) and the seed-0 sample
#      of 16 test images (the slice CI re-measures), into RUN/results.json, fp32;
#   2. a grid of 8 samples and 8 half-image completions (`zoo sample`, temperature 1.0, seed 0);
#   3. zoo export --register into checkpoints/NAME, zoo bench, and the README's table.
#
#   recipes/image_transformer/publish.sh image_transformer_cifar10_1d_rotary.cifar10
#   SKIP_FIT=1 recipes/image_transformer/publish.sh NAME      # after the run, for the rest
set -euo pipefail
NAME=${1:?usage: publish.sh NAME (the name of a recipe in recipes/image_transformer/)}
ZOO=${ZOO:-zoo}
RECIPE=recipes/image_transformer/$NAME.yaml
RUN=runs/image_transformer/$NAME
CHOSEN=${CKPT:-$RUN/checkpoints/best.ckpt}
VALID=()
[ -z "${VALID_WINDOWS:-}" ] || VALID=(--windows "$VALID_WINDOWS")

[ "${SKIP_FIT:-0}" = 1 ] || $ZOO fit --config "$RECIPE"
rm -f "$RUN/results.json"
$ZOO evaluate "$CHOSEN" --dataset cifar10 --split test --precision 32-true --out "$RUN/results.json"
$ZOO evaluate "$CHOSEN" --dataset cifar10 --split valid "${VALID[@]}" --precision 32-true \
    --out "$RUN/results.json"
$ZOO evaluate "$CHOSEN" --dataset cifar10 --split test --windows 16 --precision 32-true \
    --out "$RUN/results.json"
$ZOO sample --checkpoint "$CHOSEN" --out "$RUN/samples.png" --num-samples 8 --completions 8 \
    --temperature 1.0 --seed 0
$ZOO export "$CHOSEN" --name "$NAME" --recipe "$RECIPE" --results "$RUN/results.json" \
    --samples "$RUN/samples.png" --register
$ZOO bench "$NAME" --out-dir "$RUN/bench"
$ZOO export "$CHOSEN" --name "$NAME" --recipe "$RECIPE" --results "$RUN/results.json" \
    --samples "$RUN/samples.png" --bench "$RUN/bench" --register
$ZOO list --write-readme
