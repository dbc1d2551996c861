# Helpers shared by the bench/run_*.sh scripts; source it after `set -u`.
#
#   bench_start NAME  makes $WORK (a fresh temporary directory) and $PIDS
#                     (add every process started), stopped and removed on
#                     exit however the script exits
#   pin_cpus          sets SERVER_CPU and CLIENT_CPU (commands to prefix):
#                     on 2 or more cores servers on core 0, clients on 1
#   wait_file FILE [PID]
#                     waits up to 60 s for FILE to be non-empty (a port
#                     file), failing at once if process PID has exited
#   start_shards COUNT [FLAG...]
#                     starts COUNT strata-servers from $BIN (shard i of
#                     COUNT, data in $WORK/s<i>, the FLAGs added) and waits
#                     for their ports; sets SHARDS (host:port,...) and
#                     SHARD_PIDS
#   start_servings SHARDS BINARY...
#                     starts one strata-serving per BINARY following
#                     SHARDS, each caching $NUM_KEYS rows (data in
#                     $WORK/serving<i>), and waits for their ports; sets
#                     ADDRESSES and SERVING_PIDS
#   wait_caught_up    waits until every strata-serving in ADDRESSES has
#                     applied what its shards had (looking up table bench);
#                     exits the script if one does not within 300 s
#   train_on_rows TABLE [FLAG...]
#                     runs strata-worker against $SHARDS on $WORK/rows
#                     (evaluated on $WORK/rows.holdout) into table TABLE,
#                     its result in $WORK/result.json; exits the script with
#                     the log's tail if it fails
#   alternate_builds ROUNDS BUILD_A BUILD_B FUNCTION
#                     runs FUNCTION BUILD LABEL for A and B each round, A
#                     first in odd rounds and B first in even ones (the
#                     second run of a round on a shared machine tends to
#                     differ), each line it prints prefixed with the round
#   realistic_rows ROWS HOLDOUT_ROWS [FLAG...]
#                     strata-datagen --generator=realistic into $WORK/rows
#                     and $WORK/rows.holdout (the FLAGs added); sets BAYES
#                     and LEARNABLE, the data's AUC ceilings
#   FORMER_DEFAULTS   strata-worker flags for its defaults before
#                     2026-12-03 (one pass, file order, no wide term),
#                     which the figures of the scripts' older ways assume
#   cpu_seconds PID   utime + stime of PID, in seconds
#   wait_idle PID...  waits until the processes together spend under 3% of
#                     a core over a second (a load's flushes and compactions
#                     are over), at most 120 s; then goes on, saying so
#   field LINE KEY    the value of KEY=value in a strata-bench summary line
#   pool_for_rows ROWS
#                     strata-bench --pool_batches (of 1000 keys) that draw
#                     each of ROWS rows about 4 times, within 16..4096
#   servers_cpu LINE  the servers' CPU-seconds per million keys of a
#                     strata-bench summary line run with --server_pids
#                     (empty when it has none)
#   client_cpu LINE   the client's CPU-seconds per million keys of such a
#                     line

bench_start() {
  BENCH_NAME=$1
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/strata-$BENCH_NAME.XXXXXX")
  PIDS=()
  trap bench_cleanup EXIT
}

bench_cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  rm -rf "$WORK"
}

pin_cpus() {
  SERVER_CPU=()
  CLIENT_CPU=()
  if [[ $(nproc) -ge 2 ]] && command -v taskset >/dev/null; then
    SERVER_CPU=(taskset -c 0)
    CLIENT_CPU=(taskset -c 1)
  fi
}

wait_file() {
  local file=$1 pid=${2:-}
  for _ in $(seq 600); do
    [[ -s "$file" ]] && return 0
    if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
      echo "$BENCH_NAME: process $pid exited before writing $file" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "$BENCH_NAME: $file did not appear: a server did not start" >&2
  exit 1
}

start_shards() {
  local count=$1 s
  shift
  SHARD_PIDS=()
  local addresses=()
  for ((s = 0; s < count; s++)); do
    "$BIN/strata-server" --port=0 --port_file="$WORK/s$s.port" \
      --data_dir="$WORK/s$s" --shard_index=$s --num_shards="$count" \
      --log_level=warning "$@" &
    SHARD_PIDS+=($!)
    PIDS+=($!)
  done
  for ((s = 0; s < count; s++)); do
    wait_file "$WORK/s$s.port" "${SHARD_PIDS[$s]}"
    addresses+=("127.0.0.1:$(cat "$WORK/s$s.port")")
  done
  SHARDS=$(IFS=,; echo "${addresses[*]}")
}

start_servings() {
  local shards=$1 i=0 binary
  shift
  ADDRESSES=()
  SERVING_PIDS=()
  for binary in "$@"; do
    "$binary" --port=0 --port_file="$WORK/serving$i.port" \
      --shards="$shards" --data_dir="$WORK/serving$i" \
      --cache_rows="$NUM_KEYS" --log_level=warning &
    SERVING_PIDS+=($!)
    PIDS+=($!)
    wait_file "$WORK/serving$i.port" "${SERVING_PIDS[i]}"
    ADDRESSES+=("127.0.0.1:$(cat "$WORK/serving$i.port")")
    i=$((i + 1))
  done
}

wait_caught_up() {
  local address
  for address in "${ADDRESSES[@]}"; do
    "$BIN/strata-lookup" --serving="$address" --wait_caught_up_s=300 \
      bench 0 >/dev/null || exit 1
  done
}

cpu_seconds() {
  awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"
}

wait_idle() {
  local before after
  for _ in $(seq 120); do
    before=$(total_cpu_seconds "$@")
    sleep 1
    after=$(total_cpu_seconds "$@")
    awk -v a="$before" -v b="$after" 'BEGIN { exit !(b - a < 0.03) }' && return 0
  done
  echo "$BENCH_NAME: processes $* still busy after 120 s; measuring anyway" >&2
}

total_cpu_seconds() {  # total_cpu_seconds PID...: the sum of cpu_seconds
  local pid
  for pid in "$@"; do cpu_seconds "$pid"; done | awk '{ t += $1 } END { print t + 0 }'
}

# pool_for_rows ROWS: strata-bench --pool_batches of 1000 keys that draw
# each of ROWS rows about 4 times (so about 98% of them come up), within the
# flag's 16..4096.
pool_for_rows() {
  local pool=$(($1 / 250))
  ((pool < 16)) && pool=16
  ((pool > 4096)) && pool=4096
  echo "$pool"
}
field() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k { print $2 }'; }
# rate_of LINE: requests a second of a strata-bench line, rounded.
rate_of() {
  awk -v n="$(field "$1" requests)" -v s="$(field "$1" seconds)" \
    'BEGIN { printf "%.0f", (s > 0 ? n / s : 0) }'
}

# From "cpu_s/Mkeys=T(client C + servers S)": S, and C.
servers_cpu() { sed -n 's/.*servers \([0-9.]*\)).*/\1/p' <<<"$1"; }
client_cpu() { sed -n 's/.*(client \([0-9.]*\) .*/\1/p' <<<"$1"; }

FORMER_DEFAULTS=(--epochs=1 --shuffle_buffer=0 --wide=false
  --wide_learning_rate=0)

train_on_rows() {
  local table=$1
  shift
  "$BIN/strata-worker" --shards="$SHARDS" --train_files="$WORK/rows" \
    --eval_files="$WORK/rows.holdout" --table="$table" \
    --result_file="$WORK/result.json" "$@" >"$WORK/worker.log" 2>&1 || {
    echo "$(basename "$0"): strata-worker $* failed:" >&2
    tail -5 "$WORK/worker.log" >&2
    exit 1
  }
}

realistic_rows() {
  local rows=$1 holdout=$2
  shift 2
  "$BIN/strata-datagen" --generator=realistic --rows="$rows" \
    --holdout_rows="$holdout" --out="$WORK/rows" "$@" >"$WORK/datagen.out" ||
    exit 1
  read -r BAYES LEARNABLE < <(python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))["ceilings"]
print("%.4f %.4f" % (c["bayes_auc"], c["learnable_auc"]))' \
    "$WORK/rows.meta.json")
}

alternate_builds() {
  local rounds=$1 build_a=$2 build_b=$3 run=$4 r which
  local order=()
  for ((r = 1; r <= rounds; r++)); do
    if ((r % 2)); then order=(A B); else order=(B A); fi
    for which in "${order[@]}"; do
      if [[ $which == A ]]; then
        "$run" "$build_a" A
      else
        "$run" "$build_b" B
      fi | sed "s/^/$r /"
    done
  done
}
