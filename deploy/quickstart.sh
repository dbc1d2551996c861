#!/usr/bin/env bash
# One command, one machine: installs what is missing, builds Strata, writes
# synthetic click data with strata-datagen, starts a two-shard training
# parameter server and a serving PS that follows it, trains the DLRM model
# with two strata-worker ranks (Gloo allreduce between them), prints progress
# and the held-out AUC next to the planted ceiling, looks trained rows up on
# the serving PS, and stops it all cleanly.
#
# Usage: deploy/quickstart.sh [--keep-data] [--rows=N]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
keep_data=0
rows=5000000
for arg in "$@"; do
  case "$arg" in
    --keep-data) keep_data=1 ;;
    --rows=*) rows="${arg#--rows=}" ;;
    *) echo "usage: $0 [--keep-data] [--rows=N]" >&2; exit 2 ;;
  esac
done

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "Installing missing packages and building (first run takes a few minutes)"
"$root/deploy/install_deps.sh"
"$root/deploy/build.sh" "$root/build" >/dev/null
bin="$root/build/bin"

work="$(mktemp -d "${TMPDIR:-/tmp}/strata-quickstart.XXXXXX")"
pids=()
serving_pid=""
cleanup() {
  for pid in "${pids[@]}" $serving_pid; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}" $serving_pid; do
    wait "$pid" 2>/dev/null || true
  done
  if ((keep_data)); then
    echo "data and logs kept in $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

wait_for_file() {
  local file="$1" pid="$2" deadline=$((SECONDS + 30))
  until [[ -s "$file" ]]; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "quickstart: a server exited early; its log:" >&2
      cat "$work"/*.log >&2
      exit 1
    fi
    if ((SECONDS > deadline)); then
      echo "quickstart: a server did not start within 30 s" >&2
      exit 1
    fi
    sleep 0.1
  done
}

step "Starting a two-shard training parameter server (logs in $work)"
addresses=()
for shard in 0 1; do
  "$bin/strata-server" --port=0 --port_file="$work/shard$shard.port" \
    --shard_index=$shard --num_shards=2 --data_dir="$work/shard$shard" \
    --durability=periodic 2>"$work/shard$shard.log" &
  pids+=($!)
done
for shard in 0 1; do
  wait_for_file "$work/shard$shard.port" "${pids[$shard]}"
  addresses+=("127.0.0.1:$(cat "$work/shard$shard.port")")
  echo "shard $shard listening on ${addresses[$shard]}"
done
shards="$(IFS=,; echo "${addresses[*]}")"
ctl() { echo "\$ stratactl $*"; "$bin/stratactl" --shards="$shards" "$@"; }

step "Health"
ctl health

step "Writing $rows synthetic training rows and 100000 held-out rows"
# Ten values per categorical field: a model can come within 0.01 AUC of the
# planted ceiling from a few million rows (see bench/RESULTS.md). 5M rows
# take about 1.3 GB in the temporary directory, removed at the end.
vocab="$(printf '10,%.0s' {1..26})"
"$bin/strata-datagen" --out="$work/train" --rows="$rows" \
  --holdout_rows=100000 --vocab_sizes="${vocab%,}" --tail_rank=30 |
  tee "$work/datagen.txt"
ceiling="$(sed -n 's/^holdout:.*planted AUC \([0-9.]*\).*/\1/p' \
  "$work/datagen.txt")"

step "Starting strata-serving, which follows both shards' change streams"
"$bin/strata-serving" --port=0 --port_file="$work/serving.port" \
  --shards="$shards" --data_dir="$work/serving" --unknown_keys=initializer \
  2>"$work/serving.log" &
serving_pid=$!
wait_for_file "$work/serving.port" "$serving_pid"
serving="127.0.0.1:$(cat "$work/serving.port")"
echo "strata-serving listening on $serving"

step "Training with two workers (rank 0's progress; logs in $work)"
# --staleness=0: with only 260 distinct rows every batch updates every row,
# so pulls that miss the other rank's last push cost accuracy here; real
# vocabularies train asynchronously (the default, --staleness=1).
workers=()
job="quickstart-$(date +%s)"
for rank in 0 1; do
  "$bin/strata-worker" --shards="$shards" --rank=$rank --num_workers=2 \
    --job_id="$job" --train_files="$work/train" \
    --eval_files="$work/train.holdout" --batch_size=256 --staleness=0 \
    --sparse_optimizer=adam --sparse_learning_rate=0.01 \
    --dense_learning_rate=0.001 --progress_interval_s=5 \
    --checkpoint_dir="$work/checkpoints" \
    --result_file="$work/result$rank.json" 2>"$work/worker$rank.log" &
  workers+=($!)
  pids+=($!)
done
tail -n +1 -f "$work/worker0.log" --pid="${workers[0]}" |
  grep --line-buffered -E "step|done|ERROR" || true
for rank in 0 1; do
  if ! wait "${workers[$rank]}"; then
    echo "quickstart: worker $rank failed; its log:" >&2
    cat "$work/worker$rank.log" >&2
    exit 1
  fi
done
pids=("${pids[@]:0:2}")
auc="$(sed -n 's/.*"eval_auc": \([0-9.]*\).*/\1/p' "$work/result0.json")"
echo
echo "held-out AUC $auc; planted ceiling $ceiling (the best any model can do)"
awk -v a="$auc" -v c="$ceiling" \
  'BEGIN { printf "gap to the ceiling: %.4f\n", c - a }'

step "Looking trained rows up on serving (once caught up), next to a training pull"
# The PS keys of C1..C3 of the first training line.
keys=""
for field in 1 2 3; do
  value="$(sed -n 1p "$work/train" | cut -f$((14 + field)))"
  key="$("$bin/stratactl" feature-key $field "${value:--}")"
  echo "C$field = ${value:-(empty)} -> key $key"
  keys+="${keys:+,}$key"
done
echo "\$ strata-lookup --serving=$serving --wait_caught_up_s=60 dlrm_embeddings $keys"
"$bin/strata-lookup" --serving="$serving" --wait_caught_up_s=60 \
  dlrm_embeddings "$keys" >"$work/lookup.txt"
"$bin/stratactl" --shards="$shards" pull dlrm_embeddings "$keys" \
  >"$work/pull.txt"
cut -c1-100 "$work/lookup.txt"
if cmp -s "$work/lookup.txt" "$work/pull.txt"; then
  echo "serving holds the same trained rows as the training shards"
else
  echo "quickstart: serving's rows differ from training's" >&2
  diff "$work/lookup.txt" "$work/pull.txt" >&2 || true
  exit 1
fi

step "Stopping strata-serving (SIGTERM: exit 0)"
kill -TERM "$serving_pid"
if wait "$serving_pid"; then
  echo "strata-serving stopped cleanly"
else
  echo "quickstart: strata-serving exited with an error" >&2
  exit 1
fi
serving_pid=""

step "Stopping the cluster (SIGTERM: drain, flush, exit 0)"
for i in "${!pids[@]}"; do
  kill -TERM "${pids[$i]}"
  if wait "${pids[$i]}"; then
    echo "shard $i stopped cleanly"
  else
    echo "quickstart: shard $i exited with an error" >&2
    exit 1
  fi
done
pids=()
step "Done"
