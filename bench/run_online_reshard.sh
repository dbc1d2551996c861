#!/usr/bin/env bash
# Growing a training cluster from 2 to 4 shards online: a strata-worker
# trains (progress every second) while `stratactl reshard` moves half of
# the buckets, with a table of NUM_KEYS rows (Adagrad, dim 16) beside the
# worker's. Per round (ROUNDS, fresh shards each): training samples/s
# before, during and after the reshard (the same run: the before and after
# are the peers of the during), the reshard's seconds, rows moved, rows/s,
# its write pauses (p50, max over its steps) and the CPU-seconds per M rows
# moved (stratactl and the 4 shards, while it ran). Each round checks that
# the worker finished and the map ends with 4 even shards.
#
# Usage: bench/run_online_reshard.sh [BUILD_DIR]
# Environment: ROUNDS [3], NUM_KEYS [1000000], ROWS [300000], EPOCHS [4],
#              BEFORE_S [8] (training seconds before the reshard starts),
#              MAX_ROWS_PER_SECOND [0: no throttle], BUCKETS_PER_STEP [256]
set -uo pipefail
BUILD_DIR=${1:-build}
ROUNDS=${ROUNDS:-3}
NUM_KEYS=${NUM_KEYS:-1000000}
ROWS=${ROWS:-300000}
EPOCHS=${EPOCHS:-4}
BEFORE_S=${BEFORE_S:-8}
MAX_ROWS_PER_SECOND=${MAX_ROWS_PER_SECOND:-0}
BUCKETS_PER_STEP=${BUCKETS_PER_STEP:-256}
BIN="$BUILD_DIR/bin"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_start online-reshard

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN/strata-datagen" --rows="$ROWS" --holdout_rows=10000 \
  --out="$WORK/rows" >/dev/null || exit 1

now() { date +%s.%N; }

# Starts shards 0,1 (of 2) and 2,3 (of 4, owning nothing until the reshard)
# under $WORK/r<round>; sets SHARDS (the first two), ALL (the four) and
# SHARD_PIDS.
start_cluster() {
  local dir=$1 s count addresses=()
  SHARD_PIDS=()
  for s in 0 1 2 3; do
    count=$((s < 2 ? 2 : 4))
    "$BIN/strata-server" --port=0 --port_file="$dir/s$s.port" \
      --data_dir="$dir/s$s" --shard_index=$s --num_shards=$count \
      --durability=periodic --log_level=warning 2>"$dir/s$s.log" &
    SHARD_PIDS+=($!)
    PIDS+=($!)
  done
  for s in 0 1 2 3; do
    wait_file "$dir/s$s.port" "${SHARD_PIDS[$s]}"
    addresses+=("127.0.0.1:$(cat "$dir/s$s.port")")
  done
  SHARDS="${addresses[0]},${addresses[1]}"
  ALL=$(IFS=,; echo "${addresses[*]}")
}

cluster_cpu() {
  local pid total=0
  for pid in "${SHARD_PIDS[@]}"; do
    total=$(awk -v t="$total" '{ print t + $1 }' <(cpu_seconds "$pid"))
  done
  echo "$total"
}

# Mean samples/s of the progress intervals ending in [from, to) seconds.
rate_between() {
  awk -F, -v a="$1" -v b="$2" 'NR > 1 && $4 >= a && $4 < b && $5 > 0 {
    s += $5; n++ } END { if (n) printf "%.0f", s / n; else printf "0" }' \
    "$3"
}

echo "| round | before samples/s | during | after | during/before | reshard s | rows moved | rows/s | pause p50 ms | pause max ms | CPU-s per M rows |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for round in $(seq "$ROUNDS"); do
  dir="$WORK/r$round"
  mkdir -p "$dir"
  start_cluster "$dir"
  "$BIN/strata-bench" --mode=load --shards="$SHARDS" --table=bulk --dim=16 \
    --optimizer=adagrad --num_keys="$NUM_KEYS" --batch=8192 --inflight=8 \
    >/dev/null || exit 1
  started=$(now)
  "$BIN/strata-worker" --shards="$SHARDS" --train_files="$WORK/rows" \
    --eval_files="$WORK/rows.holdout" --table=train --epochs="$EPOCHS" \
    --wide=false --shuffle_buffer=0 \
    --progress_file="$dir/progress.csv" --progress_interval_s=1 \
    --result_file="$dir/result.json" >"$dir/worker.log" 2>&1 &
  worker=$!
  PIDS+=($worker)
  sleep "$BEFORE_S"
  cpu_before=$(cluster_cpu)
  reshard_from=$(awk -v a="$(now)" -v b="$started" 'BEGIN { print a - b }')
  TIMEFORMAT='%R %U %S'
  timing=$({ time "$BIN/stratactl" --shards="$SHARDS" --json reshard \
    --to_shards="$ALL" --buckets_per_step="$BUCKETS_PER_STEP" \
    --max_rows_per_second="$MAX_ROWS_PER_SECOND" >"$dir/reshard.json" \
    2>"$dir/reshard.log"; } 2>&1) || {
    echo "run_online_reshard.sh: stratactl reshard failed:" >&2
    tail -5 "$dir/reshard.log" >&2
    exit 1
  }
  reshard_to=$(awk -v a="$(now)" -v b="$started" 'BEGIN { print a - b }')
  cpu_after=$(cluster_cpu)
  if ! wait "$worker"; then
    echo "run_online_reshard.sh: strata-worker failed:" >&2
    tail -5 "$dir/worker.log" >&2
    exit 1
  fi
  read -r wall user sys <<<"$timing"
  python3 - "$dir/reshard.json" <<'EOF' || exit 1
import json, sys
r = json.load(open(sys.argv[1]))
if r["num_shards"] != 4 or r["buckets"] != 2048:
    sys.exit(f"run_online_reshard.sh: the reshard ended with {r}")
EOF
  before=$(rate_between 1 "$reshard_from" "$dir/progress.csv")
  during=$(rate_between "$reshard_from" "$reshard_to" "$dir/progress.csv")
  after=$(rate_between "$reshard_to" 1e9 "$dir/progress.csv")
  python3 - "$dir/reshard.json" "$round" "$before" "$during" "$after" \
    "$wall" "$user" "$sys" "$cpu_before" "$cpu_after" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
rnd, before, during, after = sys.argv[2], *map(float, sys.argv[3:6])
wall, user, sys_s, cpu0, cpu1 = map(float, sys.argv[6:11])
rows = r["rows"]
cpu = user + sys_s + (cpu1 - cpu0)
ratio = during / before if before else 0
print(f"| {rnd} | {before:.0f} | {during:.0f} | {after:.0f} | {ratio:.2f} "
      f"| {wall:.2f} | {rows} | {rows / wall / 1e6:.2f} M | "
      f"{r['pause_p50_ms']:.1f} | {r['pause_max_ms']:.1f} | "
      f"{cpu / (rows / 1e6):.1f} |")
EOF
  for pid in "${SHARD_PIDS[@]}"; do kill -TERM "$pid"; wait "$pid"; done
done
