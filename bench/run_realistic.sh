#!/usr/bin/env bash
# strata-worker on strata-datagen --generator=realistic data, next to the
# data's two ceilings on the holdout: the Bayes AUC (true probabilities) and
# the learnable AUC (an estimator that knows the generator's form, fitted on
# the same training rows). Per round, in alternating order, on a new table
# of the same 2 shards:
#   defaults    strata-worker's defaults (batch 1024, Adagrad 0.05, the
#               wide term at rate 0.5, passes chosen from the data's size,
#               shuffled within windows of 100,000)
#   deep        the former defaults (one epoch in file order, batch 1024,
#               Adagrad 0.05, no wide term)
#   deep+wide   the same with --wide (wide learning rate 0.5)
#   tuned       deploy/local/cluster.yaml's workers' flags (the quickstart's:
#               --wide, Adagrad 0.2 on the rows, dense Adam 0.003, one
#               epoch in file order), one worker with batch 128, the two
#               ranks' global batch there
# Prints a markdown table: holdout AUC, its gap to the learnable ceiling,
# seconds and CPU-seconds of training (the worker's process), samples/s,
# and the rows the table ends with.
#
# Usage: bench/run_realistic.sh [BUILD_DIR]
# Environment: ROUNDS [3], ROWS [1000000], HOLDOUT_ROWS [100000],
#              DATAGEN_FLAGS [] (more strata-datagen flags)
set -uo pipefail
BUILD_DIR=${1:-build}
ROUNDS=${ROUNDS:-3}
ROWS=${ROWS:-1000000}
HOLDOUT_ROWS=${HOLDOUT_ROWS:-100000}
DATAGEN_FLAGS=${DATAGEN_FLAGS:-}
BIN="$BUILD_DIR/bin"
HERE="$(dirname "${BASH_SOURCE[0]}")"
source "$HERE/lib.sh"
bench_start realistic

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
start_shards 2
# shellcheck disable=SC2086
"$BIN/strata-datagen" --generator=realistic --rows="$ROWS" \
  --holdout_rows="$HOLDOUT_ROWS" --out="$WORK/rows" $DATAGEN_FLAGS \
  >"$WORK/datagen.out" || exit 1
read -r bayes learnable unseen fit < <(python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))
c = m["ceilings"]
print("%.4f %.4f %.1f %.1f" % (c["bayes_auc"], c["learnable_auc"],
      100 * m["holdout_unseen_value_share"], c["learnable_fit_seconds"]))' \
  "$WORK/rows.meta.json")
echo "realistic data: $ROWS training rows, $HOLDOUT_ROWS held out," \
  "Bayes AUC $bayes, learnable AUC $learnable (fitted in $fit s)," \
  "$unseen% of holdout values unseen in training"

table=0
run_way() {
  local round=$1 way=$2 flags=()
  case $way in
    deep) flags=("${FORMER_DEFAULTS[@]}") ;;
    deep+wide) flags=("${FORMER_DEFAULTS[@]}" --wide --wide_learning_rate=0.5) ;;
    tuned)
      flags=("${FORMER_DEFAULTS[@]}" --wide --wide_learning_rate=0.3
        --batch_size=128 --sparse_learning_rate=0.2
        --dense_learning_rate=0.003)
      ;;
  esac
  table=$((table + 1))
  train_on_rows "t$table" "${flags[@]}"
  local rows
  rows=$("$BIN/stratactl" --shards="$SHARDS" --json tables | python3 -c '
import json, sys
print(sum(t["rows"] for t in json.load(sys.stdin)["tables"]
          if t["name"] == sys.argv[1]))' "t$table")
  python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
auc = r["eval_auc"]
print("| %s | %s | %.4f | %.4f | %.1f | %.1f | %.0f | %.1f | %s |" % (
    sys.argv[2], sys.argv[3], auc, float(sys.argv[4]) - auc, r["seconds"],
    r["cpu_seconds"], int(sys.argv[5]) / r["seconds"],
    r["cpu_seconds"] / int(sys.argv[5]) * 1e6, sys.argv[6]))' \
    "$WORK/result.json" "$round" "$way" "$learnable" "$ROWS" "$rows"
}

echo "| round | model | holdout AUC | below learnable | seconds | CPU-s | samples/s | CPU-us per sample | table rows |"
echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for round in $(seq "$ROUNDS"); do
  ways=(defaults deep deep+wide tuned)
  ((round % 2 == 0)) && ways=(tuned deep+wide deep defaults)
  for way in "${ways[@]}"; do run_way "$round" "$way"; done
done
