#!/usr/bin/env bash
# Checks the container and Kubernetes files (deploy/docker/, deploy/k8s/)
# without Docker or a cluster: parses every manifest, checks that they name
# each other right and that every container flag exists in the built
# binaries' --help, and checks the Dockerfile's structure.
#
# Usage: tests/deploy/run_tests.sh [BUILD_DIR [PYTEST_ARGS...]]
#        (BUILD_DIR default: build, from the repo root)
# Needs BUILD_DIR/bin/{strata-server,strata-serving,stratactl,strata-lookup},
# and etcd on PATH (Debian: etcd-server) for the checks that run it (the
# shard replica's entrypoint, etcd's flags), which skip without it.
# Uses the virtualenv BUILD_DIR/python-venv (python/run_tests.sh makes the
# same one), creating it if missing. Exits non-zero on any failure, including
# a run that collects no tests (pytest exit 5).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
build_dir="$(cd "${1:-build}" && pwd)"
shift || true
venv="$build_dir/python-venv"

if [[ ! -x "$venv/bin/python" ]]; then
  python3 -m venv "$venv"
fi
py="$venv/bin/python"
# kubernetes: its typed models check every manifest field offline (kubectl
# cannot: it needs an API server to validate).
"$py" -m pip install -q --disable-pip-version-check \
  "pyyaml>=6,<7" "pytest>=7,<10" "pytest-xdist>=3,<4" "kubernetes>=29,<40" \
  "grpcio-tools>=1.62,<2" "scikit-learn>=1.3,<2"

export STRATA_BIN_DIR="${STRATA_BIN_DIR:-$build_dir/bin}"
status=0
# Most cases spread over pytest-xdist workers, those marked `exclusive`
# after them, one at a time (tests/run_pytest.sh).
"$repo/tests/run_pytest.sh" "$py" tests/deploy "$@" || status=$?
if [[ $status -eq 5 ]]; then
  echo "tests/deploy/run_tests.sh: pytest collected no tests" >&2
fi
exit "$status"
