#!/usr/bin/env bash
# Training with two builds side by side: run_training.sh's data and model,
# one worker and one fresh shard of BUILD_A, then of BUILD_B (both
# programs from the same build), ROUNDS rounds, the order alternating.
#
# Prints one row per run (samples/s, the worker's CPU seconds from its
# result file, the shard's CPU seconds while the worker ran, held-out AUC)
# and per round the B/A ratios of samples/s and of the worker's, the
# shard's and their total CPU.
#
# Usage: bench/run_training_ab.sh BUILD_A BUILD_B
# Environment: ROUNDS [3]  ROWS [1000000]  HOLDOUT_ROWS [100000]
#              BATCH [1024]  WORKER_FLAGS [] (added to both sides)
#              WORKER_FLAGS_A [], WORKER_FLAGS_B [] (added to one side: the
#              same build twice compares a flag)
set -uo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: bench/run_training_ab.sh BUILD_A BUILD_B" >&2
  exit 2
fi
ROUNDS=${ROUNDS:-3}
ROWS=${ROWS:-1000000}
HOLDOUT_ROWS=${HOLDOUT_ROWS:-100000}
BATCH=${BATCH:-1024}
WORKER_FLAGS=${WORKER_FLAGS:-}
WORKER_FLAGS_A=${WORKER_FLAGS_A:-}
WORKER_FLAGS_B=${WORKER_FLAGS_B:-}
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_start training-ab

"$1/bin/strata-datagen" --out="$WORK/rows" --rows="$ROWS" \
  --holdout_rows="$HOLDOUT_ROWS" >"$WORK/datagen.out" || exit 1

# run_build BUILD LABEL: prints "LABEL samples/s worker_cpu shard_cpu auc".
run_build() {
  local BIN=$1/bin label=$2 before after side_flags=$WORKER_FLAGS_A
  [[ $label == B ]] && side_flags=$WORKER_FLAGS_B
  rm -rf "$WORK/s0" "$WORK/s0.port"
  start_shards 1 --durability=periodic
  before=$(cpu_seconds "${SHARD_PIDS[0]}")
  # shellcheck disable=SC2086
  train_on_rows t --batch_size="$BATCH" --epochs=1 --wide=false \
    --shuffle_buffer=0 --progress_interval_s=60 $WORKER_FLAGS $side_flags
  after=$(cpu_seconds "${SHARD_PIDS[0]}")
  kill -TERM "${SHARD_PIDS[0]}"
  wait "${SHARD_PIDS[0]}" 2>/dev/null
  python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(sys.argv[2], "%.0f %.2f %.2f %.4f" % (r["samples_per_second"],
      r["cpu_seconds"], float(sys.argv[4]) - float(sys.argv[3]),
      r["eval_auc"]))' "$WORK/result.json" "$label" "$before" "$after"
}

echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "round build samples/s worker_cpu_s shard_cpu_s auc"
alternate_builds "$ROUNDS" "$1" "$2" run_build | tee "$WORK/rows.txt"
echo "ratios B/A per round (samples/s; CPU: worker, shard, both):"
awk '{ rate[$1 "," $2] = $3; worker[$1 "," $2] = $4; shard[$1 "," $2] = $5;
       rounds[$1] = 1 }
  END { for (r in rounds) printf "  round %d: %.2f; %.2f, %.2f, %.2f\n", r,
          rate[r ",B"] / rate[r ",A"], worker[r ",B"] / worker[r ",A"],
          shard[r ",B"] / shard[r ",A"],
          (worker[r ",B"] + shard[r ",B"]) / (worker[r ",A"] + shard[r ",A"]) }' \
  "$WORK/rows.txt" | sort -k2n
