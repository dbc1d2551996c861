#!/usr/bin/env bash
# Installs what is missing, builds Strata and runs every test.
#
# Usage: tests/run.sh [--asan] [--tsan] [--fuzz] [--no-plain]
#   (default)   the RelWithDebInfo build in build/, with clang's
#               thread-safety analysis over its sources
#   --fuzz      also each libFuzzer target of tests/fuzz for
#               STRATA_FUZZ_SECONDS (default 40) seconds
#   --asan      also the AddressSanitizer+UndefinedBehaviorSanitizer build in
#               build-asan/
#   --tsan      also the ThreadSanitizer build in build-tsan/
#   --no-plain  skip the default build
# STRATA_TEST_SANITIZERS="asan tsan" does the same as the flags.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

plain=1
fuzz=0
sanitizers=" ${STRATA_TEST_SANITIZERS:-} "
for arg in "$@"; do
  case "$arg" in
    --asan) sanitizers+=" asan " ;;
    --tsan) sanitizers+=" tsan " ;;
    --fuzz) fuzz=1 ;;
    --no-plain) plain=0 ;;
    *) echo "tests/run.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

"$root/deploy/install_deps.sh"

# Prints a stage's name and the seconds since the start, so that a slow
# stage shows in the log.
started=$SECONDS
stage() { echo "== $* (at $((SECONDS - started)) s)"; }

run_suite() {
  local build_dir="$1"; shift
  stage "building $build_dir"
  "$root/deploy/build.sh" "$build_dir" "$@"
  stage "testing $build_dir"
  (cd "$build_dir" && ctest --output-on-failure --timeout 300 -j "$(nproc)")
}

if ((plain)); then
  run_suite "$root/build"
  stage "clang thread-safety analysis (-Wthread-safety -Wshadow -Werror)"
  python3 "$root/tests/thread_safety/check.py" "$root/build" -j "$(nproc)"
  stage "Python client tests against a live cluster"
  "$root/python/run_tests.sh" "$root/build"
  stage "container and Kubernetes manifest checks"
  "$root/tests/deploy/run_tests.sh" "$root/build"
  stage "soak, short (60 s, a shard killed every 15 s)"
  # The full one (bench/soak.sh, 10 minutes) also bounds memory growth at
  # 5%; in a minute RocksDB's buffers still fill, so only gross growth
  # fails here.
  "$root/bench/soak.sh" "$root/build" --duration_s=60 --kill_every_s=15 \
    --warmup_s=15 --max_rss_growth=1.0
fi
if ((fuzz)); then
  stage "fuzzing (libFuzzer, ${STRATA_FUZZ_SECONDS:-40} s per target)"
  "$root/deploy/build.sh" "$root/build"
  "$root/tests/fuzz/run.sh" "$root/build" "${STRATA_FUZZ_SECONDS:-40}"
fi
if [[ "$sanitizers" == *" asan "* ]]; then
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  export LSAN_OPTIONS="suppressions=$root/tests/lsan.supp"
  run_suite "$root/build-asan" -DSTRATA_ASAN=ON -DCMAKE_BUILD_TYPE=Debug
fi
if [[ "$sanitizers" == *" tsan "* ]]; then
  export TSAN_OPTIONS="halt_on_error=1:suppressions=$root/tests/tsan.supp"
  run_suite "$root/build-tsan" -DSTRATA_TSAN=ON -DCMAKE_BUILD_TYPE=Debug
fi
stage "all tests passed"
