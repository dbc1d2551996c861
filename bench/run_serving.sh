#!/usr/bin/env bash
# Serving benchmarks: one training strata-server and one strata-serving
# following it, on 127.0.0.1.
#  1. freshness: strata-bench pushes PUSH_RATES keys/s (1000-key pushes) to
#     the training shard while polling serving; time from each push's
#     acknowledgement to its row being visible at serving;
#  2. lookup latency: 1000-key lookups of dimension 64 from a 1M-row table,
#     first closed loop to find the maximum rate, then open loop at 25%, 50%
#     and 90% of it, and at 2x and 10x of it (overload, a 50 ms deadline),
#     each with strata-serving's CPU-seconds per million keys answered
#     (user + system over the measured window, from /proc).
# Writes a markdown table to stdout and to $OUT_DIR/serving.md.
#
# Usage: bench/run_serving.sh [BUILD_DIR]   (default: ./build)
# Environment: DURATION_S [10], NUM_KEYS [1000000], DIM [64],
#              CACHE_ROWS [1000000], OUT_DIR [bench/out],
#              OVERLOAD_FACTORS ["2 10"], OVERLOAD_TIMEOUT_MS [50],
#              SERVING_FLAGS [] (extra strata-serving flags),
#              PUSH_RATES ["100000"] (keys/s, one freshness run each),
#              SHARD_DURABILITY [group],
#              POOL [about 4 draws a row: NUM_KEYS / 250, 16..4096]: the
#              lookups' strata-bench --pool_batches, so that they reach
#              about 98% of the rows rather than the same 16,000
set -uo pipefail
BUILD_DIR=${1:-build}
DURATION_S=${DURATION_S:-10}
NUM_KEYS=${NUM_KEYS:-1000000}
DIM=${DIM:-64}
CACHE_ROWS=${CACHE_ROWS:-1000000}
OUT_DIR=${OUT_DIR:-bench/out}
BIN="$BUILD_DIR/bin"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
POOL=${POOL:-$(pool_for_rows "$NUM_KEYS")}
bench_start serving-bench

"$BIN/strata-server" --port=0 --port_file="$WORK/shard.port" \
  --data_dir="$WORK/shard" --durability="${SHARD_DURABILITY:-group}" \
  --log_level=warning \
  2>"$WORK/shard.log" &
PIDS+=($!)
wait_file "$WORK/shard.port" "${PIDS[-1]}"
SHARD="127.0.0.1:$(cat "$WORK/shard.port")"
"$BIN/strata-serving" --port=0 --port_file="$WORK/serving.port" \
  --shards="$SHARD" --data_dir="$WORK/serving" --cache_rows="$CACHE_ROWS" \
  --log_level=warning ${SERVING_FLAGS:-} 2>"$WORK/serving.log" &
SERVING_PID=$!
PIDS+=($SERVING_PID)
wait_file "$WORK/serving.port" "$SERVING_PID"
SERVING="127.0.0.1:$(cat "$WORK/serving.port")"

"$BIN/strata-bench" --mode=load --shards="$SHARD" --table=bench --dim="$DIM" \
  --num_keys="$NUM_KEYS" --batch=8192 --inflight=8 >/dev/null || exit 1
"$BIN/strata-lookup" --serving="$SERVING" --wait_caught_up_s=300 bench 0 \
  >/dev/null || exit 1

ROWS=()
run() {
  local label=$1
  shift
  local line
  line=$("$BIN/strata-bench" --dim="$DIM" --num_keys="$NUM_KEYS" "$@" \
    --duration_s="$DURATION_S" --warmup_s=1 2>"$WORK/bench.err" | head -1)
  echo "$label: $line" >&2
  LAST="$line"
  local f
  f() { tr ' ' '\n' <<<"$line" | awk -v n="$1=" 'index($0, n) == 1 { print substr($0, length(n) + 1) }'; }
  local requests seconds
  requests=$(f requests)
  seconds=$(f seconds)
  local serving_cpu
  serving_cpu=$(servers_cpu "$line")
  ROWS+=("| $label | $(awk -v r="$requests" -v s="$seconds" 'BEGIN { printf "%.0f", r / s }') | $(f p50) | $(f p99) | $(f p999) | $(f errors) | ${serving_cpu:--} |")
}

for rate in ${PUSH_RATES:-100000}; do
  run "freshness, $rate keys/s pushed in 1000-key pushes" --mode=freshness \
    --shards="$SHARD" --serving="$SERVING" --table=fresh --batch=1000 \
    --push_keys_per_s="$rate"
done
# The rows into the row cache before anything is measured.
"$BIN/strata-bench" --dim="$DIM" --num_keys="$NUM_KEYS" --mode=serving-lookup \
  --serving="$SERVING" --table=bench --batch=1000 --inflight=8 \
  --pool_batches="$POOL" --duration_s="$DURATION_S" --warmup_s=0 \
  >/dev/null 2>&1
run "lookup 1000 keys, closed loop, 8 in flight" --mode=serving-lookup \
  --serving="$SERVING" --table=bench --batch=1000 --inflight=8 \
  --pool_batches="$POOL" --server_pids="$SERVING_PID"
MAX_QPS=$(tr ' ' '\n' <<<"$LAST" | awk -F= '$1 == "requests" { r = $2 } $1 == "seconds" { s = $2 } END { printf "%.0f", r / s }')
for percent in 25 50 90; do
  qps=$((MAX_QPS * percent / 100))
  run "lookup 1000 keys, open loop at ${percent}% (${qps}/s)" \
    --mode=serving-lookup --serving="$SERVING" --table=bench --batch=1000 \
    --qps="$qps" --pool_batches="$POOL" --server_pids="$SERVING_PID"
done
# Overload: open loop past the maximum, with an online caller's deadline
# (OVERLOAD_TIMEOUT_MS). requests/s counts the answered ones (goodput);
# errors are the refused (RESOURCE_EXHAUSTED) and expired ones.
for factor in ${OVERLOAD_FACTORS:-2 10}; do
  qps=$((MAX_QPS * factor))
  run "lookup 1000 keys, open loop at ${factor}x (${qps}/s), ${OVERLOAD_TIMEOUT_MS:-50} ms deadline" \
    --mode=serving-lookup --serving="$SERVING" --table=bench --batch=1000 \
    --qps="$qps" --timeout_ms="${OVERLOAD_TIMEOUT_MS:-50}" \
    --pool_batches="$POOL" --server_pids="$SERVING_PID"
done

mkdir -p "$OUT_DIR"
{
  echo "| run | requests/s | p50 ms | p99 ms | p999 ms | errors | serving CPU-s per M keys |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
  printf '%s\n' "${ROWS[@]}"
} | tee "$OUT_DIR/serving.md"
