#!/usr/bin/env bash
# Strata against TensorFlow/Keras on strata-datagen --generator=realistic
# data: the same DLRM with its wide term in both (strata-worker --wide;
# bench/keras_dlrm.py --wide), the same optimizers and batch, next to the
# data's Bayes and learnable ceilings. For each size in SIZES, ROUNDS rounds,
# each training Strata (one worker, one shard, a new table per run) and
# Keras (one process) once, in alternating order.
#
# Prints a markdown table per size: samples/s, CPU-microseconds per sample
# (Strata: the worker's training loop plus the shard while it trained;
# Keras: its process while it trained), held-out AUC and its gap to the
# learnable ceiling, and per round Strata/Keras ratios.
#
# Usage: bench/run_keras_realistic.sh [BUILD_DIR]
# Environment: SIZES ["1000000 5000000"], ROUNDS [3], HOLDOUT_ROWS [100000],
#   BATCH [1024], WIDE_LR [0.5] (the wide weights' Adagrad rate in both),
#   KERAS_VENV [BUILD_DIR/python-venv]: a Python with tensorflow-cpu and
#   keras (bench/requirements-keras.txt), DATAGEN_FLAGS [].
set -uo pipefail
BUILD_DIR=${1:-build}
SIZES=${SIZES:-1000000 5000000}
ROUNDS=${ROUNDS:-3}
HOLDOUT_ROWS=${HOLDOUT_ROWS:-100000}
BATCH=${BATCH:-1024}
WIDE_LR=${WIDE_LR:-0.5}
KERAS_VENV=${KERAS_VENV:-$BUILD_DIR/python-venv}
DATAGEN_FLAGS=${DATAGEN_FLAGS:-}
BIN="$BUILD_DIR/bin"
HERE="$(dirname "${BASH_SOURCE[0]}")"
source "$HERE/lib.sh"
bench_start keras-realistic
if ! "$KERAS_VENV/bin/python" -c 'import tensorflow, keras' 2>/dev/null; then
  echo "run_keras_realistic.sh: $KERAS_VENV has no tensorflow and keras" \
    "(pip install -r bench/requirements-keras.txt)" >&2
  exit 2
fi

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs"
table=0

# strata_run ROUND: prints a result row; sets STRATA_RATE.
strata_run() {
  local shard_before shard_after
  table=$((table + 1))
  shard_before=$(cpu_seconds "${SHARD_PIDS[0]}")
  # One pass in file order, as Keras trains here.
  train_on_rows "t$table" --wide --wide_learning_rate="$WIDE_LR" \
    --batch_size="$BATCH" --epochs=1 --shuffle_buffer=0 \
    --progress_interval_s=60
  shard_after=$(cpu_seconds "${SHARD_PIDS[0]}")
  read -r STRATA_RATE row < <(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
cpu = r["cpu_seconds"] + float(sys.argv[3]) - float(sys.argv[2])
print(r["samples_per_second"], "%.1f %.4f" % (
    1e6 * cpu / r["examples"], r["eval_auc"]))' \
    "$WORK/result.json" "$shard_before" "$shard_after")
  STRATA_ROW="$row"
}

# keras_run: sets KERAS_RATE and KERAS_ROW.
keras_run() {
  "$KERAS_VENV/bin/python" "$HERE/keras_dlrm.py" --train "$WORK/rows" \
    --holdout "$WORK/rows.holdout" --batch_size "$BATCH" --wide \
    --wide_lr "$WIDE_LR" --log_every_s 0 >"$WORK/keras.json" \
    2>"$WORK/keras.log" || {
    tail -5 "$WORK/keras.log" >&2
    exit 1
  }
  read -r KERAS_RATE KERAS_ROW < <(python3 -c '
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
samples = r["train_rows"] * r["epochs"]
print(r["samples_per_second"], "%.1f %.4f" % (
    1e6 * r["cpu_seconds"] / samples, r["holdout_auc"]))' "$WORK/keras.json")
}

# row SYSTEM RATE "CPU AUC": one line of the table.
row() {
  local system=$1 rate=$2 cpu auc
  read -r cpu auc <<<"$3"
  awk -v r="$round" -v s="$system" -v rate="$rate" -v cpu="$cpu" \
    -v auc="$auc" -v l="$learnable" \
    'BEGIN { printf "| %d | %s | %.0f | %.1f | %.4f | %.4f |", r, s, rate, cpu, auc, l - auc }'
}

for size in $SIZES; do
  rm -rf "$WORK/rows" "$WORK/rows.holdout"
  # shellcheck disable=SC2086
  "$BIN/strata-datagen" --generator=realistic --rows="$size" \
    --holdout_rows="$HOLDOUT_ROWS" --out="$WORK/rows" $DATAGEN_FLAGS \
    >"$WORK/datagen.out" || exit 1
  read -r bayes learnable < <(python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))["ceilings"]
print("%.4f %.4f" % (c["bayes_auc"], c["learnable_auc"]))' \
    "$WORK/rows.meta.json")
  start_shards 1 --durability=periodic
  echo
  echo "$size training rows, $HOLDOUT_ROWS held out: Bayes AUC $bayes," \
    "learnable AUC $learnable; batch $BATCH, wide rate $WIDE_LR;" \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo "| round | system | samples/s | CPU-us per sample | holdout AUC | below learnable | Strata/Keras samples/s | Keras/Strata CPU per sample |"
  echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
  for round in $(seq "$ROUNDS"); do
    if ((round % 2 == 1)); then
      strata_run
      keras_run
    else
      keras_run
      strata_run
    fi
    ratios=$(awk -v s="$STRATA_RATE" -v k="$KERAS_RATE" \
      -v sc="${STRATA_ROW%% *}" -v kc="${KERAS_ROW%% *}" \
      'BEGIN { printf "%.2fx | %.2fx", s / k, kc / sc }')
    echo "$(row "Strata 1 worker + 1 shard" "$STRATA_RATE" "$STRATA_ROW") $ratios |"
    echo "$(row "Keras, one process" "$KERAS_RATE" "$KERAS_ROW") | |"
  done
  for pid in "${SHARD_PIDS[@]}"; do kill -TERM "$pid"; wait "$pid"; done
  # The next size's shard writes its own port file (start_shards waits for
  # it) and data.
  rm -rf "$WORK"/s0 "$WORK"/s0.port
done
