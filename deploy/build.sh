#!/usr/bin/env bash
# Configures and builds Strata into a build directory.
# Usage: deploy/build.sh [BUILD_DIR] [extra cmake args...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# ccache keys without the checkout's own location: paths under the checkout
# are hashed relative to it and the working directory is left out, so that a
# fresh clone elsewhere (CI's, a second worktree) reuses the objects an
# earlier build made. Either variable set in the environment wins.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
build_dir="${1:-$root/build}"
shift || true
jobs="${STRATA_BUILD_JOBS:-$(nproc)}"
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
else
  cmake -S "$root" -B "$build_dir" "$@" >/dev/null
fi
cmake --build "$build_dir" -j "$jobs"
