#!/usr/bin/env bash
# End to end on a GPU machine: trains the same model on the same synthetic
# data twice against a fresh local shard each time, once with
# `strata-worker --device=cpu` and once with `--device=cuda`, and checks that
# both reach the same held-out AUC (within AUC_TOLERANCE). Prints a table of
# step time, samples/s and CPU-seconds per 1,000 samples of each.
#
# Usage: bash tests/gpu/train_cpu_vs_gpu.sh BIN_DIR
#   BIN_DIR holds strata-server, strata-worker and strata-datagen.
# Environment (defaults in brackets):
#   ROWS [200000]  HOLDOUT_ROWS [20000]  AUC_TOLERANCE [0.005]
#   MODELS: one "NAME BATCH WORKER_FLAGS..." per line; [a default DLRM with
#           batch 1024, and wide MLPs with batch 4096]
# Exits non-zero when a run fails or the two AUCs of a model differ by more
# than AUC_TOLERANCE. Everything listens on 127.0.0.1; the script stops what
# it started.
set -uo pipefail
(($# == 1)) || { echo "usage: train_cpu_vs_gpu.sh BIN_DIR" >&2; exit 2; }
BIN="$1"
ROWS=${ROWS:-200000}
HOLDOUT_ROWS=${HOLDOUT_ROWS:-20000}
AUC_TOLERANCE=${AUC_TOLERANCE:-0.005}
MODELS=${MODELS:-"dlrm 1024 --bottom_mlp=64 --top_mlp=128,64
wide_mlps 4096 --bottom_mlp=512,256,64 --top_mlp=1024,1024,512,256"}
for bin in strata-server strata-worker strata-datagen; do
  [[ -x "$BIN/$bin" ]] || { echo "train_cpu_vs_gpu.sh: no $BIN/$bin" >&2; exit 2; }
done

source "$(dirname "${BASH_SOURCE[0]}")/../../bench/lib.sh"
bench_start gpu-train  # $WORK and $PIDS, stopped and removed on exit

"$BIN/strata-datagen" --out="$WORK/rows" --rows="$ROWS" \
  --holdout_rows="$HOLDOUT_ROWS" >"$WORK/datagen.txt" || exit 1

start_shard() {  # start_shard NAME: a fresh shard; sets SHARD_PID and SHARD
  local dir="$WORK/shard.$1"
  "$BIN/strata-server" --port=0 --port_file="$dir.port" --data_dir="$dir" \
    --durability=periodic --log_level=warning &
  SHARD_PID=$!
  PIDS+=("$SHARD_PID")
  wait_file "$dir.port" "$SHARD_PID"
  SHARD="127.0.0.1:$(cat "$dir.port")"
}

stop_shard() {
  kill -TERM "$SHARD_PID" 2>/dev/null
  wait "$SHARD_PID" 2>/dev/null
}

train() {  # train NAME DEVICE BATCH FLAGS...: one run into $WORK/NAME.DEVICE.json
  local name=$1 device=$2 batch=$3
  shift 3
  start_shard "$name.$device"
  "$BIN/strata-worker" --shards="$SHARD" --train_files="$WORK/rows" \
    --eval_files="$WORK/rows.holdout" --device="$device" \
    --batch_size="$batch" --epochs=1 --shuffle_buffer=0 --staleness=0 \
    --progress_interval_s=60 --result_file="$WORK/$name.$device.json" "$@" \
    >"$WORK/$name.$device.log" 2>&1 || {
    echo "strata-worker --device=$device ($name) failed:" >&2
    tail -n 20 "$WORK/$name.$device.log" >&2
    stop_shard
    return 1
  }
  stop_shard
}

print_row() {  # print_row NAME BATCH DEVICE: the table's row of one run
  python3 - "$@" "$WORK/$1.$3.json" <<'PY'
import json, sys
name, batch, device, path = sys.argv[1:]
r = json.load(open(path))
print(f"| {name} | {batch} | {device} | {1000 * r['seconds'] / r['steps']:.2f}"
      f" | {r['samples_per_second']:.0f}"
      f" | {1000 * r['cpu_seconds'] / r['examples']:.3f} | {r['eval_auc']:.4f} |")
PY
}

compare() {  # compare NAME: fails when the two runs' AUCs are too far apart
  python3 - "$1" "$AUC_TOLERANCE" "$WORK/$1".{cpu,cuda}.json <<'PY'
import json, sys
name, tolerance = sys.argv[1], float(sys.argv[2])
cpu, cuda = (json.load(open(path)) for path in sys.argv[3:])
gap = abs(cpu["eval_auc"] - cuda["eval_auc"])
speedup = cuda["samples_per_second"] / cpu["samples_per_second"]
verdict = "ok" if gap <= tolerance else f"FAIL (tolerance {tolerance})"
print(f"{name}: AUC gap {gap:.4f} {verdict}; cuda/cpu samples/s {speedup:.2f}x",
      file=sys.stderr)
sys.exit(0 if gap <= tolerance else 1)
PY
}

failed=0
echo "| model | batch | device | step ms | samples/s | worker CPU-s per 1k samples | held-out AUC |"
echo "| --- | ---: | --- | ---: | ---: | ---: | ---: |"
while read -r name batch flags; do
  [[ -z "$name" ]] && continue
  for device in cpu cuda; do
    # shellcheck disable=SC2086  # flags are words
    train "$name" "$device" "$batch" $flags || { failed=1; continue 2; }
    print_row "$name" "$batch" "$device"
  done
  compare "$name" || failed=1
done <<<"$MODELS"
exit "$failed"
