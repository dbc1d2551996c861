#!/usr/bin/env bash
# Builds and tests the strata Python package against a live local cluster.
# Usage: python/run_tests.sh [BUILD_DIR [PYTEST_ARGS...]]
#        (BUILD_DIR default: build, from the repo root)
# Needs BUILD_DIR/bin/{strata-server,strata-serving,stratactl}. Creates (once)
# the virtualenv BUILD_DIR/python-venv, installs the pinned dependencies and
# ./python (not editable; with STRATA_BUILD_DIR=BUILD_DIR, so that its op
# library is built there), then runs pytest. Exits non-zero on any failure,
# including a run that collects no tests (pytest exit 5).
#
# strata.tf: installs the pinned tensorflow-cpu into the venv, re-configures
# BUILD_DIR with -DSTRATA_TF_PYTHON=<the venv's python> and builds the op
# library (strata_tf_ops) against it, holding /tmp/strata-build.lock (flock)
# while it builds. STRATA_PYTHON_TF=0 skips all that; tests/test_tf.py then
# skips when tensorflow is not importable. Sanitizer builds have no op
# library (an instrumented .so cannot be loaded into Python).
#
# strata.torch: installs the pinned torch; STRATA_PYTHON_TORCH=0 skips it,
# and tests/test_torch.py then skips.
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
  "numpy>=1.23,<3" "pytest>=7,<10" "pytest-xdist>=3,<4" "scikit-learn>=1.3,<2"

build_tf_ops() {
  local cache="$build_dir/CMakeCache.txt" lock=()
  if [[ ! -f "$cache" ]]; then
    echo "run_tests.sh: $build_dir is not a CMake build; no TF op library" >&2
    return 0
  fi
  if grep -Eq '^STRATA_(ASAN|TSAN):BOOL=ON' "$cache"; then
    echo "run_tests.sh: sanitizer build; the TF op library is not built" >&2
    return 0
  fi
  if command -v flock >/dev/null; then lock=(flock /tmp/strata-build.lock); fi
  # Shows only CMake's line about the op library (built, or why not).
  { "${lock[@]}" cmake -S "$repo" -B "$build_dir" -DSTRATA_TF_PYTHON="$py" |
      grep -F "TensorFlow op library" >&2; } || true
  if ! grep -q '^STRATA_TF_OPS_ENABLED:INTERNAL=ON' "$cache"; then
    echo "run_tests.sh: CMake found no tensorflow in $py" >&2
    return 1
  fi
  "${lock[@]}" cmake --build "$build_dir" --target strata_tf_ops \
    -j "${STRATA_BUILD_JOBS:-$(nproc)}"
}

if [[ "${STRATA_PYTHON_TF:-1}" != 0 ]]; then
  # The tensorflow-cpu that installs on our Python 3.11 (x86-64 Linux);
  # keras pinned as in bench/requirements-keras.txt.
  "$py" -m pip install -q --disable-pip-version-check \
    "tensorflow-cpu==2.21.0" "keras==3.15.1"
  build_tf_ops
fi

if [[ "${STRATA_PYTHON_TORCH:-1}" != 0 ]]; then
  # strata.torch: PyPI's torch for Linux (it brings CUDA's runtime
  # libraries, about 5 GB, though the tests run it on CPU). Its tests need
  # only the C client library, which every build makes.
  "$py" -m pip install -q --disable-pip-version-check "torch==2.15.0"
fi

# Installed last, so that with tensorflow present the package carries the op
# library it builds (setup.py), as a user's pip install does.
STRATA_BUILD_DIR="$build_dir" STRATA_TF_OPS="${STRATA_PYTHON_TF:-1}" \
  "$py" -m pip install -q \
  --disable-pip-version-check ./python

export STRATA_BIN_DIR="${STRATA_BIN_DIR:-$build_dir/bin}"
status=0
# Most cases spread over pytest-xdist workers, those marked `exclusive`
# after them, one at a time (tests/run_pytest.sh).
"$repo/tests/run_pytest.sh" "$py" python/tests "$@" || status=$?
if [[ $status -eq 5 ]]; then
  echo "run_tests.sh: pytest collected no tests" >&2
fi
exit "$status"
