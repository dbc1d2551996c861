#!/usr/bin/env bash
# Pull and push of two builds side by side, to see what a change costs on
# the data path: per round, each build's strata-server (one shard,
# DURABILITY) is started fresh, loaded with NUM_KEYS rows, and driven by
# that build's strata-bench (pulls, then pushes, of BATCH keys, INFLIGHT in
# flight); which build goes first alternates between rounds, because the
# second run of a round on a shared machine tends to differ. Prints one row
# per run and the ratio B/A of each round's pair (keys/s and the server's
# CPU-seconds per million keys).
#
# Usage: bench/run_ab.sh BUILD_A BUILD_B
# Environment: ROUNDS [6]  NUM_KEYS [200000]  DIM [16]  BATCH [1000]
#              INFLIGHT [8]  DURATION_S [4]  MODES ["pull push"]
#              DURABILITY [group]  ENCODING [float32]: values on the wire
#              (float16: the pulls answered and the pushes sent as fp16)
#              SETTLE_S [0]: seconds waited after the load, on top of
#              waiting until the shard is idle (the load's flushes and
#              compactions over), so that they are not measured as part of
#              the first mode
set -u
if [[ $# -ne 2 ]]; then
  echo "usage: bench/run_ab.sh BUILD_A BUILD_B" >&2
  exit 2
fi
ROUNDS=${ROUNDS:-6}
NUM_KEYS=${NUM_KEYS:-200000}
DIM=${DIM:-16}
BATCH=${BATCH:-1000}
INFLIGHT=${INFLIGHT:-8}
DURATION_S=${DURATION_S:-4}
MODES=${MODES:-pull push}
DURABILITY=${DURABILITY:-group}
ENCODING=${ENCODING:-float32}
SETTLE_S=${SETTLE_S:-0}
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_start ab

# run_build BUILD LABEL: one fresh shard of BUILD; prints a row per mode.
run_build() {
  local BIN=$1/bin label=$2 mode line
  rm -rf "$WORK/s0" "$WORK/s0.port"
  start_shards 1 --durability="$DURABILITY"
  local common=(--table=t --dim="$DIM" --num_keys="$NUM_KEYS"
    --shards="$SHARDS" --server_pids="${SHARD_PIDS[0]}")
  "$BIN/strata-bench" "${common[@]}" --mode=load --batch=8192 \
    --inflight=8 >/dev/null || exit 1
  # A load of a million 64-float rows leaves RocksDB seconds of flushes and
  # compactions: after a fixed 2 s they still ran during the pushes, and
  # which build's load left more decided a comparison by up to a fifth.
  wait_idle "${SHARD_PIDS[0]}"
  sleep "$SETTLE_S"
  for mode in $MODES; do
    line=$("$BIN/strata-bench" "${common[@]}" --mode=$mode --batch="$BATCH" \
      --inflight="$INFLIGHT" --duration_s="$DURATION_S" --warmup_s=1 \
      --encoding="$ENCODING" |
      sed -n 1p)
    echo "$label $mode $(field "$line" keys/s) $(sed -E \
      's/.*servers ([0-9.]+)\).*/\1/' <<<"$line")"
  done
  kill -TERM "${SHARD_PIDS[0]}"
  wait "${SHARD_PIDS[0]}" 2>/dev/null
}

echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "round build mode keys/s server_cpu_s_per_Mkeys"
alternate_builds "$ROUNDS" "$1" "$2" run_build | tee "$WORK/rows"
echo "ratios B/A per round (keys/s, server CPU per Mkeys):"
for mode in $MODES; do
  awk -v m="$mode" '$3 == m { k[$1 "," $2] = $4; c[$1 "," $2] = $5; r[$1] = 1 }
    END { for (i in r) printf "  %s round %d: %.2f, %.2f\n", m, i,
          k[i ",B"] / k[i ",A"], c[i ",B"] / c[i ",A"] }' "$WORK/rows" | sort -k3n
done
