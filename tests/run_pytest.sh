#!/usr/bin/env bash
# Runs pytest over one test folder in two passes: first the cases not marked
# `exclusive`, spread over pytest-xdist workers; then the `exclusive` ones
# (cases whose assertions need the machine's cores to themselves, such as an
# open loop at ten times a capacity measured moments before), one at a time.
#
# Usage: tests/run_pytest.sh PYTHON TEST_DIR [PYTEST_ARGS...]
# STRATA_PYTEST_JOBS: the first pass's workers (default: one per core, at
# most four); PYTEST_ARGS go to both passes ("-n 0" makes the first serial).
# Exits 0 when both passes pass, 5 when neither collected a test, and
# otherwise with the status of the first pass that failed.
set -euo pipefail
py="$1"
test_dir="$2"
shift 2
cores="$(nproc)"
jobs="${STRATA_PYTEST_JOBS:-$((cores < 4 ? cores : 4))}"
common=(-q -p no:cacheprovider -rs)

shared=0
"$py" -m pytest "$test_dir" "${common[@]}" -n "$jobs" -m "not exclusive" \
  "$@" || shared=$?
alone=0
"$py" -m pytest "$test_dir" "${common[@]}" -m exclusive "$@" || alone=$?

# pytest exits 5 when it collected nothing (here: every case deselected).
if ((shared == 5 && alone == 5)); then exit 5; fi
for status in "$shared" "$alone"; do
  if ((status != 0 && status != 5)); then exit "$status"; fi
done
exit 0
