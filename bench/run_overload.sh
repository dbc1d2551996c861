#!/usr/bin/env bash
# Serving PS under overload: the same strata-serving with a bounded request
# queue (--max_queued_requests=QUEUE) and with an unbounded one (its peer:
# what it did before load shedding, less the dropping of expired requests),
# interleaved ROUNDS times.
#
# Each round and variant: a closed loop at 8 in flight (the capacity), then
# at 8x that concurrency (64, strata-bench's most), with an online caller's
# deadline (TIMEOUT_MS). Reports answered lookups/s (goodput), p99 of the answered,
# refusals, and the serving PS's CPU-seconds per 1000 answered lookups.
#
# Usage: bench/run_overload.sh [BUILD_DIR]
# Environment: ROUNDS [3], DURATION_S [5], NUM_KEYS [200000], DIM [64],
#              TIMEOUT_MS [50], QUEUE [16]
set -uo pipefail
BUILD_DIR=${1:-build}
ROUNDS=${ROUNDS:-3}
DURATION_S=${DURATION_S:-5}
NUM_KEYS=${NUM_KEYS:-200000}
DIM=${DIM:-64}
TIMEOUT_MS=${TIMEOUT_MS:-50}
BIN="$BUILD_DIR/bin"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/strata-overload.XXXXXX")
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_port() {
  for _ in $(seq 600); do
    [[ -s "$1" ]] && return 0
    sleep 0.1
  done
  echo "run_overload.sh: a daemon did not start" >&2
  exit 1
}
cpu_seconds() {  # utime + stime of a pid, in seconds
  awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"
}

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN/strata-server" --port=0 --port_file="$WORK/shard.port" \
  --data_dir="$WORK/shard" --durability=group --log_level=warning &
PIDS+=($!)
wait_port "$WORK/shard.port"
SHARD="127.0.0.1:$(cat "$WORK/shard.port")"
"$BIN/strata-bench" --mode=load --shards="$SHARD" --table=bench --dim="$DIM" \
  --num_keys="$NUM_KEYS" --batch=8192 --inflight=8 >/dev/null || exit 1

echo "| round | serving queue | in flight | answered/s | p99 ms | refused | deadline exceeded | CPU-s per 1k answered |"
echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for round in $(seq "$ROUNDS"); do
  for variant in bounded unbounded; do
    queue=${QUEUE:-16}
    [[ $variant == unbounded ]] && queue=1000000000
    rm -f "$WORK/serving.port"
    "$BIN/strata-serving" --port=0 --port_file="$WORK/serving.port" \
      --shards="$SHARD" --data_dir="$WORK/serving-$round-$variant" \
      --cache_rows="$NUM_KEYS" --max_queued_requests="$queue" \
      --log_level=warning &
    serving_pid=$!
    PIDS+=($serving_pid)
    wait_port "$WORK/serving.port"
    SERVING="127.0.0.1:$(cat "$WORK/serving.port")"
    "$BIN/strata-lookup" --serving="$SERVING" --wait_caught_up_s=300 bench 0 \
      >/dev/null || exit 1
    for inflight in 8 64; do
      before=$(cpu_seconds "$serving_pid")
      line=$("$BIN/strata-bench" --mode=serving-lookup --serving="$SERVING" \
        --table=bench --batch=1000 --dim="$DIM" --num_keys="$NUM_KEYS" \
        --inflight="$inflight" --timeout_ms="$TIMEOUT_MS" \
        --duration_s="$DURATION_S" --warmup_s=1 2>/dev/null | head -1)
      after=$(cpu_seconds "$serving_pid")
      field() { tr ' ' '\n' <<<"$line" | awk -F= -v k="$1" '$1 == k { print $2 }'; }
      requests=$(field requests)
      seconds=$(field seconds)
      awk -v r="$round" -v v="$variant" -v i="$inflight" -v n="${requests:-0}" \
        -v s="${seconds:-1}" -v p="$(field p99)" \
        -v x="$(field RESOURCE_EXHAUSTED)" -v d="$(field DEADLINE_EXCEEDED)" \
        -v c="$(awk -v a="$before" -v b="$after" 'BEGIN { print b - a }')" \
        'BEGIN { printf "| %d | %s | %d | %.0f | %s | %d | %d | %.3f |\n",
                 r, v, i, n / s, p, x, d, (n > 0 ? c / n * 1000 : 0) }'
    done
    kill -TERM "$serving_pid"
    wait "$serving_pid" 2>/dev/null
  done
done
