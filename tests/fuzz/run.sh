#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (libFuzzer + AddressSanitizer +
# UndefinedBehaviorSanitizer) and runs each for a bounded time, as many at
# once as there are cores (STRATA_FUZZ_JOBS).
#
# Usage: tests/fuzz/run.sh BUILD_DIR [SECONDS_PER_TARGET]
# BUILD_DIR is a configured build (for the generated headers); the fuzzers
# go to BUILD_DIR/fuzz. Prints the executions of each target; exits 1 when
# one finds a crash (its input is kept in BUILD_DIR/fuzz/).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build_dir="$(cd "$1" && pwd)"
seconds="${2:-60}"
fuzz_jobs="${STRATA_FUZZ_JOBS:-$(nproc)}"
if ! [[ "$fuzz_jobs" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz: STRATA_FUZZ_JOBS=$fuzz_jobs: want a positive number" >&2
  exit 2
fi
out="$build_dir/fuzz"
mkdir -p "$out"
cxx="${STRATA_FUZZ_CXX:-clang++-14}"
flags=(-std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -I"$root" -I"$build_dir/proto/gen")
grpc_libs="$(pkg-config --libs grpc++ protobuf) -lyaml-cpp -lrocksdb"

# name: sources
declare -A targets=(
  [pull_wire_fuzzer]="tests/fuzz/pull_wire_fuzzer.cc common/pull_wire.cc"
  [cluster_file_fuzzer]="tests/fuzz/cluster_file_fuzzer.cc common/cluster_file.cc"
  [checkpoint_manifest_fuzzer]="tests/fuzz/checkpoint_manifest_fuzzer.cc embedding/internal/checkpoint_manifest.cc"
  [model_config_fuzzer]="tests/fuzz/model_config_fuzzer.cc worker/training/feature_tables.cc BUILD/proto/gen/proto/strata.pb.cc"
  [push_log_fuzzer]="tests/fuzz/push_log_fuzzer.cc embedding/internal/push_log.cc common/crc32c.cc common/logging.cc"
  [table_config_fuzzer]="tests/fuzz/table_config_fuzzer.cc server/table_config_proto.cc embedding/table_config.cc BUILD/proto/gen/proto/strata.pb.cc"
)

# Each source is compiled on its own, through ccache when it is installed
# (ccache does not cache a command that compiles several sources and
# links), so that a build whose sources did not change only links.
compile=("$cxx")
# The same ccache keys as CMakeLists.txt's: relative to the checkout, without
# the working directory.
command -v ccache >/dev/null && compile=(
  env "CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}"
  "CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}" ccache "$cxx")

build_target() {  # build_target NAME
  local name=$1 source path objects=()
  mkdir -p "$out/obj/$name"
  for source in ${targets[$name]}; do
    case "$source" in
      BUILD/*) path="$build_dir/${source#BUILD/}" ;;
      *) path="$root/$source" ;;
    esac
    objects+=("$out/obj/$name/$(basename "${path%.cc}").o")
    "${compile[@]}" "${flags[@]}" -c "$path" -o "${objects[-1]}"
  done
  # shellcheck disable=SC2086
  "$cxx" "${flags[@]}" "${objects[@]}" -o "$out/$name" $grpc_libs
}

fuzz_target() {  # fuzz_target NAME: exits 1 when it finds a crash
  local name=$1
  mkdir -p "$out/$name.corpus"
  if ! (cd "$out" && "./$name" -max_total_time="$seconds" -print_final_stats=1 \
          -rss_limit_mb=2048 "$name.corpus" >"$name.log" 2>&1); then
    tail -40 "$out/$name.log"
    echo "fuzz: $name found a crash (input in $out)" >&2
    exit 1
  fi
}

names=("${!targets[@]}")
for name in "${names[@]}"; do build_target "$name"; done

# The targets are single-threaded: one per core at a time, so that each
# still gets its SECONDS of a whole core.
running=0
failed=0
for name in "${names[@]}"; do
  if ((running >= fuzz_jobs)); then
    wait -n || failed=1
    running=$((running - 1))
  fi
  fuzz_target "$name" &
  running=$((running + 1))
done
while ((running > 0)); do
  wait -n || failed=1
  running=$((running - 1))
done
((failed == 0)) || exit 1

total=0
for name in "${names[@]}"; do
  runs=$(grep -oP 'stat::number_of_executed_units:\s*\K[0-9]+' \
    "$out/$name.log" || echo 0)
  total=$((total + runs))
  echo "fuzz: $name ran $runs inputs in ${seconds}s, no crash"
done
echo "fuzz: $total inputs in all, no crash"
