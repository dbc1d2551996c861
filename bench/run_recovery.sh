#!/usr/bin/env bash
# How long a shard takes to come back after kill -9, for two builds side by
# side. Per round, each build's strata-server (DURABILITY) is started fresh,
# loaded with NUM_KEYS rows, pushed to for PUSH_S seconds (BATCH keys, 8 in
# flight), killed with SIGKILL and started again on the same data directory.
# The time until it listens again is its recovery: RocksDB replays its
# write-ahead log, the rows are read into memory, and a group shard replays
# its push log over them and flushes. Which build goes
# first alternates between rounds. Prints one row per run (the log on disk
# at the kill and after the restart, in MiB, and the restart's seconds) and
# the ratio B/A of each round's restart time.
#
# Usage: bench/run_recovery.sh BUILD_A BUILD_B
# Environment: ROUNDS [3]  NUM_KEYS [1000000]  DIM [64]  BATCH [8192]
#              PUSH_S [10]  DURABILITY [group]
set -u
if [[ $# -ne 2 ]]; then
  echo "usage: bench/run_recovery.sh BUILD_A BUILD_B" >&2
  exit 2
fi
ROUNDS=${ROUNDS:-3}
NUM_KEYS=${NUM_KEYS:-1000000}
DIM=${DIM:-64}
BATCH=${BATCH:-8192}
PUSH_S=${PUSH_S:-10}
DURABILITY=${DURABILITY:-group}
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_start recovery

# MiB of write-ahead log in shard 0's database.
log_mib() {
  # RocksDB's write-ahead logs, and the push log of a group shard.
  find "$WORK/s0/db" "$WORK/s0/push_log" -name '*.log' -printf '%s\n' \
    2>/dev/null |
    awk '{ s += $1 } END { printf "%.0f", s / 1048576 }'
}

# run_build BUILD LABEL: prints "LABEL LOG_AT_KILL RESTART_S LOG_AFTER".
run_build() {
  local BIN=$1/bin label=$2 log_at_kill start end
  rm -rf "$WORK/s0" "$WORK/s0.port"
  start_shards 1 --durability="$DURABILITY"
  local common=(--table=t --dim="$DIM" --num_keys="$NUM_KEYS"
    --shards="$SHARDS" --inflight=8)
  "$BIN/strata-bench" "${common[@]}" --mode=load --batch=8192 \
    >/dev/null || exit 1
  "$BIN/strata-bench" "${common[@]}" --mode=push --batch="$BATCH" \
    --duration_s="$PUSH_S" --warmup_s=0 >/dev/null || exit 1
  log_at_kill=$(log_mib)
  kill -KILL "${SHARD_PIDS[0]}"
  wait "${SHARD_PIDS[0]}" 2>/dev/null
  rm -f "$WORK/s0.port"
  start=$(date +%s.%N)
  start_shards 1 --durability="$DURABILITY"
  end=$(date +%s.%N)
  echo "$label $log_at_kill $(awk -v a="$start" -v b="$end" \
    'BEGIN { printf "%.2f", b - a }') $(log_mib)"
  kill -TERM "${SHARD_PIDS[0]}"
  wait "${SHARD_PIDS[0]}" 2>/dev/null
}

echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "round build log_mib_at_kill restart_s log_mib_after"
alternate_builds "$ROUNDS" "$1" "$2" run_build | tee "$WORK/rows"
echo "ratios B/A per round (restart seconds):"
awk '{ t[$1 "," $2] = $4; r[$1] = 1 }
  END { for (i in r) printf "  round %d: %.2f\n", i, t[i ",B"] / t[i ",A"] }' \
  "$WORK/rows" | sort -k2n
