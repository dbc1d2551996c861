#!/usr/bin/env bash
# Narrow tables for the long tail: strata-worker on strata-datagen
# --generator=realistic data with the categorical fields in two tables, the
# six fields of 100,000 values or more (C1, C6, C11, C16, C23, C26: user and
# ad ids, their largest attributes, two context fields) in one and the
# other twenty in the other. "uniform" gives both --embedding_dim 16;
# "narrow" gives the large fields dim NARROW_DIM (their rows enter the
# model zero-padded). Same data, flags and pulls per step otherwise; the
# worker's defaults (epochs for 2M examples, a shuffle window, the wide
# term). ROUNDS rounds, the two in alternating order, each on a shard of
# its own.
#
# Prints a markdown table: samples/s, CPU-microseconds per sample (the
# worker's training loop plus the shard's whole life), held-out AUC, the
# tables' rows and their memory on the shard (stratactl tables), and per
# round narrow/uniform ratios.
#
# Usage: bench/run_mixed_dims.sh [BUILD_DIR]
# Environment: ROWS [1000000], HOLDOUT_ROWS [100000], ROUNDS [3],
#   NARROW_DIM [4], DATAGEN_FLAGS [].
set -uo pipefail
BUILD_DIR=${1:-build}
ROWS=${ROWS:-1000000}
HOLDOUT_ROWS=${HOLDOUT_ROWS:-100000}
ROUNDS=${ROUNDS:-3}
NARROW_DIM=${NARROW_DIM:-4}
DATAGEN_FLAGS=${DATAGEN_FLAGS:-}
BIN="$BUILD_DIR/bin"
HERE="$(dirname "${BASH_SOURCE[0]}")"
source "$HERE/lib.sh"
bench_start mixed-dims

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs"
# shellcheck disable=SC2086
realistic_rows "$ROWS" "$HOLDOUT_ROWS" $DATAGEN_FLAGS
bayes=$BAYES learnable=$LEARNABLE

# model_config FILE TAIL_DIM: the two tables, the large fields at TAIL_DIM.
model_config() {
  cat >"$1" <<EOF
tables:
  - name: tail
    fields: [C1, C6, C11, C16, C23, C26]
    dim: $2
  - name: head
    fields: [C2-C5, C7-C10, C12-C15, C17-C22, C24, C25]
EOF
}
model_config "$WORK/uniform.yaml" 16
model_config "$WORK/narrow.yaml" "$NARROW_DIM"

# run VARIANT: trains on a new shard; sets RATE and ROW ("cpu auc rows mb").
run() {
  local variant=$1
  start_shards 1 --durability=periodic
  train_on_rows unused --model_config="$WORK/$variant.yaml" \
    --embedding_dim=16 --progress_interval_s=60
  "$BIN/stratactl" --shards="$SHARDS" --json tables >"$WORK/tables.json" ||
    exit 1
  local shard_cpu
  shard_cpu=$(cpu_seconds "${SHARD_PIDS[0]}")
  read -r RATE ROW < <(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
tables = json.load(open(sys.argv[2]))
tables = tables.get("tables", tables) if isinstance(tables, dict) else tables
ours = [t for t in tables if t["name"] in ("tail", "head")]
rows = sum(t["rows"] for t in ours)
mb = sum(t["memory_bytes"] for t in ours) / 2**20
cpu = r["cpu_seconds"] + float(sys.argv[3])
print(r["samples_per_second"], "%.1f %.4f %d %.0f" % (
    1e6 * cpu / r["examples"], r["eval_auc"], rows, mb))' \
    "$WORK/result.json" "$WORK/tables.json" "$shard_cpu")
  kill -TERM "${SHARD_PIDS[0]}"
  wait "${SHARD_PIDS[0]}"
  rm -rf "$WORK"/s0 "$WORK"/s0.port
}

# line ROUND VARIANT RATE "CPU AUC ROWS MB"
line() {
  local cpu auc rows mb
  read -r cpu auc rows mb <<<"$4"
  awk -v r="$1" -v v="$2" -v rate="$3" -v cpu="$cpu" -v auc="$auc" \
    -v rows="$rows" -v mb="$mb" -v l="$learnable" \
    'BEGIN { printf "| %d | %s | %.0f | %.1f | %.4f | %.4f | %d | %d |", r, v, rate, cpu, auc, l - auc, rows, mb }'
}

echo
echo "$ROWS training rows, $HOLDOUT_ROWS held out: Bayes AUC $bayes," \
  "learnable AUC $learnable; tail fields at dim $NARROW_DIM (narrow) or 16" \
  "(uniform); load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| round | tables | samples/s | CPU-us per sample | holdout AUC | below learnable | rows | table memory MiB | narrow/uniform samples/s | narrow/uniform CPU per sample | narrow/uniform memory |"
echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for round in $(seq "$ROUNDS"); do
  if ((round % 2 == 1)); then
    run uniform
    U_RATE=$RATE U_ROW=$ROW
    run narrow
  else
    run narrow
    N_RATE=$RATE N_ROW=$ROW
    run uniform
    U_RATE=$RATE U_ROW=$ROW
    RATE=$N_RATE ROW=$N_ROW
  fi
  ratios=$(awk -v n="$RATE" -v u="$U_RATE" \
    -v nc="$(cut -d' ' -f1 <<<"$ROW")" -v uc="$(cut -d' ' -f1 <<<"$U_ROW")" \
    -v nm="$(cut -d' ' -f4 <<<"$ROW")" -v um="$(cut -d' ' -f4 <<<"$U_ROW")" \
    'BEGIN { printf "%.2fx | %.2fx | %.2fx", n / u, nc / uc, nm / um }')
  echo "$(line "$round" uniform "$U_RATE" "$U_ROW") | | |"
  echo "$(line "$round" "narrow ($NARROW_DIM)" "$RATE" "$ROW") $ratios |"
done
