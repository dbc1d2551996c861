#!/usr/bin/env bash
# One command, one machine: installs what is missing, builds Strata, starts a
# two-shard training parameter server on loopback, creates a table, pushes
# gradients and pulls rows through it, checkpoints it, starts a serving PS
# that follows it and looks the same rows up there, and stops it all cleanly.
#
# Usage: deploy/quickstart.sh [--keep-data]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
keep_data=0
[[ "${1:-}" == "--keep-data" ]] && keep_data=1

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
    --durability=group 2>"$work/shard$shard.log" &
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

step "Creating an embedding table of dimension 4 trained by Adagrad"
ctl create-table ads --dim=4 --optimizer=adagrad --learning_rate=0.1 \
  --initializer=uniform --init_min=-0.1 --init_max=0.1 --seed=7

step "Pulling three rows (fresh rows come from the seeded initializer)"
ctl pull ads 11,22,33

step "Pushing gradients (key 11 twice in one batch: its gradients are summed)"
ctl push ads --keys=11,22,11 \
  --gradients=1,1,1,1,0.5,0.5,0.5,0.5,1,1,1,1

step "Pulling again: the server applied Adagrad next to the rows"
ctl pull ads 11,22,33

step "Tables and per-shard stats"
ctl tables
ctl stats

step "Checkpointing every shard at global step 1"
ctl checkpoint quickstart-1 --global_step=1

step "Starting strata-serving, which follows both shards' change streams"
"$bin/strata-serving" --port=0 --port_file="$work/serving.port" \
  --shards="$shards" --data_dir="$work/serving" --unknown_keys=initializer \
  2>"$work/serving.log" &
serving_pid=$!
wait_for_file "$work/serving.port" "$serving_pid"
serving="127.0.0.1:$(cat "$work/serving.port")"
echo "strata-serving listening on $serving"

step "Looking the rows up on serving (once caught up), next to a training pull"
echo "\$ strata-lookup --serving=$serving --wait_caught_up_s=30 ads 11,22,33"
"$bin/strata-lookup" --serving="$serving" --wait_caught_up_s=30 ads 11,22,33 \
  >"$work/lookup.txt"
"$bin/stratactl" --shards="$shards" pull ads 11,22,33 >"$work/pull.txt"
printf '%-50s| %s\n' "serving (strata-lookup)" "training (stratactl pull)"
paste -d'|' "$work/lookup.txt" "$work/pull.txt" | tr '\t' ' ' |
  awk -F'|' '{ printf "%-50s| %s\n", $1, $2 }'
if cmp -s "$work/lookup.txt" "$work/pull.txt"; then
  echo "serving holds the same rows as training"
else
  echo "quickstart: serving's rows differ from training's" >&2
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
