#!/usr/bin/env bash
# Publish one checkpoint: train -> evaluate -> export + register -> push.
#
#   recipes/hub/publish.sh RECIPE NAME [REPO_ID]
#   recipes/hub/publish.sh recipes/transformer_lm/pg19mini.yaml transformer_lm_small.pg19mini
#
# 1. `zoo fit` trains the recipe (its run directory is the recipe's trainer.default_root_dir);
# 2. `zoo evaluate` measures bits per byte in fp32 on the whole test split, the whole validation
#    split, and the windows covering the first $SLICE_BYTES bytes of the test split (the slice
#    tests/test_published.py re-measures), into RUN/results.json;
#    `zoo evaluate --by-position` measures bits per byte by position in the window (test split)
#    into RUN/by_position/ (table, JSON, PNG), and `zoo evaluate --by-context` bits per byte of the
#    same test bytes by context length into RUN/by_context/ (one block at the end of every
#    $BY_CONTEXT_SPACING bytes, default 4096: the bytes of every published pg19mini card up to that context;
#    a model whose context is longer needs at least its context);
# 3. `zoo export --register` writes checkpoints/NAME/ (config.json, model.safetensors, README.md
#    model card with both curves, recipe.yaml, training.json, by_position.*, by_context.*) and its
#    checkpoints.yaml entry;
# 4. `zoo push --update-registry` uploads that folder and pins the commit in checkpoints.yaml. It
#    needs a token with write access to REPO_ID (HF_TOKEN); without one the script stops after
#    step 3 and says so (the shipped copy is then the only source of the weights).
# Then `zoo list --write-readme` regenerates the README's table. Set SKIP_FIT=1 to publish an
# existing run.
set -euo pipefail
RECIPE=${1:?usage: publish.sh RECIPE NAME [REPO_ID]}
NAME=${2:?usage: publish.sh RECIPE NAME [REPO_ID]}
REPO_ID=${3:-attention-zoo/$NAME}
SLICE_BYTES=${SLICE_BYTES:-65536}
BY_CONTEXT_SPACING=${BY_CONTEXT_SPACING:-4096}
ZOO=${ZOO:-zoo}
RUN=$($ZOO fit --config "$RECIPE" --print_config | sed -n 's/^  default_root_dir: *//p' | head -1)

[ "${SKIP_FIT:-0}" = 1 ] || $ZOO fit --config "$RECIPE"
rm -f "$RUN/results.json"
$ZOO evaluate "$RUN" --split test --out "$RUN/results.json"
$ZOO evaluate "$RUN" --split valid --out "$RUN/results.json"
$ZOO evaluate "$RUN" --split test --first-bytes "$SLICE_BYTES" --out "$RUN/results.json"
$ZOO evaluate "$RUN" --split test --by-position --out-dir "$RUN/by_position"
$ZOO evaluate "$RUN" --by-context --block-spacing "$BY_CONTEXT_SPACING" --out-dir "$RUN/by_context"
$ZOO export "$RUN" --name "$NAME" --recipe "$RECIPE" --repo-id "$REPO_ID" --register \
  --by-position "$RUN/by_position" --by-context "$RUN/by_context"
if [ -n "${HF_TOKEN:-}" ]; then
  $ZOO push "checkpoints/$NAME" --repo-id "$REPO_ID" --update-registry
else
  echo "publish.sh: HF_TOKEN is not set, so checkpoints/$NAME was not pushed; run" \
       "'zoo push checkpoints/$NAME --repo-id $REPO_ID --update-registry' with a write token." >&2
fi
$ZOO list --write-readme
