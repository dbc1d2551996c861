#!/usr/bin/env bash
# Soak: bench/soak.py (two shards and a serving PS under push and pull load,
# a shard killed with SIGKILL and restarted every --kill_every_s; checks that
# no acknowledged update is lost or applied twice, that serving converges,
# that no call wedges and that memory stays flat).
#
# Usage: bench/soak.sh [BUILD_DIR] [soak.py flags...]
#   default: 10 minutes, a kill every 60 s, 2 minutes of warm-up
# Needs the Python package in BUILD_DIR/python-venv (python/run_tests.sh
# makes it).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$(cd "${1:-$root/build}" && pwd)"
shift || true
py="$build_dir/python-venv/bin/python"
if [[ ! -x "$py" ]]; then
  echo "soak.sh: no $py; run python/run_tests.sh $build_dir first" >&2
  exit 2
fi
exec "$py" "$root/bench/soak.py" --bin_dir="$build_dir/bin" \
  --duration_s=600 --kill_every_s=60 --warmup_s=120 "$@"
