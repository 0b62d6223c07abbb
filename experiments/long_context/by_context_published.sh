#!/usr/bin/env bash
# Bits per byte of the same pg19mini test bytes at contexts 64 ... 4,096, for every published
# pg19mini language model (experiments/long_context/log.md §5h). One target block of 256 bytes at the end of
# every 4,096-byte window of the test books, for every model, so all are scored on the same bytes.
#   ZOO_DATA_DIR=... bash experiments/long_context/by_context_published.sh [OUT_DIR]
set -euo pipefail
out=${1:-docs/bench/by_context}
for name in transformer_lm_small.pg19mini transformer_lm_small_rotary.pg19mini \
    sparse_transformer_small_strided.pg19mini sparse_transformer_small.pg19mini \
    routing_transformer_small.pg19mini routing_transformer_small_top2.pg19mini \
    routing_transformer_small_local.pg19mini; do
  /usr/bin/time -f "$name: %e s" zoo evaluate "$name" --by-context --block-spacing 4096 \
      --out-dir "$out/$name"
done
# the GPU model: its own contexts, up to 8,192, on one block per 8,192 bytes
/usr/bin/time -f "8k: %e s" zoo evaluate sparse_transformer_strided_8k.pg19mini \
    --by-context 64 256 1024 4096 8192 --out-dir "$out/sparse_transformer_strided_8k.pg19mini"
