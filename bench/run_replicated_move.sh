#!/usr/bin/env bash
# Moving buckets between replicated shards, side by side with the same move
# between shards without replicas. Per round, each side on fresh shards (the
# order alternating between rounds): 2 shards (`plain`), or 2 shards of 2
# replicas each coordinated through etcd (`replicated`: ack mode
# replicated, so W = 2 and every imported block and drop waits for the
# follower), all with --durability=group; a table of NUM_KEYS rows (Adagrad,
# dim 16) loaded with strata-bench; then `stratactl move-buckets
# --from_shard=0 --count=1024 --to_shard=1`. Reports the rows moved, the
# seconds, rows/s, the write pauses (p50, max over the steps), CPU-seconds
# per M rows moved (stratactl and every shard process while it ran), and
# replicated/plain ratios per round.
#
# Usage: bench/run_replicated_move.sh [BUILD_DIR]
# Environment: ROUNDS [3], NUM_KEYS [1000000], BUCKETS_PER_STEP [256]
set -uo pipefail
BUILD_DIR=${1:-build}
ROUNDS=${ROUNDS:-3}
NUM_KEYS=${NUM_KEYS:-1000000}
BUCKETS_PER_STEP=${BUCKETS_PER_STEP:-256}
BIN="$BUILD_DIR/bin"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_start replicated-move
ETCD=$(command -v etcd || echo /usr/bin/etcd)
[[ -x "$ETCD" ]] || {
  echo "run_replicated_move.sh: etcd not found (etcd-server)" >&2
  exit 2
}

free_port() {
  python3 "$(dirname "${BASH_SOURCE[0]}")/free_port.py"
}

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
ETCD_PORT=$(free_port)
"$ETCD" --name=bench --data-dir="$WORK/etcd" \
  --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
  --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls="http://127.0.0.1:$(free_port)" >"$WORK/etcd.log" 2>&1 &
PIDS+=($!)

# start_side DIR SIDE: 2 shards (of 2 replicas each when SIDE is
# replicated) under DIR; sets SHARDS (for --shards) and SHARD_PIDS, and
# returns once every shard answers through its primary.
start_side() {
  local dir=$1 side=$2 s r replicas=1 groups=()
  [[ $side == replicated ]] && replicas=2
  SHARD_PIDS=()
  for s in 0 1; do
    for ((r = 0; r < replicas; r++)); do
      local flags=(--port=0 --port_file="$dir/s$s-r$r.port"
        --data_dir="$dir/s$s-r$r" --shard_index=$s --num_shards=2
        --durability=group --log_level=warning)
      if [[ $side == replicated ]]; then
        flags+=(--etcd_endpoints="127.0.0.1:$ETCD_PORT" --replica_id="r$r"
          --replicas=2 --replication=replicated
          --cluster_name="$(basename "$dir")")
      fi
      "$BIN/strata-server" "${flags[@]}" 2>"$dir/s$s-r$r.log" &
      SHARD_PIDS+=($!)
      PIDS+=($!)
    done
  done
  local i=0
  for s in 0 1; do
    local members=()
    for ((r = 0; r < replicas; r++)); do
      wait_file "$dir/s$s-r$r.port" "${SHARD_PIDS[$i]}"
      members+=("127.0.0.1:$(cat "$dir/s$s-r$r.port")")
      i=$((i + 1))
    done
    groups+=("$(IFS='|'; echo "${members[*]}")")
  done
  SHARDS=$(IFS=,; echo "${groups[*]}")
  # strata-bench loads through each shard's primary (it takes no replica
  # lists); on the plain side that is the shard itself.
  PRIMARIES=""
  for s in 0 1; do
    local primary=""
    for _ in $(seq 300); do
      primary=$(primary_of "${groups[$s]}" "$dir" "$s") && break
      sleep 0.1
    done
    if [[ -z $primary ]]; then
      echo "run_replicated_move.sh: shard $s ($side) has no primary" >&2
      exit 1
    fi
    PRIMARIES+="${PRIMARIES:+,}$primary"
  done
}

# primary_of GROUP DIR S: the address of the replica of shard S that
# says it is primary (a shard without replicas: itself); fails while none.
primary_of() {
  local answer
  answer=$("$BIN/stratactl" --shards="$1" status --json --interval_s=0 \
    2>/dev/null | python3 -c '
import json, sys
shard = json.load(sys.stdin)["shards"][0]
info = shard.get("replication")
if shard.get("up") and (info is None or info.get("answered_by_primary")):
    print(shard["address"] if info is None else info["primary"])' 2>/dev/null)
  [[ -n $answer ]] || return 1
  if [[ $answer == r* ]]; then
    echo "127.0.0.1:$(cat "$2/s$3-${answer}.port")"
  else
    echo "$answer"
  fi
}

shards_cpu() {
  local pid total=0
  for pid in "${SHARD_PIDS[@]}"; do
    total=$(awk -v t="$total" '{ print t + $1 }' <(cpu_seconds "$pid"))
  done
  echo "$total"
}

# move_side ROUND SIDE: one side's run; prints its table row and sets
# RATE, CPU_PER_M (for the ratios).
move_side() {
  local round=$1 side=$2 dir="$WORK/$2-$1"
  mkdir -p "$dir"
  start_side "$dir" "$side"
  "$BIN/strata-bench" --mode=load --shards="$PRIMARIES" --table=bulk --dim=16 \
    --optimizer=adagrad --num_keys="$NUM_KEYS" --batch=8192 --inflight=8 \
    >/dev/null || exit 1
  local cpu_before timing
  cpu_before=$(shards_cpu)
  TIMEFORMAT='%R %U %S'
  timing=$({ time "$BIN/stratactl" --shards="$SHARDS" --json move-buckets \
    --from_shard=0 --count=1024 --to_shard=1 \
    --buckets_per_step="$BUCKETS_PER_STEP" >"$dir/move.json" \
    2>"$dir/move.log"; } 2>&1) || {
    echo "run_replicated_move.sh: stratactl move-buckets ($side) failed:" >&2
    tail -5 "$dir/move.log" >&2
    exit 1
  }
  local cpu_after wall user sys
  cpu_after=$(shards_cpu)
  read -r wall user sys <<<"$timing"
  local out
  out=$(python3 - "$dir/move.json" "$round" "$side" "$wall" "$user" "$sys" \
    "$cpu_before" "$cpu_after" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
rnd, side = sys.argv[2], sys.argv[3]
wall, user, sys_s, cpu0, cpu1 = map(float, sys.argv[4:9])
if r["buckets"] != 1024 or r["rows"] <= 0:
    sys.exit(f"run_replicated_move.sh: the move ended with {r}")
rows = r["rows"]
cpu = (user + sys_s + cpu1 - cpu0) / (rows / 1e6)
print(f"{rows / wall} {cpu}")
print(f"| {rnd} | {side} | {rows} | {wall:.2f} | {rows / wall / 1e6:.3f} M "
      f"| {r['pause_p50_ms']:.1f} | {r['pause_max_ms']:.1f} | {cpu:.1f} |")
EOF
  ) || exit 1
  read -r RATE CPU_PER_M <<<"$(head -1 <<<"$out")"
  tail -n +2 <<<"$out" >>"$WORK/rows.md"
  for pid in "${SHARD_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${SHARD_PIDS[@]}"; do wait "$pid" 2>/dev/null; done
}

for round in $(seq "$ROUNDS"); do
  if ((round % 2)); then order=(plain replicated); else order=(replicated plain); fi
  declare -A rate cpu
  for side in "${order[@]}"; do
    move_side "$round" "$side"
    rate[$side]=$RATE
    cpu[$side]=$CPU_PER_M
  done
  python3 - "$round" "${rate[plain]}" "${rate[replicated]}" \
    "${cpu[plain]}" "${cpu[replicated]}" >>"$WORK/ratios.md" <<'EOF'
import sys
rnd = sys.argv[1]
rate_p, rate_r, cpu_p, cpu_r = map(float, sys.argv[2:6])
print(f"| {rnd} | {rate_r / rate_p:.2f}x | {cpu_r / cpu_p:.2f}x |")
EOF
done

echo "| round | side | rows moved | seconds | rows/s | pause p50 ms | pause max ms | CPU-s per M rows |"
echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
cat "$WORK/rows.md"
echo
echo "| round | replicated/plain rows/s | replicated/plain CPU per row |"
echo "| ---: | ---: | ---: |"
cat "$WORK/ratios.md"
