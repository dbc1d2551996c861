#!/usr/bin/env bash
# Builds and tests the strata Python package against a live local cluster.
# Usage: python/run_tests.sh [BUILD_DIR [PYTEST_ARGS...]]
#        (BUILD_DIR default: build, from the repo root)
# Needs BUILD_DIR/bin/{strata-server,strata-serving,stratactl}. Creates (once)
# the virtualenv BUILD_DIR/python-venv, installs the pinned dependencies and
# ./python (not editable), then runs pytest. Exits non-zero on any failure,
# including a run that collects no tests (pytest exit 5).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build_dir="$(cd "${1:-build}" && pwd)"
shift || true
venv="$build_dir/python-venv"

if [[ ! -x "$venv/bin/python" ]]; then
  python3 -m venv "$venv"
fi
py="$venv/bin/python"
"$py" -m pip install -q --disable-pip-version-check \
  "grpcio>=1.62,<2" "grpcio-tools>=1.62,<2" "protobuf>=4.25,<8" \
  "numpy>=1.23,<3" "pytest>=7,<10"
"$py" -m pip install -q --disable-pip-version-check ./python

export STRATA_BIN_DIR="${STRATA_BIN_DIR:-$build_dir/bin}"
status=0
"$py" -m pytest python/tests -q -p no:cacheprovider "$@" || status=$?
if [[ $status -eq 5 ]]; then
  echo "run_tests.sh: pytest collected no tests" >&2
fi
exit "$status"
