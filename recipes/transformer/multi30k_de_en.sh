#!/usr/bin/env bash
# The Transformer paper's recipe end to end on Multi30k De->En: train, average the last N
# checkpoints (section 6.1; the recipe writes one every 100 steps to checkpoints/every100/), test
# with the paper's decoding (beam 4, alpha 0.6) through Lightning, then greedy and beam search at
# alpha 0.6 and 2.0 (2.0: chosen on val, docs/translation.md) on val and test2016.
#
#   recipes/transformer/multi30k_de_en.sh      # N=5; SKIP_FIT=1 reuses a finished run; ZOO=.venv/bin/zoo
set -euo pipefail
ZOO=${ZOO:-zoo}
PYTHON=${PYTHON:-$(dirname "$(command -v "$ZOO")")/python}
N=${N:-5}
CONFIG=recipes/transformer/multi30k_de_en.yaml
RUN=runs/transformer/multi30k_de_en
AVERAGED=$RUN/checkpoints/averaged$N.ckpt

[ "${SKIP_FIT:-0}" = 1 ] || $ZOO fit --config "$CONFIG"
$ZOO average "$RUN/checkpoints/every100" --last "$N" --out "$AVERAGED"
$ZOO test --config "$CONFIG" --ckpt_path "$AVERAGED"
"$PYTHON" recipes/transformer/decoding_sweep.py --checkpoints "$RUN/checkpoints/last.ckpt" "$AVERAGED" \
    --splits val test_2016_flickr --beams 1 4 --alphas 0.6 2.0 --out "$RUN/decoding.jsonl"
