#!/usr/bin/env bash
# Builds and runs the GPU tests (tests/gpu) on a machine with an NVIDIA GPU:
# the CUDA dense model against the CPU model, and the NCCL collective.
#
# Usage: bash tests/gpu/check.sh [gtest flags...]   (from the repo root)
# Environment:
#   STRATA_GPU_BUILD_DIR  build directory (default: build-gpu)
#   STRATA_CUDA_ARCH      CMAKE_CUDA_ARCHITECTURES (default: native; use 90
#                         when CMake cannot detect the GPU)
#   STRATA_BUILD_JOBS     parallel build jobs (default: nproc)
#   STRATA_GPU_TEST_TIMEOUT  seconds per test binary (default: 600)
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

step "dependencies"
if ! "$root/deploy/install_deps.sh"; then
  echo "check.sh: deploy/install_deps.sh failed (offline?); building with" \
       "what is installed" >&2
fi
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
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
cmake --build "$build_dir" -j "$jobs" --target gpu_tests ||
  die "build failed"
echo "built in $((SECONDS - start)) s"

list="$build_dir/gpu_tests.txt"
[[ -s "$list" ]] || die "$list is missing or empty"
mapfile -t binaries <"$list"

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

step "summary"
printf '%s\n' "${results[@]}"
if ((failed)); then
  echo "GPU CHECK FAILED"
  exit 1
fi
echo "GPU CHECK PASSED"
