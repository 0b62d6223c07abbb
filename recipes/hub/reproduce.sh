#!/usr/bin/env bash
# Pull a published checkpoint and re-measure every metric checkpoints.yaml registers for it.
#
#   recipes/hub/reproduce.sh NAME        e.g. recipes/hub/reproduce.sh transformer_lm_small.pg19mini
#
# `zoo pull` downloads every file at the pinned revision into the Hugging Face cache and verifies
# its sha256 (set OFFLINE=1 to skip it and use the copy shipped in checkpoints/NAME/);
# `zoo evaluate --registered` measures each registered metric the same way (data set, split,
# windows, precision) and fails if one differs by more than --tolerance bits per byte.
set -euo pipefail
NAME=${1:?usage: reproduce.sh NAME}
ZOO=${ZOO:-zoo}
[ "${OFFLINE:-0}" = 1 ] || $ZOO pull "$NAME"
$ZOO evaluate "$NAME" --registered
