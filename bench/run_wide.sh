#!/usr/bin/env bash
# The wide (first-order) term on data whose signal is first-order only
# (strata-datagen --interaction_scale=0), against logistic regression
# (scikit-learn, bench/logistic_regression.py) on the same rows, interleaved
# ROUNDS times: per round, in alternating order,
#   lr C=1, lr C=0.1     scikit-learn's default and a stronger L2
#   deep, deep+wide      strata-worker with its former defaults (one
#                        epoch in file order, batch 1024), without and
#                        with --wide (at the sparse learning rate)
#   deep*, deep+wide*    the same with 4 epochs of batch 256 and sparse
#                        learning rate 0.01 (wide: 0.5)
# each strata-worker on a new table of the same 2 shards. Prints a markdown
# table: holdout AUC, seconds and CPU-seconds of training (the worker's
# process, the shards not counted; the fit alone for lr), and the planted
# (Bayes) AUC of the holdout.
#
# Usage: bench/run_wide.sh [BUILD_DIR]
# Environment: ROUNDS [3], ROWS [60000], HOLDOUT_ROWS [10000],
#              PYTHON [BUILD_DIR/python-venv/bin/python, with scikit-learn]
set -uo pipefail
BUILD_DIR=${1:-build}
ROUNDS=${ROUNDS:-3}
ROWS=${ROWS:-60000}
HOLDOUT_ROWS=${HOLDOUT_ROWS:-10000}
PYTHON=${PYTHON:-$BUILD_DIR/python-venv/bin/python}
BIN="$BUILD_DIR/bin"
HERE="$(dirname "${BASH_SOURCE[0]}")"
source "$HERE/lib.sh"
bench_start wide

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
start_shards 2
vocab=$(python3 -c 'print(",".join(str(int(10 * 1.3 ** i)) for i in range(26)))')
"$BIN/strata-datagen" --rows="$ROWS" --holdout_rows="$HOLDOUT_ROWS" \
  --out="$WORK/rows" --interaction_scale=0 --first_order_scale=1.5 \
  --vocab_sizes="$vocab" >/dev/null || exit 1
ceiling=$(python3 -c 'import json,sys; print("%.4f" % json.load(open(sys.argv[1]))["holdout"]["planted_auc"])' \
  "$WORK/rows.meta.json")
echo "first-order data: $ROWS training rows, $HOLDOUT_ROWS held out, planted AUC $ceiling"

TUNED=(--epochs=4 --batch_size=256 --sparse_learning_rate=0.01)
table=0
# Prints "| round | model | AUC | seconds | CPU-s |" for one way.
run_way() {
  local round=$1 way=$2
  case $way in
    lr)
      "$PYTHON" "$HERE/logistic_regression.py" "$WORK/rows" \
        "$WORK/rows.holdout" 1 0.1 >"$WORK/lr.out" 2>"$WORK/lr.err" || {
        echo "run_wide.sh: logistic regression failed:" >&2
        tail -5 "$WORK/lr.err" >&2
        exit 1
      }
      while read -r c auc seconds cpu; do
        echo "| $round | lr $c | ${auc#auc=} | ${seconds#seconds=} | ${cpu#cpu_seconds=} |"
      done <"$WORK/lr.out"
      ;;
    *)
      local flags=()
      case $way in
        deep) flags=("${FORMER_DEFAULTS[@]}") ;;
        deep+wide) flags=("${FORMER_DEFAULTS[@]}" --wide) ;;
        deep\*) flags=("${FORMER_DEFAULTS[@]}" "${TUNED[@]}") ;;
        deep+wide\*)
          flags=("${FORMER_DEFAULTS[@]}" "${TUNED[@]}" --wide
            --wide_learning_rate=0.5)
          ;;
      esac
      table=$((table + 1))
      train_on_rows "t$table" "${flags[@]}"
      python3 -c 'import json,sys; r = json.load(open(sys.argv[1])); print("| %s | %s | %.5f | %.2f | %.2f |" % (sys.argv[2], sys.argv[3], r["eval_auc"], r["seconds"], r["cpu_seconds"]))' \
        "$WORK/result.json" "$round" "$way"
      ;;
  esac
}

echo "| round | model | holdout AUC | seconds | CPU-s |"
echo "| ---: | --- | ---: | ---: | ---: |"
for round in $(seq "$ROUNDS"); do
  ways=(lr deep deep+wide 'deep*' 'deep+wide*')
  ((round % 2 == 0)) && ways=('deep+wide*' 'deep*' deep+wide deep lr)
  for way in "${ways[@]}"; do run_way "$round" "$way"; done
done
