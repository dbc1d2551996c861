#!/usr/bin/env bash
# Trains the same DLRM model on the same strata-datagen data three ways, in
# one run: Strata with 1 worker + 1 shard, Strata with 2 workers + 2 shards,
# and TensorFlow/Keras in one process (embeddings inside TF; bench/
# keras_dlrm.py). Prints a markdown table (samples/s, CPU seconds per 1,000
# samples of every process of the run over its training, evaluations left
# out; held-out AUC; ratios to Keras) and writes it to $OUT_DIR/training.md.
#
# Usage: bench/run_training.sh [BUILD_DIR]      (default: ./build)
# Environment (defaults in brackets):
#   ROWS [1000000]  HOLDOUT_ROWS [100000]  EPOCHS [1]  BATCH [1024]
#   VOCAB [default]: "default" (10 .. 2,000,000 values per field, geometric)
#                    or "small" (10 per field, tail_rank 30)
#   KERAS_VENV [BUILD_DIR/keras-venv]: made from bench/requirements-keras.txt
#   OUT_DIR [bench/out]  KEEP_WORK [0]
# Shards run --durability=periodic, as training shards do (the trainer
# checkpoints; a crash loses at most the last second of pushes).
# Everything listens on 127.0.0.1; the script stops what it started.
set -uo pipefail

BUILD_DIR=${1:-build}
ROWS=${ROWS:-1000000}
HOLDOUT_ROWS=${HOLDOUT_ROWS:-100000}
EPOCHS=${EPOCHS:-1}
BATCH=${BATCH:-1024}
VOCAB=${VOCAB:-default}
KERAS_VENV=${KERAS_VENV:-$BUILD_DIR/keras-venv}
OUT_DIR=${OUT_DIR:-bench/out}
BIN="$BUILD_DIR/bin"
for bin in strata-server strata-worker strata-datagen; do
  if [[ ! -x "$BIN/$bin" ]]; then
    echo "run_training.sh: $BIN/$bin not found; build it first" >&2
    exit 2
  fi
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/strata-train-bench.XXXXXX")
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  if [[ "${KEEP_WORK:-0}" == 1 ]]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

if [[ ! -x "$KERAS_VENV/bin/python" ]]; then
  echo "== making $KERAS_VENV (tensorflow-cpu from PyPI)" >&2
  python3 -m venv "$KERAS_VENV" &&
    "$KERAS_VENV/bin/pip" install -q -r bench/requirements-keras.txt || exit 1
fi

datagen_flags=(--out="$WORK/train" --rows="$ROWS" --holdout_rows="$HOLDOUT_ROWS")
if [[ "$VOCAB" == small ]]; then
  datagen_flags+=(--vocab_sizes="$(printf '10,%.0s' {1..25})10" --tail_rank=30)
fi
echo "== strata-datagen ${datagen_flags[*]}" >&2
"$BIN/strata-datagen" "${datagen_flags[@]}" >"$WORK/datagen.txt" || exit 1
ceiling=$(sed -n 's/^holdout:.*planted AUC \([0-9.]*\).*/\1/p' "$WORK/datagen.txt")

# start_shards N: starts N fresh shards; sets SHARDS to their addresses.
RUN_ID=0
start_shards() {
  local n=$1 addresses=() i
  PIDS=()
  RUN_ID=$((RUN_ID + 1))
  for ((i = 0; i < n; i++)); do
    "$BIN/strata-server" --port=0 --port_file="$WORK/r$RUN_ID.s$i.port" \
      --shard_index=$i --num_shards="$n" --data_dir="$WORK/r$RUN_ID.s$i" \
      --durability=periodic \
      2>"$WORK/r$RUN_ID.s$i.log" &
    PIDS+=($!)
  done
  for ((i = 0; i < n; i++)); do
    for _ in $(seq 300); do [[ -s "$WORK/r$RUN_ID.s$i.port" ]] && break; sleep 0.1; done
    addresses+=("127.0.0.1:$(cat "$WORK/r$RUN_ID.s$i.port")")
  done
  SHARDS=$(IFS=,; echo "${addresses[*]}")
}

# CPU seconds (user + system) the running shards have used so far.
shard_cpu_seconds() {
  local pid total=0
  for pid in "${PIDS[@]}"; do
    total=$(awk -v t="$total" -v hz="$(getconf CLK_TCK)" \
      '{ print t + ($14 + $15) / hz }' "/proc/$pid/stat")
  done
  echo "$total"
}

stop_shards() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  PIDS=()
}

# strata_run N [FLAGS...]: N workers on N fresh shards; sets RATE and AUC.
strata_run() {
  local n=$1 rank pids=()
  shift
  start_shards "$n"
  local shard_cpu_start
  shard_cpu_start=$(shard_cpu_seconds)
  for ((rank = 0; rank < n; rank++)); do
    "$BIN/strata-worker" --shards="$SHARDS" --rank=$rank --num_workers="$n" \
      --job_id="bench-$n-$$" --train_files="$WORK/train" \
      --eval_files="$WORK/train.holdout" --batch_size="$BATCH" \
      --epochs="$EPOCHS" --wide=false --shuffle_buffer=0 \
      --progress_interval_s=30 \
      --result_file="$WORK/r$RUN_ID.w$rank.json" "$@" \
      2>"$WORK/r$RUN_ID.w$rank.log" &
    pids+=($!)
  done
  # The shards' CPU is read when every worker has said its training is
  # done, before the held-out evaluation's pulls (Keras's figure leaves out
  # its evaluation too); or at the end, should a worker exit first. Polled
  # every 0.1 s: the evaluation takes longer, and the polling's own
  # processes take CPU from the run.
  local shard_cpu_end=""
  while [[ -z "$shard_cpu_end" ]]; do
    if [[ $(grep -l "training done at step" "$WORK"/r$RUN_ID.w*.log 2>/dev/null |
      wc -l) -eq $n ]] || ! kill -0 "${pids[@]}" 2>/dev/null; then
      shard_cpu_end=$(shard_cpu_seconds)
    else
      sleep 0.1
    fi
  done
  for pid in "${pids[@]}"; do
    wait "$pid" || { cat "$WORK"/r$RUN_ID.w*.log >&2; exit 1; }
  done
  local shard_cpu
  shard_cpu=$(awk -v a="$shard_cpu_start" -v b="$shard_cpu_end" \
    'BEGIN { print b - a }')
  stop_shards
  # CPU per 1,000 samples: every worker's training loop and the shards
  # until the workers' training ended.
  read -r RATE AUC CPU < <(python3 - "$shard_cpu" "$WORK"/r$RUN_ID.w*.json <<'PY'
import json, sys
results = [json.load(open(path)) for path in sys.argv[2:]]
r = results[0]  # rank 0; "examples" counts every rank's
cpu = float(sys.argv[1]) + sum(w["cpu_seconds"] for w in results)
print(r["samples_per_second"], r["eval_auc"], 1000 * cpu / r["examples"])
PY
)
}

echo "== Strata, 1 worker + 1 shard" >&2
strata_run 1 && s1_rate=$RATE s1_auc=$AUC s1_cpu=$CPU
echo "== Strata, 1 worker + 1 shard, --staleness=0" >&2
strata_run 1 --staleness=0 && s0_rate=$RATE s0_auc=$AUC s0_cpu=$CPU
echo "== Strata, 2 workers + 2 shards" >&2
strata_run 2 && s2_rate=$RATE s2_auc=$AUC s2_cpu=$CPU
echo "== Keras (one process)" >&2
"$KERAS_VENV/bin/python" bench/keras_dlrm.py --train "$WORK/train" \
  --holdout "$WORK/train.holdout" --batch_size "$BATCH" --epochs "$EPOCHS" \
  >"$WORK/keras.json" 2>"$WORK/keras.log" || { cat "$WORK/keras.log" >&2; exit 1; }
read -r k_rate k_auc k_cpu k_version < <(python3 - "$WORK/keras.json" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
samples = r["train_rows"] * r["epochs"]
print(r["samples_per_second"], r["holdout_auc"],
      1000 * r["cpu_seconds"] / samples, r.get("tensorflow_version", "?"))
PY
)

mkdir -p "$OUT_DIR"
{
  echo "Data: $ROWS rows ($VOCAB vocabularies), $HOLDOUT_ROWS held out, planted AUC $ceiling; $EPOCHS epoch(s), batch $BATCH per worker; TensorFlow $k_version."
  echo
  echo "| run | samples/s | vs Keras | CPU-s per 1k samples | vs Keras | held-out AUC | AUC - Keras |"
  echo "|---|---:|---:|---:|---:|---:|---:|"
  for row in "Strata 1 worker + 1 shard:$s1_rate:$s1_cpu:$s1_auc" \
             "Strata 1 worker + 1 shard, synchronous (--staleness=0):$s0_rate:$s0_cpu:$s0_auc" \
             "Strata 2 workers + 2 shards:$s2_rate:$s2_cpu:$s2_auc" \
             "Keras, one process:$k_rate:$k_cpu:$k_auc"; do
    IFS=: read -r name rate cpu auc <<<"$row"
    awk -v n="$name" -v r="$rate" -v c="$cpu" -v a="$auc" -v kr="$k_rate" \
      -v kc="$k_cpu" -v ka="$k_auc" \
      'BEGIN { printf "| %s | %.0f | %.2fx | %.4f | %.2fx | %.4f | %+.4f |\n", n, r, r / kr, c, c / kc, a, a - ka }'
  done
} | tee "$OUT_DIR/training.md"
