#!/usr/bin/env bash
# Runs the strata-bench matrix against one local strata-server and, as the
# baseline, one local redis-server, and writes a markdown table of the results
# to stdout and to bench/out/results.md (raw JSON per run: bench/out/runs.jsonl).
#
# Usage: bench/run.sh [BUILD_DIR]          (default: ./build)
# Environment (defaults in brackets):
#   DURATION_S [5]  measured seconds per run    WARMUP_S [1]
#   NUM_KEYS [1000000]  DIM [64]               OUT_DIR [bench/out]
#   REDIS_SERVER [redis-server]                KEEP_WORK [0]: keep the temp dir
# Example smoke run: DURATION_S=1 NUM_KEYS=100000 bench/run.sh build
#
# Everything listens on 127.0.0.1 only. The script stops every process it
# started (and only those) on exit, however it exits.
set -uo pipefail

BUILD_DIR=${1:-build}
DURATION_S=${DURATION_S:-5}
WARMUP_S=${WARMUP_S:-1}
NUM_KEYS=${NUM_KEYS:-1000000}
DIM=${DIM:-64}
OUT_DIR=${OUT_DIR:-bench/out}
REDIS_SERVER=${REDIS_SERVER:-redis-server}
TABLE=bench

SERVER_BIN="$BUILD_DIR/bin/strata-server"
BENCH_BIN="$BUILD_DIR/bin/strata-bench"
for bin in "$SERVER_BIN" "$BENCH_BIN"; do
  if [[ ! -x "$bin" ]]; then
    echo "run.sh: $bin not found; build it first (make -C $BUILD_DIR strata-server strata-bench)" >&2
    exit 2
  fi
done
if ! command -v "$REDIS_SERVER" >/dev/null; then
  echo "run.sh: $REDIS_SERVER not found" >&2
  exit 2
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/strata-bench.XXXXXX")
SERVER_PID=""
REDIS_PID=""

# Stops one process we started: SIGTERM, then SIGKILL after 30 s.
stop_pid() {
  local pid=$1
  [[ -n "$pid" ]] || return 0
  kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null; return 0; }
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 300); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  return 0
}

# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
  stop_pid "$SERVER_PID"
  SERVER_PID=""
  stop_pid "$REDIS_PID"
  REDIS_PID=""
  if [[ "${KEEP_WORK:-0}" == 1 ]]; then
    echo "run.sh: logs and data kept in $WORK" >&2
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Starts strata-server with durability $1 on $WORK/data (kept across restarts).
start_server() {
  local durability=$1
  rm -f "$WORK/port"
  "$SERVER_BIN" --host=127.0.0.1 --port=0 --port_file="$WORK/port" \
    --data_dir="$WORK/data" --durability="$durability" --log_level=warning \
    >>"$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  # Recovering a large table takes a while; the port file appears once serving.
  for _ in $(seq 1800); do
    [[ -s "$WORK/port" ]] && break
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "run.sh: strata-server exited; log:" >&2
      tail -20 "$WORK/server.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  if [[ ! -s "$WORK/port" ]]; then
    echo "run.sh: strata-server did not start within 180 s" >&2
    exit 1
  fi
  SHARDS="127.0.0.1:$(cat "$WORK/port")"
}

stop_server() {
  stop_pid "$SERVER_PID"
  SERVER_PID=""
}

# Starts redis-server without persistence on a free port: tries random ports
# until our own process is the one answering.
start_redis() {
  local port
  for _ in $(seq 20); do
    port=$((20000 + RANDOM % 40000))
    "$REDIS_SERVER" --bind 127.0.0.1 --port "$port" --save '' \
      --appendonly no --protected-mode yes --dir "$WORK" \
      --logfile "$WORK/redis.log" &
    REDIS_PID=$!
    for _ in $(seq 50); do
      grep -q "Ready to accept connections" "$WORK/redis.log" 2>/dev/null && break
      kill -0 "$REDIS_PID" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$REDIS_PID" 2>/dev/null &&
        grep -q "Ready to accept connections" "$WORK/redis.log"; then
      REDIS_ADDRESS="127.0.0.1:$port"
      return 0
    fi
    wait "$REDIS_PID" 2>/dev/null  # it failed to bind; try another port
    REDIS_PID=""
    : >"$WORK/redis.log"
  done
  echo "run.sh: could not start redis-server on a free port" >&2
  exit 1
}

mkdir -p "$OUT_DIR"
: >"$OUT_DIR/runs.jsonl"
ROWS=()          # markdown rows, in run order
declare -A PULL      # "strata|encoding|batch|inflight", "redis|batch|inflight" -> keys/s
declare -A PULL_ROW  # "strata|encoding|batch|inflight" -> index in ROWS
FAILED=0

# field NAME LINE: the value of NAME=value in a summary line.
field() {
  tr ' ' '\n' <<<"$2" | awk -v name="$1=" \
    'index($0, name) == 1 { print substr($0, length(name) + 1); exit }'
}

# json_number NAME JSON: a number field of strata-bench's JSON line.
json_number() {
  grep -o "\"$1\":[-0-9.e+]*" <<<"$2" | head -1 | cut -d: -f2
}

# cpu_text JSON: "client+server" CPU seconds per million keys, 3 digits.
cpu_text() {
  awk -v total="$(json_number cpu_s_per_mkeys "$1")" \
    -v client="$(json_number client_cpu_s_per_mkeys "$1")" \
    'BEGIN { if (total >= 0) printf "%.3f (client %.3f)", total, client; else print "-" }'
}

# bench LABEL ARGS...: runs strata-bench, records its row. The server whose
# CPU time counts is redis-server for the redis modes, else strata-server.
bench() {
  local label=$1
  shift
  local output rc server_pid=$SERVER_PID
  [[ "$label" == redis* ]] && server_pid=$REDIS_PID
  output=$("$BENCH_BIN" --table="$TABLE" --dim="$DIM" --num_keys="$NUM_KEYS" \
    --shards="${SHARDS:-}" --redis="$REDIS_ADDRESS" \
    --server_pids="$server_pid" --json "$@" 2>"$WORK/bench.err")
  rc=$?
  local summary json
  summary=$(sed -n 1p <<<"$output")
  json=$(sed -n 2p <<<"$output")
  [[ -n "$json" ]] && echo "$json" >>"$OUT_DIR/runs.jsonl"
  echo "$label: $summary" >&2
  if [[ $rc -ne 0 || -z "$summary" ]]; then
    FAILED=1
    echo "run.sh: '$label' failed (exit $rc): $(cat "$WORK/bench.err")" >&2
    ROWS+=("| \`$label\` | FAILED (exit $rc) | | | | | |")
    return 0
  fi
  LAST_KEYS_PER_S=$(field 'keys/s' "$summary")
  ROWS+=("| \`$label\` | $LAST_KEYS_PER_S | $(field 'MB/s' "$summary") | $(field p50 "$summary") | $(field p99 "$summary") | $(cpu_text "$json") | @RATIO@ |")
}

ratio() {
  awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'
}

RUN=(--duration_s="$DURATION_S" --warmup_s="$WARMUP_S")
REDIS_ADDRESS=""
start_redis
start_server group
echo "run.sh: strata-server at $SHARDS, redis at $REDIS_ADDRESS, work dir $WORK" >&2

bench "load (group)" --mode=load --optimizer=adagrad --batch=8192 --inflight=8
bench "redis-load" --mode=redis-load --batch=1000 --inflight=8

for encoding in float32 float16; do
  for batch in 8192 1000; do
    for inflight in 1 8; do
      bench "pull --batch=$batch --inflight=$inflight --encoding=$encoding" \
        --mode=pull --batch="$batch" --inflight="$inflight" \
        --encoding="$encoding" "${RUN[@]}"
      [[ "${ROWS[-1]}" == *FAILED* ]] ||
        PULL["strata|$encoding|$batch|$inflight"]=$LAST_KEYS_PER_S
      PULL_ROW["strata|$encoding|$batch|$inflight"]=$((${#ROWS[@]} - 1))
    done
  done
done

# Redis MGET at both batch sizes, so that every pull row has its baseline;
# MSET at 1000 keys.
for batch in 8192 1000; do
  for inflight in 1 8; do
    bench "redis-pull (MGET) --batch=$batch --inflight=$inflight" \
      --mode=redis-pull --batch="$batch" --inflight="$inflight" "${RUN[@]}"
    [[ "${ROWS[-1]}" == *FAILED* ]] ||
      PULL["redis|$batch|$inflight"]=$LAST_KEYS_PER_S
  done
done
for inflight in 1 8; do
  bench "redis-push (MSET) --batch=1000 --inflight=$inflight" \
    --mode=redis-push --batch=1000 --inflight="$inflight" "${RUN[@]}"
done

# Push under each durability: restart the server on the same data.
for durability in sync group periodic; do
  stop_server
  start_server "$durability"
  bench "push (Adagrad, durability=$durability) --batch=8192 --inflight=8" \
    --mode=push --batch=8192 --inflight=8 "${RUN[@]}"
done
stop_server

# Fill in the ratios: Strata pull keys/s / Redis MGET keys/s at the same
# batch and inflight (Redis holds float32 rows).
for key in "${!PULL_ROW[@]}"; do
  IFS='|' read -r _ encoding batch inflight <<<"$key"
  index=${PULL_ROW[$key]}
  strata=${PULL[$key]:-}
  redis=${PULL["redis|$batch|$inflight"]:-}
  value="-"
  [[ -n "$strata" && -n "$redis" ]] && value=$(ratio "$strata" "$redis")
  ROWS[index]=${ROWS[$index]/@RATIO@/$value}
done

{
  echo "# strata-bench results"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs, $NUM_KEYS keys of dim $DIM," \
    "${DURATION_S}s per run after ${WARMUP_S}s warmup, strata-server and" \
    "redis-server on 127.0.0.1, one client thread. Pulls use uniform keys;" \
    "MB/s counts values only (keys/s x dim x bytes per value); CPU-s/M keys" \
    "is the user + system CPU seconds of the client and the server per" \
    "million keys over the measured window."
  echo
  echo "| command | keys/s | MB/s | p50 ms | p99 ms | CPU-s / M keys | Strata/Redis MGET keys/s |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
  for row in "${ROWS[@]}"; do
    echo "${row/@RATIO@/}"
  done
} | tee "$OUT_DIR/results.md"
exit "$FAILED"
