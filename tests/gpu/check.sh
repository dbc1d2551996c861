#!/usr/bin/env bash
# Builds and runs the GPU tests (tests/gpu) on a machine with an NVIDIA GPU:
# the CUDA dense model against the CPU model, the NCCL collective on every
# GPU, and strata-worker --device=cuda against --device=cpu end to end
# (tests/gpu/train_cpu_vs_gpu.sh: equal AUC, step times).
#
# Usage: bash tests/gpu/check.sh [gtest flags...]   (from the repo root)
# Environment:
#   STRATA_GPU_BUILD_DIR  build directory (default: build-gpu)
#   STRATA_CUDA_ARCH      CMAKE_CUDA_ARCHITECTURES (default: native; use 90
#                         when CMake cannot detect the GPU)
#   STRATA_BUILD_JOBS     parallel build jobs (default: nproc)
#   STRATA_GPU_TEST_TIMEOUT  seconds per test binary (default: 600)
#   STRATA_GPU_BUNDLE     a folder made by tests/gpu/bundle.sh on a build
#                         machine: run its binaries instead of building here
#                         (for a GPU node without the build's packages)
# Exits non-zero when the build or any test fails.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"

build_dir="${STRATA_GPU_BUILD_DIR:-$root/build-gpu}"
arch="${STRATA_CUDA_ARCH:-native}"
jobs="${STRATA_BUILD_JOBS:-$(nproc)}"
test_timeout="${STRATA_GPU_TEST_TIMEOUT:-600}"

step() { echo; echo "== $*"; }
die() { echo "check.sh: $*" >&2; exit 1; }

find_cuda() {  # puts nvcc's folder on PATH when it is not there
  if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
    export PATH="/usr/local/cuda/bin:$PATH"
  fi
}

build_here() {  # configures and builds gpu_tests; fills `binaries`
  step "dependencies"
  if ! "$root/deploy/install_deps.sh"; then
    echo "check.sh: deploy/install_deps.sh failed (offline?); building with" \
         "what is installed" >&2
  fi
  find_cuda
  command -v nvcc >/dev/null || die "no nvcc on PATH or in /usr/local/cuda/bin"
  nvcc --version | tail -n 2

  step "GPUs"
  nvidia-smi || die "nvidia-smi failed: no usable GPU or driver"

  step "configuring $build_dir (CUDA architectures: $arch)"
  start=$SECONDS
  mkdir -p "$build_dir"
  cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSTRATA_BUILD_TESTS=ON -DSTRATA_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" >"$build_dir/configure.log" 2>&1 ||
    { tail -n 40 "$build_dir/configure.log"; die "configure failed"; }
  grep -E "Strata CUDA path|tests/gpu" "$build_dir/configure.log"
  echo "configured in $((SECONDS - start)) s"

  step "building the GPU tests"
  start=$SECONDS
  cmake --build "$build_dir" -j "$jobs" --target gpu_tests strata-server \
    strata-worker strata-datagen ||
    die "build failed"
  echo "built in $((SECONDS - start)) s"

  list="$build_dir/gpu_tests.txt"
  [[ -s "$list" ]] || die "$list is missing or empty"
  mapfile -t binaries <"$list"
  bin_dir="$build_dir/bin"
}

# Adds the folder of library SONAME at the end of LD_LIBRARY_PATH (after
# the bundle's own): the first found in the CUDA toolkit, then under /usr
# and /opt (Python packages). The toolkit's compat/ copy of the driver's
# library is skipped: the installed driver's own must win.
add_library_folder() {  # add_library_folder SONAME
  local path
  path="$(find -L /usr/local/cuda /usr /opt -name "$1" -not -path '*/compat/*' \
    -print -quit 2>/dev/null || true)"
  [[ -n "$path" ]] || return 1
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$(dirname "$path")"
}

# Finds the libraries BINARY does not find: the node's CUDA runtime, cuBLAS
# and NCCL, which may live in the toolkit or in Python packages.
find_missing_libraries() {  # find_missing_libraries BINARY
  local soname
  while read -r soname _; do
    add_library_folder "$soname" ||
      echo "check.sh: $1 needs $soname, which this node does not have" >&2
  done < <(ldd "$1" | awk '/not found/ {print $1}')
}

use_bundle() {  # fills `binaries` from $STRATA_GPU_BUNDLE
  local bundle name cached
  bundle="$(cd "$STRATA_GPU_BUNDLE" && pwd)" ||
    die "STRATA_GPU_BUNDLE=$STRATA_GPU_BUNDLE is not a folder"
  [[ -s "$bundle/gpu_tests.txt" ]] ||
    die "$bundle/gpu_tests.txt is missing: make it with tests/gpu/bundle.sh"
  step "GPUs"
  nvidia-smi || die "nvidia-smi failed: no usable GPU or driver"
  step "prebuilt tests in $bundle"
  export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # The driver's library, which the CUDA runtime opens by name.
  # Read whole before matching: grep -q would close the pipe early, and
  # under pipefail ldconfig's SIGPIPE would read as "not found".
  cached="$(ldconfig -p 2>/dev/null || true)"
  [[ "$cached" == *"libcuda.so.1 "* ]] || add_library_folder libcuda.so.1 ||
    echo "check.sh: the driver's libcuda.so.1 is not found" >&2
  binaries=()
  while read -r name; do
    binaries+=("$bundle/$name")
    find_missing_libraries "$bundle/$name"
  done <"$bundle/gpu_tests.txt"
  for name in "${binaries[@]}"; do
    [[ "$(ldd "$name")" != *"not found"* ]] ||
      die "$name: libraries are missing"
  done
  find_missing_libraries "$bundle/strata-worker"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  bin_dir="$bundle"
}

binaries=()
bin_dir=""
if [[ -n "${STRATA_GPU_BUNDLE:-}" ]]; then
  use_bundle
else
  build_here
fi

results=()
failed=0
run() {  # run NAME COMMAND...
  local name="$1"; shift
  local start=$SECONDS status
  step "$name"
  timeout "$test_timeout" "$@"
  status=$?
  if ((status == 0)); then
    results+=("PASS  $name ($((SECONDS - start)) s)")
  else
    results+=("FAIL  $name (exit $status after $((SECONDS - start)) s)")
    failed=1
  fi
}

for binary in "${binaries[@]}"; do
  name="$(basename "$binary")"
  run "$name" "$binary" "$@"
  # The no-GPU path: the same binary with every GPU hidden.
  run "$name (no GPU visible)" env CUDA_VISIBLE_DEVICES= \
    STRATA_EXPECT_NO_GPU=1 "$binary" --gtest_filter='*WithoutGpu*'
done

# End to end: strata-worker --device=cuda against a local shard reaches the
# CPU run's AUC; prints the step times of both.
run "training, --device=cpu vs --device=cuda" \
  bash "$root/tests/gpu/train_cpu_vs_gpu.sh" "$bin_dir"

step "summary"
printf '%s\n' "${results[@]}"
if ((failed)); then
  echo "GPU CHECK FAILED"
  exit 1
fi
echo "GPU CHECK PASSED"
