#!/usr/bin/env bash
# The CIFAR-10 ablation of docs/results/images.md ("What moved the number: the positions"): the Sparse Transformer
# image recipe (cifar10_strided.yaml) with ONE change per run, 150 steps of 4 images each (or 75 of
# 8: the same images), the same seed; validation bits/dim on 100 held-out images.
#   ZOO_DATA_DIR=../shared/data bash experiments/sparse_transformer/cifar10_ablate.sh [OUT=runs/cifar10_ablation]
set -euo pipefail
OUT=${1:-runs/cifar10_ablation}
ZOO=${ZOO:-zoo}
mkdir -p "$OUT"
run() {
  name=$1 steps=$2; shift 2
  sed "s#runs/sparse_transformer/cifar10_strided#$OUT/$name#g" \
    recipes/sparse_transformer/cifar10_strided.yaml > "$OUT/$name.yaml"
  $ZOO fit --config "$OUT/$name.yaml" --trainer.max_steps "$steps" \
    --trainer.val_check_interval "$steps" --data.init_args.limit_eval 100 "$@" > "$OUT/$name.log" 2>&1
  printf '%-20s val bits/dim %s\n' "$name" \
    "$(awk -F, 'NR == 1 {for (i = 1; i <= NF; i++) if ($i == "val/bpd") c = i} NR > 1 && $c != "" {v = $c} END {print v}' \
       "$OUT/$name/logs/version_0/metrics.csv")"
}
ROTARY_GPT2='{"position": "rotary", "init_scheme": "gpt2", "tie_weights": true}'
run base 150                                   # learned row/column/channel embeddings (§7.2)
run lr1e-3 150 --model.init_args.lr 1e-3
run rotary 150 --model.init_args.model_config '{"position": "rotary"}'
run rotary_gpt2_tied 150 --model.init_args.model_config "$ROTARY_GPT2"
run rotary_gpt2_tied_b8 75 --model.init_args.model_config "$ROTARY_GPT2" \
  --data.init_args.batch_size 8 --model.init_args.warmup_steps 12
run rotary_gpt2_tied_lr1e-3 150 --model.init_args.model_config "$ROTARY_GPT2" --model.init_args.lr 1e-3
