#!/usr/bin/env bash
# What it costs two strata-servings to follow the same pushes: both follow
# one training shard (--durability=periodic) holding NUM_KEYS rows of
# dimension DIM, each with a cache for every row, warmed by WARM_S seconds
# of lookups; then, ROUNDS times, strata-bench pushes PUSH_S seconds of
# 1000-key batches (8 in flight) to those rows, the script waits until both
# servings have applied everything, and prints the CPU-seconds each spent
# per million keys pushed and the ratio B/A. Both apply the same updates at
# the same time, so the machine's load falls on both. Lookups and pushes
# draw their keys from POOL batches of 1000 (strata-bench --pool_batches),
# by default about 4 draws a row (4096 batches for a million rows), which
# reach about 98% of the rows; strata-bench's own default (16 batches)
# would keep every lookup and push on 16,000 rows.
#
# Usage: bench/run_follower_ab.sh SERVING_A SERVING_B [BUILD_DIR]
#   SERVING_A, SERVING_B: strata-serving binaries; the shard, strata-bench
#   and strata-lookup come from BUILD_DIR/bin (default: ./build).
# Environment: ROUNDS [3], NUM_KEYS [1000000], DIM [64], PUSH_S [8],
#              WARM_S [15], POOL [4 draws a row: NUM_KEYS / 250, 16..4096]
set -uo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: bench/run_follower_ab.sh SERVING_A SERVING_B [BUILD_DIR]" >&2
  exit 2
fi
SERVING_BINS=("$1" "$2")
BUILD_DIR=${3:-build}
ROUNDS=${ROUNDS:-3}
NUM_KEYS=${NUM_KEYS:-1000000}
DIM=${DIM:-64}
PUSH_S=${PUSH_S:-8}
WARM_S=${WARM_S:-15}
BIN="$BUILD_DIR/bin"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
POOL=${POOL:-$(pool_for_rows "$NUM_KEYS")}
bench_start follower-ab

start_shards 1 --durability=periodic
common=(--table=bench --dim="$DIM" --num_keys="$NUM_KEYS" --batch=1000
  --inflight=8 --pool_batches="$POOL")
"$BIN/strata-bench" --mode=load --shards="$SHARDS" "${common[@]}" \
  >/dev/null || exit 1
start_servings "$SHARDS" "${SERVING_BINS[@]}"
wait_caught_up
for i in 0 1; do
  "$BIN/strata-bench" --mode=serving-lookup --serving="${ADDRESSES[i]}" \
    "${common[@]}" --duration_s="$WARM_S" --warmup_s=0 >/dev/null 2>&1 ||
    exit 1
done

echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| round | keys pushed | A CPU-s per M keys | B CPU-s per M keys | B/A |"
echo "| ---: | ---: | ---: | ---: | ---: |"
for round in $(seq "$ROUNDS"); do
  before=("$(cpu_seconds "${SERVING_PIDS[0]}")"
    "$(cpu_seconds "${SERVING_PIDS[1]}")")
  line=$("$BIN/strata-bench" --mode=push --shards="$SHARDS" "${common[@]}" \
    --duration_s="$PUSH_S" --warmup_s=0 | sed -n 1p)
  wait_caught_up
  awk -v r="$round" -v k="$(field "$line" keys)" \
    -v a="${before[0]}" -v a_now="$(cpu_seconds "${SERVING_PIDS[0]}")" \
    -v b="${before[1]}" -v b_now="$(cpu_seconds "${SERVING_PIDS[1]}")" \
    'BEGIN { a = a_now - a; b = b_now - b
             printf "| %d | %d | %.3f | %.3f | %.2f |\n", r, k,
               a / k * 1e6, b / k * 1e6, (a > 0 ? b / a : 0) }'
done
