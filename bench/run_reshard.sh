#!/usr/bin/env bash
# Restoring a checkpoint onto another shard count, offline: the time and CPU
# of `stratactl reshard-checkpoint` for NUM_KEYS rows taken on 2 shards,
# onto 4 (split) and onto 1 (merge), against copying the same checkpoint
# directories with `cp -r` (the floor: every byte read and written once),
# interleaved ROUNDS times. Each reshard is checked: the new shards' rows
# add up to NUM_KEYS.
#
# Usage: bench/run_reshard.sh [BUILD_DIR]
# Environment: ROUNDS [3], NUM_KEYS [1000000], DIM [16]
set -uo pipefail
BUILD_DIR=${1:-build}
ROUNDS=${ROUNDS:-3}
NUM_KEYS=${NUM_KEYS:-1000000}
DIM=${DIM:-16}
BIN="$BUILD_DIR/bin"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_start reshard

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
start_shards 2 --durability=periodic
"$BIN/strata-bench" --mode=load --shards="$SHARDS" --table=bench \
  --dim="$DIM" --optimizer=adagrad --num_keys="$NUM_KEYS" --batch=8192 \
  --inflight=8 >/dev/null || exit 1
"$BIN/stratactl" --shards="$SHARDS" checkpoint base --global_step=1 \
  >/dev/null || exit 1
for pid in "${SHARD_PIDS[@]}"; do kill -TERM "$pid"; wait "$pid"; done
PIDS=()
checkpoint_mb=$(du -sm "$WORK/s0/checkpoints/base" "$WORK/s1/checkpoints/base" |
  awk '{ mb += $1 } END { print mb }')
echo "checkpoint: $NUM_KEYS rows of dim $DIM (Adagrad), ${checkpoint_mb} MB on 2 shards"

# Runs one way of making the new directories under $WORK/out; prints
# "wall user+sys" seconds.
run_one() {
  local way=$1 out="$WORK/out"
  rm -rf "$out"
  mkdir -p "$out"
  local TIMEFORMAT='%R %U %S'
  local timing
  case $way in
    copy)
      timing=$({ time { cp -r "$WORK/s0/checkpoints/base" "$out/c0" &&
        cp -r "$WORK/s1/checkpoints/base" "$out/c1"; }; } 2>&1)
      ;;
    split|merge)
      local to
      if [[ $way == split ]]; then
        to="$out/n0,$out/n1,$out/n2,$out/n3"
      else
        to="$out/n0"
      fi
      timing=$({ time "$BIN/stratactl" --json reshard-checkpoint base \
        --from="$WORK/s0,$WORK/s1" --to="$to" >"$WORK/result.json" \
        2>"$WORK/reshard.log"; } 2>&1)
      local moved
      moved=$(python3 -c 'import json,sys; print(sum(json.load(open(sys.argv[1]))["target_rows"]))' \
        "$WORK/result.json")
      if [[ $moved != "$NUM_KEYS" ]]; then
        echo "run_reshard.sh: $way moved $moved rows, not $NUM_KEYS" >&2
        exit 1
      fi
      ;;
  esac
  awk '{ printf "%s %.2f\n", $1, $2 + $3 }' <<<"$timing"
}

echo "| round | way | seconds | rows/s | CPU-s per M rows | seconds / copy |"
echo "| ---: | --- | ---: | ---: | ---: | ---: |"
for round in $(seq "$ROUNDS"); do
  ways=(copy split merge)
  ((round % 2 == 0)) && ways=(merge split copy)
  declare -A wall=() cpu=()
  for way in "${ways[@]}"; do
    read -r wall[$way] cpu[$way] < <(run_one "$way") || exit 1
  done
  for way in copy split merge; do
    awk -v r="$round" -v w="$way" -v s="${wall[$way]}" -v c="${cpu[$way]}" \
      -v n="$NUM_KEYS" -v base="${wall[copy]}" 'BEGIN {
        printf "| %d | %s | %.2f | %.2f M | %.2f | %.1fx |\n",
          r, w, s, n / s / 1e6, c / (n / 1e6), s / base }'
  done
done
