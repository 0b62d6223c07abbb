#!/usr/bin/env bash
# Publish a Multi30k LSTM checkpoint, end to end after `zoo fit` (the recipe stops itself once
# greedy val BLEU has not improved for 750 steps):
#   1. average the last N weights-only checkpoints (every 100 steps, Vaswani et al. section 6.1)
#      and compare best.ckpt against the average on val, greedy and beam 4 at two length
#      penalties (recipes/transformer/decoding_sweep.py);
#   2. measure the chosen checkpoint (CKPT=..., default the average) on test2016 and val with the
#      chosen decoding (ALPHA, default 1.0), greedy, and the first 100 test sentences (the slice CI
#      re-measures), into RUN/results.json;
#   3. its attention support and one test sentence's map (zoo evaluate --attention), zoo bench;
#   4. zoo export --register into checkpoints/NAME, and the README's table.
#
#   SWEEP_ONLY=1 recipes/lstm_attention/publish.sh lstm_attention_small.multi30k   # fit, step 1
#   SKIP_FIT=1 SKIP_SWEEP=1 CKPT=best ALPHA=0.6 recipes/lstm_attention/publish.sh NAME   # the rest,
#       with the checkpoint (averaged or best) and alpha that step 1's table chose on val
set -euo pipefail
NAME=${1:?usage: publish.sh NAME (the name of a recipe in recipes/lstm_attention/)}
ZOO=${ZOO:-zoo}
PYTHON=${PYTHON:-$(dirname "$(command -v "$ZOO")")/python}
N=${N:-5}
ALPHA=${ALPHA:-1.0}
RECIPE=recipes/lstm_attention/$NAME.yaml
RUN=runs/lstm_attention/$NAME
AVERAGED=$RUN/checkpoints/averaged$N.ckpt

[ "${SKIP_FIT:-0}" = 1 ] || $ZOO fit --config "$RECIPE"
$ZOO average "$RUN/checkpoints/every100" --last "$N" --out "$AVERAGED"
if [ "${SKIP_SWEEP:-0}" != 1 ]; then
  "$PYTHON" recipes/transformer/decoding_sweep.py --checkpoints "$RUN/checkpoints/best.ckpt" \
      "$AVERAGED" --splits val --beams 1 4 --alphas 0.6 1.0 --out "$RUN/decoding.jsonl"
  [ "${SWEEP_ONLY:-0}" != 1 ] || exit 0
fi
case "${CKPT:-averaged}" in
  averaged) CHOSEN=$AVERAGED ;;
  best) CHOSEN=$RUN/checkpoints/best.ckpt ;;
  *) CHOSEN=$CKPT ;;
esac
rm -f "$RUN/results.json"
BEAM=(--decoding beam --beam-size 4 --alpha "$ALPHA")
$ZOO evaluate "$CHOSEN" --dataset multi30k --split test "${BEAM[@]}" --out "$RUN/results.json"
$ZOO evaluate "$CHOSEN" --dataset multi30k --split test --decoding greedy --out "$RUN/results.json"
$ZOO evaluate "$CHOSEN" --dataset multi30k --split valid "${BEAM[@]}" --out "$RUN/results.json"
$ZOO evaluate "$CHOSEN" --dataset multi30k --split valid --decoding greedy --out "$RUN/results.json"
$ZOO evaluate "$CHOSEN" --dataset multi30k --split test --windows 100 "${BEAM[@]}" \
    --out "$RUN/results.json"
$ZOO evaluate "$CHOSEN" --attention --dataset multi30k --split test "${BEAM[@]:2}" \
    --name "$NAME" --out-dir "$RUN/attention"
$ZOO export "$CHOSEN" --name "$NAME" --recipe "$RECIPE" --results "$RUN/results.json" \
    --attention "$RUN/attention" --register
$ZOO bench "$NAME" --out-dir "$RUN/bench"
$ZOO export "$CHOSEN" --name "$NAME" --recipe "$RECIPE" --results "$RUN/results.json" \
    --attention "$RUN/attention" --bench "$RUN/bench" --register
$ZOO list --write-readme
