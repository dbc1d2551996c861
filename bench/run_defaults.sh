#!/usr/bin/env bash
# strata-worker's defaults against its former defaults on realistic data of
# several sizes, next to the data's learnable ceiling. For each size in
# SIZES: strata-datagen --generator=realistic (holdout: a tenth of the rows,
# between 5,000 and 100,000), one shard, then ROUNDS rounds each training
#   defaults  no training flags at all (passes chosen from the data's size,
#             shuffled within windows of 100,000, the wide term, batch 1024)
#   former    --epochs=1 --shuffle_buffer=0 --wide=false (one pass in file
#             order, the DLRM alone: the defaults before 2026-12-03)
# on a new table each, in alternating order. Prints a markdown table: holdout
# AUC, its gap to the learnable ceiling, passes, seconds and CPU-seconds of
# the worker's training loop.
#
# Usage: bench/run_defaults.sh [BUILD_DIR]
# Environment: SIZES ["10000 100000 1000000"], ROUNDS [3], DATAGEN_FLAGS [].
set -uo pipefail
BUILD_DIR=${1:-build}
SIZES=${SIZES:-10000 100000 1000000}
ROUNDS=${ROUNDS:-3}
DATAGEN_FLAGS=${DATAGEN_FLAGS:-}
BIN="$BUILD_DIR/bin"
HERE="$(dirname "${BASH_SOURCE[0]}")"
source "$HERE/lib.sh"
bench_start defaults

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs"
echo
echo "| rows | learnable AUC | round | way | holdout AUC | below learnable | passes | seconds | CPU-s |"
echo "| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"
table=0
for size in $SIZES; do
  holdout=$((size / 10))
  ((holdout < 5000)) && holdout=5000
  ((holdout > 100000)) && holdout=100000
  rm -rf "$WORK/rows" "$WORK/rows.holdout" "$WORK"/s0 "$WORK"/s0.port
  # shellcheck disable=SC2086
  "$BIN/strata-datagen" --generator=realistic --rows="$size" \
    --holdout_rows="$holdout" --out="$WORK/rows" $DATAGEN_FLAGS \
    >"$WORK/datagen.out" || exit 1
  learnable=$(python3 -c '
import json, sys
print("%.4f" % json.load(open(sys.argv[1]))["ceilings"]["learnable_auc"])' \
    "$WORK/rows.meta.json")
  start_shards 1 --durability=periodic
  for round in $(seq "$ROUNDS"); do
    ways=(defaults former)
    ((round % 2 == 0)) && ways=(former defaults)
    for way in "${ways[@]}"; do
      flags=()
      [[ $way == former ]] && flags=(--epochs=1 --shuffle_buffer=0 --wide=false)
      table=$((table + 1))
      train_on_rows "t$table" "${flags[@]}"
      python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
size, learnable = int(sys.argv[2]), float(sys.argv[3])
print("| %d | %.4f | %s | %s | %.4f | %.4f | %d | %.1f | %.1f |" % (
    size, learnable, sys.argv[4], sys.argv[5], r["eval_auc"],
    learnable - r["eval_auc"], round(r["examples"] / size), r["seconds"],
    r["cpu_seconds"]))' "$WORK/result.json" "$size" "$learnable" "$round" \
        "$way"
    done
  done
  for pid in "${SHARD_PIDS[@]}"; do kill -TERM "$pid"; wait "$pid"; done
done
