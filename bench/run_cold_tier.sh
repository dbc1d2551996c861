#!/usr/bin/env bash
# Pull throughput of a table ten times larger than its memory budget (rows
# past it on disk only) next to the same table fully in memory, in one run:
# for each, a fresh strata-server, the table, ROWS rows loaded, PUSH_S
# seconds of Zipf pushes (what training does: the rows it pulls are the rows
# it pushes, so the hot set is what was pushed), then Zipf and uniform pulls.
# Prints a markdown table (keys/s, peak resident memory, ratios to in-memory)
# and writes it to $OUT_DIR/cold_tier.md.
#
# Usage: bench/run_cold_tier.sh [BUILD_DIR]      (default: ./build)
# Environment (defaults in brackets): ROWS [2500000]  DIM [32]
#   BUDGET_MB [32]  PUSH_S [5]  PULL_S [10]  ZIPF_S [1.1]  OUT_DIR [bench/out]
set -euo pipefail

BUILD_DIR=${1:-build}
ROWS=${ROWS:-2500000}
DIM=${DIM:-32}
BUDGET_MB=${BUDGET_MB:-32}
PUSH_S=${PUSH_S:-5}
PULL_S=${PULL_S:-10}
ZIPF_S=${ZIPF_S:-1.1}
OUT_DIR=${OUT_DIR:-bench/out}
BIN="$BUILD_DIR/bin"
for bin in strata-server strata-bench stratactl; do
  if [[ ! -x "$BIN/$bin" ]]; then
    echo "run_cold_tier.sh: $BIN/$bin not found; build it first" >&2
    exit 2
  fi
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/strata-cold-bench.XXXXXX")
SERVER_PID=""
cleanup() {
  if [[ -n "$SERVER_PID" ]]; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

keys_per_s() { sed -n 's/.* keys\/s=\([0-9.]*\).*/\1/p' | tail -1; }

# run NAME BUDGET_MB: prints "zipf_keys_per_s uniform_keys_per_s peak_mib"
run() {
  local name=$1 budget=$2 dir="$WORK/$1"
  mkdir -p "$dir"
  "$BIN/strata-server" --port=0 --port_file="$dir/port" --data_dir="$dir/data" \
    --durability=group --write_buffer_mb=8 --change_log_mb=16 \
    --log_level=warning 2>"$dir/log" &
  SERVER_PID=$!
  for _ in $(seq 300); do [[ -s "$dir/port" ]] && break; sleep 0.1; done
  local shard="127.0.0.1:$(cat "$dir/port")"
  "$BIN/stratactl" --shards="$shard" create-table bench --dim="$DIM" \
    --optimizer=sgd --learning_rate=0.01 --memory_budget_mb="$budget" >/dev/null
  local common=(--shards="$shard" --num_keys="$ROWS" --dim="$DIM")
  "$BIN/strata-bench" "${common[@]}" --mode=load --optimizer=sgd >/dev/null
  "$BIN/strata-bench" "${common[@]}" --mode=push --dist=zipf --zipf_s="$ZIPF_S" \
    --duration_s="$PUSH_S" --warmup_s=0 >/dev/null
  local zipf uniform
  zipf=$("$BIN/strata-bench" "${common[@]}" --mode=pull --dist=zipf \
    --zipf_s="$ZIPF_S" --duration_s="$PULL_S" | keys_per_s)
  uniform=$("$BIN/strata-bench" "${common[@]}" --mode=pull --dist=uniform \
    --duration_s="$PULL_S" | keys_per_s)
  local peak
  peak=$(awk '/VmHWM/ {print int($2 / 1024)}' "/proc/$SERVER_PID/status")
  "$BIN/stratactl" --shards="$shard" tables >"$dir/tables.txt"
  kill -TERM "$SERVER_PID"
  wait "$SERVER_PID" || true
  SERVER_PID=""
  echo "$zipf $uniform $peak"
}

echo "run_cold_tier.sh: $ROWS rows of dimension $DIM," \
  "$((ROWS * DIM * 4 / 1048576)) MiB of values" >&2
read -r mem_zipf mem_uniform mem_peak < <(run memory 0)
read -r cold_zipf cold_uniform cold_peak < <(run cold "$BUDGET_MB")

mkdir -p "$OUT_DIR"
{
  echo "| table | Zipf $ZIPF_S pulls keys/s | uniform pulls keys/s | peak resident MiB |"
  echo "| --- | --- | --- | --- |"
  echo "| all in memory | $mem_zipf | $mem_uniform | $mem_peak |"
  echo "| budget $BUDGET_MB MiB (cold tier) | $cold_zipf | $cold_uniform | $cold_peak |"
  awk -v a="$cold_zipf" -v b="$mem_zipf" -v c="$cold_uniform" -v d="$mem_uniform" \
    -v e="$cold_peak" -v f="$mem_peak" 'BEGIN {
      printf "| cold / in memory | %.2fx | %.2fx | %.2fx |\n", a / b, c / d, e / f }'
} | tee "$OUT_DIR/cold_tier.md"
