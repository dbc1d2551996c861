#!/usr/bin/env bash
# Two strata-servings side by side: both follow one training shard (1M rows
# of dimension 64, each with a cache of every row), and strata-bench's
# 1000-key lookups go to each in turn, A first in odd rounds and B first in
# even ones. Each round: a closed loop at 8 in flight (the maximum), then an
# open loop at QPS (by default half the lower of the two maxima of the first
# round). Both run through the whole comparison, so that neither's loading,
# compactions or cache filling falls on the other's measurement, as it does
# between two separate runs of bench/run_serving.sh on a small machine.
# Prints one line per measurement with lookups/s, p50/p99/p999 and the
# CPU-seconds per million keys of strata-serving and of the client (over the
# measured window). ENCODING_B=float16 with the same binary twice compares
# fp16 answers with float32 ones. Lookups draw their keys from POOL batches
# of 1000 (strata-bench --pool_batches), by default about 4 draws a row
# (4096 batches for a million rows), which reach about 98% of the rows;
# strata-bench's own default (16 batches) would look up the same 16,000
# rows again and again.
#
# Usage: bench/run_serving_ab.sh SERVING_A SERVING_B [BUILD_DIR]
#   SERVING_A, SERVING_B: strata-serving binaries; the shard, strata-bench
#   and strata-lookup come from BUILD_DIR/bin (default: ./build).
# Environment: ROUNDS [4], DURATION_S [5], NUM_KEYS [1000000], DIM [64],
#              QPS [half the first round's lower maximum],
#              ENCODING_A, ENCODING_B [float32]: values on the wire of each,
#              POOL [4 draws a row: NUM_KEYS / 250, 16..4096],
#              PIN [0]: 1 holds the shard and both strata-servings (every
#              thread) to core 0 and the client to core 1, as
#              run_overload.sh and run_ceiling.sh do, so that the client's
#              time slices do not fall into the lookups' latency
set -uo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: bench/run_serving_ab.sh SERVING_A SERVING_B [BUILD_DIR]" >&2
  exit 2
fi
SERVING_BINS=("$1" "$2")
BUILD_DIR=${3:-build}
ROUNDS=${ROUNDS:-4}
DURATION_S=${DURATION_S:-5}
NUM_KEYS=${NUM_KEYS:-1000000}
DIM=${DIM:-64}
ENCODINGS=("${ENCODING_A:-float32}" "${ENCODING_B:-float32}")
BIN="$BUILD_DIR/bin"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
POOL=${POOL:-$(pool_for_rows "$NUM_KEYS")}
bench_start serving-ab

start_shards 1 --durability=group
start_servings "$SHARDS" "${SERVING_BINS[@]}"
"$BIN/strata-bench" --mode=load --shards="$SHARDS" --table=bench \
  --dim="$DIM" --num_keys="$NUM_KEYS" --batch=8192 --inflight=8 >/dev/null ||
  exit 1
wait_caught_up
CLIENT_CPU=()
if [[ ${PIN:-0} == 1 ]]; then
  pin_cpus
  if ((${#SERVER_CPU[@]})); then
    for pid in "${SHARD_PIDS[@]}" "${SERVING_PIDS[@]}"; do
      taskset -a -cp 0 "$pid" >/dev/null || exit 1
    done
  fi
fi

lookups() {  # lookups I FLAG...: one strata-bench summary line
  local i=$1
  shift
  "${CLIENT_CPU[@]}" "$BIN/strata-bench" --mode=serving-lookup \
    --serving="${ADDRESSES[i]}" \
    --table=bench --batch=1000 --dim="$DIM" --num_keys="$NUM_KEYS" \
    --duration_s="$DURATION_S" --warmup_s=1 --encoding="${ENCODINGS[i]}" \
    --pool_batches="$POOL" --server_pids="${SERVING_PIDS[i]}" "$@" 2>/dev/null | head -1
}
report() {  # report ROUND LABEL STEP LINE
  local line=$4
  awk -v r="$1" -v l="$2" -v step="$3" -v n="$(field "$line" requests)" \
    -v s="$(field "$line" seconds)" -v p50="$(field "$line" p50)" \
    -v p99="$(field "$line" p99)" -v p999="$(field "$line" p999)" \
    -v cpu="$(servers_cpu "$line")" \
    -v client="$(client_cpu "$line")" \
    'BEGIN { printf "| %d | %s | %s | %.0f | %s | %s | %s | %s | %s |\n",
               r, l, step, (s > 0 ? n / s : 0), p50, p99, p999, cpu, client }'
}

# Every row in the cache of both before anything is measured, and the
# load's flushes and compactions over (they otherwise fall into the first
# round's tail latencies).
for i in 0 1; do lookups "$i" --inflight=8 >/dev/null; done
wait_idle "${SHARD_PIDS[@]}" "${SERVING_PIDS[@]}"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| round | serving | step | lookups/s | p50 ms | p99 ms | p999 ms | serving CPU-s per M keys | client CPU-s per M keys |"
echo "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
LABELS=("A ${ENCODINGS[0]}" "B ${ENCODINGS[1]}")
qps=${QPS:-0}
for round in $(seq "$ROUNDS"); do
  order=(0 1)
  ((round % 2 == 0)) && order=(1 0)
  lowest=0
  for i in "${order[@]}"; do
    line=$(lookups "$i" --inflight=8)
    report "$round" "${LABELS[i]}" "closed loop, 8 in flight" "$line"
    rate=$(rate_of "$line")
    if ((lowest == 0 || rate < lowest)); then lowest=$rate; fi
  done
  ((qps == 0)) && qps=$((lowest / 2))
  for i in "${order[@]}"; do
    report "$round" "${LABELS[i]}" "open loop at ${qps}/s" \
      "$(lookups "$i" --qps="$qps")"
  done
done
