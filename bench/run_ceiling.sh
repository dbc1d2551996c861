#!/usr/bin/env bash
# Strata's pull against the transport's ceiling, in the same run: per round
# and shape (batch x in flight), the same strata-bench pulls against
#   strata   a strata-server holding NUM_KEYS rows (the real path: answers
#            in the client's shared memory, as PsClient takes them from a
#            shard on its machine),
#   strata-grpc  the same shard with every answer over gRPC
#            (--shared_memory_pull=false), the path to another machine,
#   grpc     strata-bench --mode=ceiling-server over the same gRPC channel
#            (answers from cached bytes: no lookup, no copy of rows),
#   tcp      the same server's plain TCP port (rows from one preallocated
#            buffer, `in flight` connections),
# interleaved ROUNDS times. Prints a markdown table with keys/s, CPU-seconds
# per million keys (client + server) and Strata's fraction of each ceiling.
#
# Usage: bench/run_ceiling.sh [BUILD_DIR]
# Environment: ROUNDS [3], DURATION_S [3], WARMUP_S [1], NUM_KEYS [1000000],
#              DIM [64], SHAPES ["8192x1 8192x8 1000x1 1000x8"],
#              SETTLE_S [2] (waited after the load, before the first pull),
#              PIN [1]: servers on core 0, the client on core 1; 0: all of
#              them share every core
set -uo pipefail
BUILD_DIR=${1:-build}
ROUNDS=${ROUNDS:-3}
DURATION_S=${DURATION_S:-3}
WARMUP_S=${WARMUP_S:-1}
NUM_KEYS=${NUM_KEYS:-1000000}
DIM=${DIM:-64}
SHAPES=${SHAPES:-8192x1 8192x8 1000x1 1000x8}
SETTLE_S=${SETTLE_S:-2}
BIN="$BUILD_DIR/bin"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_start ceiling
SERVER_CPU=()
CLIENT_CPU=()
[[ ${PIN:-1} == 1 ]] && pin_cpus

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
"${SERVER_CPU[@]}" "$BIN/strata-server" --port=0 \
  --port_file="$WORK/shard.port" --data_dir="$WORK/shard" \
  --durability=periodic --log_level=warning &
shard_pid=$!
PIDS+=($shard_pid)
"${SERVER_CPU[@]}" "$BIN/strata-bench" --mode=ceiling-server --dim="$DIM" \
  --batch=8192 --port_file="$WORK/ceiling.port" \
  --tcp_port_file="$WORK/tcp.port" >/dev/null &
ceiling_pid=$!
PIDS+=($ceiling_pid)
wait_file "$WORK/shard.port" "$shard_pid"
wait_file "$WORK/ceiling.port" "$ceiling_pid"
wait_file "$WORK/tcp.port" "$ceiling_pid"
SHARD="127.0.0.1:$(cat "$WORK/shard.port")"
CEILING="127.0.0.1:$(cat "$WORK/ceiling.port")"
TCP="127.0.0.1:$(cat "$WORK/tcp.port")"
"$BIN/strata-bench" --mode=load --shards="$SHARD" --table=bench --dim="$DIM" \
  --num_keys="$NUM_KEYS" --batch=8192 --inflight=8 >/dev/null || exit 1
# The shard's periodic flush writes every loaded row within a second or so:
# not to be measured as part of the first pull.
sleep "$SETTLE_S"

echo "| round | batch x in flight | target | keys/s | CPU-s per M keys (client + server) | p99 ms |"
echo "| ---: | --- | --- | ---: | --- | ---: |"
for round in $(seq "$ROUNDS"); do
  targets=(strata strata-grpc grpc tcp)
  ((round % 2 == 0)) && targets=(tcp grpc strata-grpc strata)
  for shape in $SHAPES; do
    batch=${shape%x*}
    inflight=${shape#*x}
    for target in "${targets[@]}"; do
      case $target in
        strata) args=(--mode=pull --shards="$SHARD" --server_pids="$shard_pid") ;;
        strata-grpc) args=(--mode=pull --shards="$SHARD" --server_pids="$shard_pid"
                           --shared_memory_pull=false) ;;
        grpc) args=(--mode=pull --shards="$CEILING" --server_pids="$ceiling_pid"
                    --shared_memory_pull=false) ;;
        tcp) args=(--mode=tcp-pull --tcp="$TCP" --server_pids="$ceiling_pid") ;;
      esac
      line=$("${CLIENT_CPU[@]}" "$BIN/strata-bench" "${args[@]}" \
        --table=bench --dim="$DIM" --num_keys="$NUM_KEYS" --batch="$batch" \
        --inflight="$inflight" --duration_s="$DURATION_S" \
        --warmup_s="$WARMUP_S" 2>&1 | head -1)
      keys=$(field "$line" keys/s)
      if [[ -z $keys ]]; then
        echo "run_ceiling.sh: $target $shape failed: $line" >&2
        exit 1
      fi
      cpu=$(sed -n 's/.*cpu_s\/Mkeys=\([0-9.]*\)(client \([0-9.]*\) + servers \([0-9.]*\)).*/\1 (\2 + \3)/p' <<<"$line")
      echo "| $round | $shape | $target | $keys | $cpu | $(field "$line" p99) |"
    done
  done
done
