#!/usr/bin/env bash
# Serving PS under open-loop overload: goodput and p99 of the answered
# lookups at 1x, 2x and 10x of its measured capacity, with and without the
# client's throttle (ServingClient's throttle_k, common/adaptive_throttle.h),
# for each --request_thread_nice in NICES (the peer: 0, the threads at the
# process's priority), all in the same round.
#
# Each round, for each nice value (their order alternating between rounds):
# a fresh strata-serving (--max_queued_requests=QUEUE,
# --request_threads=THREADS), its capacity measured by a closed loop of
# 1000-key lookups at QUEUE in flight (as many as it takes without refusing
# any: with one more, the next call can arrive before a thread has taken
# the queue's head), then open loops at 1x, 2x and 10x of that rate, each
# once with every request sent ("raw"), once throttled as ServingClient
# does (k = THROTTLE_K) and once "limited": throttled and with the adaptive
# bound on lookups in flight of ServingClient's adaptive_concurrency_limit
# (CLIENTS picks among the three), orders alternating between rounds; then
# the closed loop again. "of capacity" is of the mean of the two closed
# loops. Every lookup carries an online caller's deadline (TIMEOUT_MS);
# latency counts from each request's scheduled start. On a machine of 2 or
# more cores the daemons run on core 0 and the generator on core 1, so that
# the generator does not take the server's CPU. Lookups draw their keys
# from POOL batches of 1000 (about 4 draws a row by default; strata-bench's
# own 16 would look up the same 16,000 rows again and again), and nothing
# is measured until the load's flushes and compactions are over.
#
# Usage: bench/run_overload.sh [BUILD_DIR]
# Environment: ROUNDS [3], DURATION_S [8], WARMUP_S [3], NUM_KEYS [200000],
#              DIM [64], TIMEOUT_MS [50], QUEUE [4], THREADS [1],
#              THROTTLE_K [2], NICES ["10 0"],
#              CLIENTS ["raw throttled limited"],
#              POOL [NUM_KEYS / 250, 16..4096]
set -uo pipefail
BUILD_DIR=${1:-build}
ROUNDS=${ROUNDS:-3}
DURATION_S=${DURATION_S:-8}
WARMUP_S=${WARMUP_S:-3}
NUM_KEYS=${NUM_KEYS:-200000}
DIM=${DIM:-64}
TIMEOUT_MS=${TIMEOUT_MS:-50}
QUEUE=${QUEUE:-4}
THREADS=${THREADS:-1}
THROTTLE_K=${THROTTLE_K:-2}
read -r -a CLIENTS <<<"${CLIENTS:-raw throttled limited}"
read -r -a NICES <<<"${NICES:-10 0}"
BIN="$BUILD_DIR/bin"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
POOL=${POOL:-$(pool_for_rows "$NUM_KEYS")}
bench_start overload
pin_cpus

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
"${SERVER_CPU[@]}" "$BIN/strata-server" --port=0 \
  --port_file="$WORK/shard.port" --data_dir="$WORK/shard" \
  --durability=group --log_level=warning &
shard_pid=$!
PIDS+=($shard_pid)
wait_file "$WORK/shard.port" "$shard_pid"
SHARD="127.0.0.1:$(cat "$WORK/shard.port")"
"$BIN/strata-bench" --mode=load --shards="$SHARD" --table=bench --dim="$DIM" \
  --num_keys="$NUM_KEYS" --batch=8192 --inflight=8 >/dev/null || exit 1

lookups() {  # lookups EXTRA_FLAGS...: one strata-bench line
  "${CLIENT_CPU[@]}" "$BIN/strata-bench" --mode=serving-lookup \
    --serving="$SERVING" --table=bench --batch=1000 --dim="$DIM" \
    --num_keys="$NUM_KEYS" --inflight=64 --timeout_ms="$TIMEOUT_MS" \
    --duration_s="$DURATION_S" --warmup_s="$WARMUP_S" \
    --pool_batches="$POOL" "$@" 2>/dev/null |
    head -1
}

echo "| round | nice | load | client | offered/s | answered/s | of capacity | p99 ms | refused by server | refused by client | deadline exceeded | serving CPU-s per 1k answered |"
echo "| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"

ratio() {  # ratio A B: A / B to two places
  awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'
}

# one_serving ROUND NICE: a fresh strata-serving, its capacity and the open
# loops against it; one table row each.
one_serving() {
  local round=$1 nice=$2
  rm -f "$WORK/serving.port"
  "${SERVER_CPU[@]}" "$BIN/strata-serving" --port=0 \
    --port_file="$WORK/serving.port" --shards="$SHARD" \
    --data_dir="$WORK/serving-$round-$nice" --cache_rows="$NUM_KEYS" \
    --max_queued_requests="$QUEUE" --request_threads="$THREADS" \
    --request_thread_nice="$nice" --log_level=warning &
  local serving_pid=$!
  PIDS+=($serving_pid)
  wait_file "$WORK/serving.port" "$serving_pid"
  SERVING="127.0.0.1:$(cat "$WORK/serving.port")"
  "$BIN/strata-lookup" --serving="$SERVING" --wait_caught_up_s=300 bench 0 \
    >/dev/null || exit 1
  # Every row in the cache, and the catch-up's compactions over.
  lookups --inflight="$QUEUE" >/dev/null
  wait_idle "$shard_pid" "$serving_pid"
  local capacity_line capacity
  capacity_line=$(lookups --inflight="$QUEUE")
  capacity=$(rate_of "$capacity_line")
  local clients=("${CLIENTS[@]}")
  if ((round % 2 == 0)); then
    clients=()
    for ((i = ${#CLIENTS[@]} - 1; i >= 0; i--)); do clients+=("${CLIENTS[i]}"); done
  fi
  local times client qps before after line rows=() flags throttled limited
  for times in 1 2 10; do
    for client in "${clients[@]}"; do
      case $client in
        raw) flags=(--client_throttle_k=0) ;;
        throttled) flags=(--client_throttle_k="$THROTTLE_K") ;;
        limited) flags=(--client_throttle_k="$THROTTLE_K"
          --client_concurrency_limit) ;;
        *) echo "run_overload.sh: unknown client '$client'" >&2; exit 2 ;;
      esac
      qps=$((capacity * times))
      before=$(cpu_seconds "$serving_pid")
      line=$(lookups --qps="$qps" "${flags[@]}")
      after=$(cpu_seconds "$serving_pid")
      throttled=$(field "$line" THROTTLED)
      limited=$(field "$line" LIMITED)
      rows+=("$times|$client|$qps|$(field "$line" requests)|\
$(field "$line" seconds)|$(field "$line" p99)|\
$(field "$line" RESOURCE_EXHAUSTED)|\
$((${throttled:-0} + ${limited:-0}))|\
$(field "$line" DEADLINE_EXCEEDED)|\
$(awk -v a="$before" -v b="$after" 'BEGIN { print b - a }')")
    done
  done
  # The closed loop again: one 8 s loop on a shared machine moves by a
  # fifth from run to run, so the open loops are set by the first and
  # compared with the mean of both.
  local after_line after_capacity mean
  after_line=$(lookups --inflight="$QUEUE")
  after_capacity=$(rate_of "$after_line")
  mean=$(((capacity + after_capacity) / 2))
  echo "| $round | $nice | capacity | closed loop before, $QUEUE in flight | | $capacity | $(ratio "$capacity" "$mean") | $(field "$capacity_line" p99) | $(field "$capacity_line" RESOURCE_EXHAUSTED) | | | |"
  echo "| $round | $nice | capacity | closed loop after | | $after_capacity | $(ratio "$after_capacity" "$mean") | $(field "$after_line" p99) | $(field "$after_line" RESOURCE_EXHAUSTED) | | | |"
  local n s p x th d c
  for line in "${rows[@]}"; do
    IFS='|' read -r times client qps n s p x th d c <<<"$line"
    awk -v r="$round" -v nice="$nice" -v t="$times" -v cl="$client" \
      -v q="$qps" -v cap="$mean" -v n="$n" -v s="$s" -v p="$p" -v x="$x" \
      -v th="$th" -v d="$d" -v c="$c" \
      'BEGIN { a = (s > 0 ? n / s : 0)
               printf "| %d | %d | %dx | %s | %d | %.0f | %.2f | %s | %d | %d | %d | %.3f |\n",
                 r, nice, t, cl, q, a, a / cap, p, x, th, d,
                 (n > 0 ? c / n * 1000 : 0) }'
  done
  kill -TERM "$serving_pid"
  wait "$serving_pid" 2>/dev/null
}

for round in $(seq "$ROUNDS"); do
  nices=("${NICES[@]}")
  if ((round % 2 == 0)); then
    nices=()
    for ((i = ${#NICES[@]} - 1; i >= 0; i--)); do nices+=("${NICES[i]}"); done
  fi
  for nice in "${nices[@]}"; do one_serving "$round" "$nice"; done
done
