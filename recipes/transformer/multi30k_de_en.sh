#!/usr/bin/env bash
# The Transformer paper's recipe end to end on Multi30k De->En: train, average the last N
# checkpoints (section 6.1; the recipe writes one every 100 steps to checkpoints/every100/), and
# translate the test set with beam search (beam 4, alpha 0.6) for BLEU with sacrebleu's signature.
#
#   recipes/transformer/multi30k_de_en.sh            # N=5; SKIP_FIT=1 reuses a finished run
set -euo pipefail
ZOO=${ZOO:-zoo}
N=${N:-5}
CONFIG=recipes/transformer/multi30k_de_en.yaml
RUN=runs/transformer/multi30k_de_en

[ "${SKIP_FIT:-0}" = 1 ] || $ZOO fit --config "$CONFIG"
$ZOO average "$RUN/checkpoints/every100" --last "$N" --out "$RUN/checkpoints/averaged.ckpt"
$ZOO test --config "$CONFIG" --ckpt_path "$RUN/checkpoints/averaged.ckpt"
