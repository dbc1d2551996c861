#!/usr/bin/env bash
# One command, one machine: installs what is missing, builds Strata, writes
# realistic synthetic click data with strata-datagen (--generator=realistic:
# 5.02M values of vocabulary, users and ads, drift), and starts the cluster of
# deploy/local/cluster.yaml with deploy/local/strata-local: a two-shard
# training parameter server, a serving PS that follows it, and two
# strata-worker ranks (Gloo allreduce between them) that train the DLRM
# model with its wide term. Prints progress, the rows the table ends with and
# the held-out AUC next to the data's two ceilings (Bayes: the true
# probabilities; learnable: an estimator that knows the data's form, fitted
# on the same training rows), the cluster's status, looks trained rows up on the serving PS, and stops it
# all cleanly (every process exits 0). Uses the file's fixed ports
# (50051-50052, 50061, 9090-9091, 9095).
#
# --replicas=3 runs deploy/local/cluster-replicated.yaml instead: every shard
# has three replicas coordinated through etcd (strata-local starts one), in
# `replicated` mode. --kill-primary (with --replicas=3) kills shard 0's
# primary with kill -9 while the workers train and prints what followed: a
# follower took over, the workers went on, and the killed replica rejoined.
#
# Usage: deploy/quickstart.sh [--keep-data] [--rows=N] [--replicas=1|3]
#                             [--kill-primary]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
keep_data=0
rows=1500000
replicas=1
kill_primary=0
usage="usage: $0 [--keep-data] [--rows=N] [--replicas=1|3] [--kill-primary]"
for arg in "$@"; do
  case "$arg" in
    --keep-data) keep_data=1 ;;
    --rows=*) rows="${arg#--rows=}" ;;
    --replicas=*) replicas="${arg#--replicas=}" ;;
    --kill-primary) kill_primary=1 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
if [[ "$replicas" != 1 && "$replicas" != 3 ]]; then
  echo "quickstart: --replicas must be 1 or 3; $usage" >&2
  exit 2
fi
if ((kill_primary)) && [[ "$replicas" != 3 ]]; then
  echo "quickstart: --kill-primary needs --replicas=3" >&2
  exit 2
fi

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "Installing missing packages and building (first run takes a few minutes)"
"$root/deploy/install_deps.sh"
"$root/deploy/build.sh" "$root/build" >/dev/null
bin="$root/build/bin"

work="$(mktemp -d "${TMPDIR:-/tmp}/strata-quickstart.XXXXXX")"
# The cluster: deploy/local/cluster.yaml, run by deploy/local/strata-local
# with $work as its run directory (logs in $work/logs).
local_cluster="$root/deploy/local/strata-local"
cluster_file="$root/deploy/local/cluster.yaml"
if [[ "$replicas" == 3 ]]; then
  cluster_file="$root/deploy/local/cluster-replicated.yaml"
fi
running=0
cleanup() {
  if ((running)); then
    "$local_cluster" stop --run_dir="$work" >/dev/null 2>&1 || true
  fi
  if ((keep_data)); then
    echo "data and logs kept in $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

step "Writing $rows realistic training rows and 100000 held-out rows"
# About 0.4 GB in the temporary directory, removed at the end.
mkdir -p "$work/data"
"$bin/strata-datagen" --generator=realistic --out="$work/data/train" \
  --rows="$rows" --holdout_rows=100000 | tee "$work/datagen.txt"
read -r bayes learnable < <(python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))["ceilings"]
print(c["bayes_auc"], c["learnable_auc"])' "$work/data/train.meta.json")

step "Starting the cluster of $cluster_file: 2 shards x $replicas, serving, 2 workers"
echo "\$ deploy/local/strata-local start ${cluster_file#"$root/"} --run_dir=$work"
running=1
"$local_cluster" start "$cluster_file" --run_dir="$work" --bin_dir="$bin"
ctl() { echo "\$ stratactl $*"; "$bin/stratactl" --cluster_file="$cluster_file" "$@"; }
ctl health

step "Training (rank 0's progress, from $work/logs/worker-0.log)"
"$local_cluster" wait --run_dir="$work" >"$work/wait.txt" &
wait_pid=$!
if ((kill_primary)); then
  "$root/deploy/local/kill-primary" --run_dir="$work" --bin="$bin" \
    --cluster_file="$cluster_file" >"$work/failover.txt" 2>&1 &
  kill_pid=$!
fi
tail -n +1 -f "$work/logs/worker-0.log" --pid="$wait_pid" |
  grep --line-buffered -E "step|done|ERROR" || true
if ! wait "$wait_pid"; then
  cat "$work/wait.txt"
  echo "quickstart: a worker failed; logs in $work/logs" >&2
  keep_data=1
  exit 1
fi
cat "$work/wait.txt"
if ((kill_primary)); then
  if ! wait "$kill_pid"; then
    cat "$work/failover.txt"
    echo "quickstart: the failover did not go as it should; logs in $work/logs" >&2
    keep_data=1
    exit 1
  fi
  echo
  cat "$work/failover.txt"
fi
auc="$(sed -n 's/.*"eval_auc": \([0-9.]*\).*/\1/p' "$work/result-0.json")"
seconds="$(sed -n 's/.*"seconds": \([0-9.]*\).*/\1/p' "$work/result-0.json" | head -1)"
table_rows="$("$bin/stratactl" --cluster_file="$cluster_file" --json tables |
  python3 -c 'import json, sys
print(sum(t["rows"] for t in json.load(sys.stdin)["tables"]
          if t["name"] == "dlrm_embeddings"))')"
echo
echo "trained $rows rows in $seconds s; the table dlrm_embeddings ends with $table_rows rows"
awk -v a="$auc" -v l="$learnable" -v b="$bayes" 'BEGIN {
  printf "held-out AUC %.4f; learnable ceiling %.4f (gap %.4f); Bayes ceiling %.4f (gap %.4f)\n", a, l, l - a, b, b - a }'

# Outside the run folder, which is removed at the end (--keep-data keeps it).
curve="${TMPDIR:-/tmp}/strata-quickstart-curve.png"
step "Training curve (rank 0's progress.csv)"
echo "\$ stratactl plot $work -o $curve"
if "$bin/stratactl" plot "$work" -o "$curve" >/dev/null; then
  echo "loss and held-out AUC against steps: $curve"
else
  echo "quickstart: no curve drawn (see above); training itself went fine" >&2
fi

step "Cluster status"
echo "\$ deploy/local/strata-local status --run_dir=$work"
"$local_cluster" status --run_dir="$work"

# Serving applies the shards' change streams behind training (about 40 s
# behind at the end here, with 2 cores for 6 processes): wait until it has
# caught up.
step "Looking trained rows up on serving (once caught up), next to a training pull"
serving="$(python3 -c 'import sys, yaml
print(yaml.safe_load(open(sys.argv[1]))["serving"]["addresses"][0])' \
  "$cluster_file")"
# The PS keys of C1..C3 of the first training line.
keys=""
for field in 1 2 3; do
  value="$(sed -n 1p "$work/data/train" | cut -f$((14 + field)))"
  key="$("$bin/stratactl" feature-key $field "${value:--}")"
  echo "C$field = ${value:-(empty)} -> key $key"
  keys+="${keys:+,}$key"
done
echo "\$ strata-lookup --serving=$serving --wait_caught_up_s=300 dlrm_embeddings $keys"
"$bin/strata-lookup" --serving="$serving" --wait_caught_up_s=300 \
  dlrm_embeddings "$keys" >"$work/lookup.txt"
"$bin/stratactl" --cluster_file="$cluster_file" pull dlrm_embeddings "$keys" \
  >"$work/pull.txt"
cut -c1-100 "$work/lookup.txt"
if cmp -s "$work/lookup.txt" "$work/pull.txt"; then
  echo "serving holds the same trained rows as the training shards"
else
  echo "quickstart: serving's rows differ from training's" >&2
  diff "$work/lookup.txt" "$work/pull.txt" >&2 || true
  exit 1
fi

step "Stopping the cluster (SIGTERM: drain, flush, exit 0)"
echo "\$ deploy/local/strata-local stop --run_dir=$work"
running=0
if ! "$local_cluster" stop --run_dir="$work"; then
  echo "quickstart: a process exited with an error; logs in $work/logs" >&2
  keep_data=1
  exit 1
fi
step "Done"
