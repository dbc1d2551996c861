#!/usr/bin/env bash
# strata-worker with two sets of flags, side by side: the same
# strata-datagen --generator=realistic rows, one worker and one shard (a new
# shard per run), ROUNDS rounds, A and B in alternating order.
#
# Prints a markdown table: samples/s, CPU-microseconds per sample (the
# worker's training loop plus the shard's whole life), held-out AUC, and
# per round B/A ratios.
#
# Usage: bench/run_worker_ab.sh [BUILD_DIR]
# Environment: A_FLAGS [""], B_FLAGS ["--pull_fp16"] (strata-worker flags
#   of each side, on top of the worker's defaults), ROWS [1000000],
#   HOLDOUT_ROWS [100000], ROUNDS [3], DATAGEN_FLAGS [].
set -uo pipefail
BUILD_DIR=${1:-build}
A_FLAGS=${A_FLAGS:-}
B_FLAGS=${B_FLAGS-"--pull_fp16"}
ROWS=${ROWS:-1000000}
HOLDOUT_ROWS=${HOLDOUT_ROWS:-100000}
ROUNDS=${ROUNDS:-3}
DATAGEN_FLAGS=${DATAGEN_FLAGS:-}
BIN="$BUILD_DIR/bin"
HERE="$(dirname "${BASH_SOURCE[0]}")"
source "$HERE/lib.sh"
bench_start worker-ab

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs"
# shellcheck disable=SC2086
realistic_rows "$ROWS" "$HOLDOUT_ROWS" $DATAGEN_FLAGS
learnable=$LEARNABLE

# run FLAGS: trains on a new shard; sets RATE and ROW ("cpu auc").
run() {
  start_shards 1 --durability=periodic
  # shellcheck disable=SC2086
  train_on_rows ab --progress_interval_s=60 $1
  local shard_cpu
  shard_cpu=$(cpu_seconds "${SHARD_PIDS[0]}")
  read -r RATE ROW < <(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
cpu = r["cpu_seconds"] + float(sys.argv[2])
print(r["samples_per_second"], "%.1f %.4f" % (
    1e6 * cpu / r["examples"], r["eval_auc"]))' \
    "$WORK/result.json" "$shard_cpu")
  kill -TERM "${SHARD_PIDS[0]}"
  wait "${SHARD_PIDS[0]}"
  rm -rf "$WORK"/s0 "$WORK"/s0.port
}

# line ROUND SIDE RATE "CPU AUC"
line() {
  local cpu auc
  read -r cpu auc <<<"$4"
  awk -v r="$1" -v s="$2" -v rate="$3" -v cpu="$cpu" -v auc="$auc" \
    'BEGIN { printf "| %d | %s | %.0f | %.1f | %.4f |", r, s, rate, cpu, auc }'
}

echo
echo "$ROWS training rows, $HOLDOUT_ROWS held out (learnable AUC" \
  "$learnable); A: strata-worker ${A_FLAGS:-(defaults)}; B: strata-worker" \
  "${B_FLAGS:-(defaults)}; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| round | side | samples/s | CPU-us per sample | holdout AUC | B/A samples/s | B/A CPU per sample | B-A AUC |"
echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for round in $(seq "$ROUNDS"); do
  if ((round % 2 == 1)); then
    run "$A_FLAGS"
    A_RATE=$RATE A_ROW=$ROW
    run "$B_FLAGS"
  else
    run "$B_FLAGS"
    B_RATE=$RATE B_ROW=$ROW
    run "$A_FLAGS"
    A_RATE=$RATE A_ROW=$ROW
    RATE=$B_RATE ROW=$B_ROW
  fi
  ratios=$(awk -v b="$RATE" -v a="$A_RATE" \
    -v bc="${ROW%% *}" -v ac="${A_ROW%% *}" \
    -v ba="${ROW##* }" -v aa="${A_ROW##* }" \
    'BEGIN { printf "%.2fx | %.2fx | %+.4f", b / a, bc / ac, ba - aa }')
  echo "$(line "$round" A "$A_RATE" "$A_ROW") | | |"
  echo "$(line "$round" B "$RATE" "$ROW") $ratios |"
done
