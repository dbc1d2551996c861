#!/usr/bin/env bash
# Installs the Debian packages Strata builds and tests with, when missing.
# Idempotent: does nothing when everything is there. Needs root for apt-get.
set -euo pipefail

packages=(
  build-essential cmake ccache pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  librocksdb-dev libabsl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libhiredis-dev redis-server redis-tools
  libopenblas-dev libgloo-dev libyaml-cpp-dev
  # /metrics: prometheus-cpp's data model and text format (core library).
  prometheus-cpp-dev
  # The metrics tests scrape the daemons with a real Prometheus server.
  prometheus
  # Replicated shards: etcd (the tests run a real one), and the .proto files
  # of its API, which the build compiles (proto/CMakeLists.txt).
  etcd-server etcd-client golang-etcd-server-dev
  # tests/thread_safety/check.py: clang's thread-safety analysis;
  # tests/fuzz/run.sh: libFuzzer targets.
  clang-14 libfuzzer-14-dev
  # ld.lld, the linker CMakeLists.txt picks when the compiler takes it.
  lld
  # deploy/local/strata-local reads cluster files with it; strata-plot
  # (stratactl plot) draws with matplotlib.
  python3 python3-yaml python3-matplotlib
  # Only the tests need it: the status page is checked in headless Chromium.
  chromium
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "install_deps: installing ${missing[*]}" >&2
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
