#!/usr/bin/env bash
# Push throughput and latency of a shard by replication mode, and the write
# unavailability after kill -9 of a primary, on one machine (loopback):
#   - for ROUNDS rounds, interleaved: one shard unreplicated (the peer), then
#     R = 1, 2, 3 replicas in `replicated` mode and R = 2, 3 in `async`,
#     each loaded with NUM_KEYS rows and pushed to for DURATION_S by
#     strata-bench; CPU-seconds of the shard processes per million keys;
#   - KILLS times: kill -9 of the primary of a 3-replica group while
#     strata-failover-probe pushes through PsClient; the gap between
#     acknowledged pushes around each kill is the unavailability window.
# Writes a markdown table to stdout and bench/out/replication.md (raw runs in
# bench/out/replication.jsonl).
#
# Usage: bench/run_replication.sh [BUILD_DIR]      (default: ./build)
# Environment: ROUNDS [3] DURATION_S [5] NUM_KEYS [100000] DIM [64]
#   BATCH [1024] INFLIGHT [4] KILLS [10] LEASE_TTL_MS [2000] OUT_DIR [bench/out]
# Smoke run: ROUNDS=1 DURATION_S=1 KILLS=2 bench/run_replication.sh build
set -uo pipefail

BUILD_DIR=${1:-build}
ROUNDS=${ROUNDS:-3}
DURATION_S=${DURATION_S:-5}
NUM_KEYS=${NUM_KEYS:-100000}
DIM=${DIM:-64}
BATCH=${BATCH:-1024}
INFLIGHT=${INFLIGHT:-4}
KILLS=${KILLS:-10}
LEASE_TTL_MS=${LEASE_TTL_MS:-2000}
OUT_DIR=${OUT_DIR:-bench/out}
BIN="$BUILD_DIR/bin"
for bin in strata-server strata-bench strata-failover-probe stratactl; do
  if [[ ! -x "$BIN/$bin" ]]; then
    echo "run_replication.sh: $BIN/$bin not found; build it first" >&2
    exit 2
  fi
done
ETCD=$(command -v etcd || echo /usr/bin/etcd)
[[ -x "$ETCD" ]] || { echo "run_replication.sh: etcd not found (etcd-server)" >&2; exit 2; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/strata-replication.XXXXXX")
PIDS=()
ETCD_PID=""
cleanup() {
  for pid in "${PIDS[@]}" $ETCD_PID; do kill -KILL "$pid" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$OUT_DIR"
RUNS="$OUT_DIR/replication.jsonl"
: >"$RUNS"

free_port() { python3 "$(dirname "${BASH_SOURCE[0]}")/free_port.py"; }

ETCD_PORT=$(free_port)
"$ETCD" --name=bench --data-dir="$WORK/etcd" \
  --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
  --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls="http://127.0.0.1:$(free_port)" >"$WORK/etcd.log" 2>&1 &
ETCD_PID=$!

# start_group NAME R MODE: R replicas ("off": one unreplicated shard);
# sets ADDRESSES (joined by |), PORTS and PIDS.
start_group() {
  local name=$1 replicas=$2 mode=$3
  PIDS=(); PORTS=(); local addresses=()
  for ((r = 0; r < replicas; r++)); do
    local port; port=$(free_port)
    local flags=(--port="$port" --data_dir="$WORK/$name-r$r" --durability=group)
    if [[ "$mode" != off ]]; then
      flags+=(--etcd_endpoints="127.0.0.1:$ETCD_PORT" --replica_id="r$r"
              --replicas="$replicas" --replication="$mode"
              --lease_ttl_ms="$LEASE_TTL_MS" --cluster_name="$name")
    fi
    "$BIN/strata-server" "${flags[@]}" >"$WORK/$name-r$r.log" 2>&1 &
    PIDS+=($!); PORTS+=("$port"); addresses+=("127.0.0.1:$port")
  done
  ADDRESSES=$(IFS='|'; echo "${addresses[*]}")
  GROUP_NAME=$name; GROUP_REPLICAS=$replicas; GROUP_MODE=$mode
}

stop_group() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  PIDS=()
}

# The primary's address (an unreplicated shard: itself), once it serves.
primary_address() {
  for _ in $(seq 300); do
    local answer
    answer=$("$BIN/stratactl" --shards="$ADDRESSES" status --json \
      --interval_s=0 2>/dev/null | python3 -c '
import json, sys
shard = json.load(sys.stdin)["shards"][0]
info = shard.get("replication")
if shard.get("up") and (info is None or info.get("answered_by_primary")):
    print(shard["address"] if info is None else info["primary"])' 2>/dev/null)
    if [[ -n "$answer" ]]; then
      if [[ "$answer" == r* ]]; then
        echo "127.0.0.1:${PORTS[${answer#r}]}"
      else
        echo "$answer"
      fi
      return 0
    fi
    sleep 0.1
  done
  return 1
}

cpu_ticks() {
  local total=0
  for pid in "${PIDS[@]}"; do
    local fields; read -ra fields <"/proc/$pid/stat"
    total=$((total + fields[13] + fields[14]))
  done
  echo "$total"
}

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT_DIR/replication.load"
CONFIGS=("off 1" "replicated 1" "replicated 2" "replicated 3" "async 2" "async 3")
for ((round = 1; round <= ROUNDS; round++)); do
  for config in "${CONFIGS[@]}"; do
    read -r mode replicas <<<"$config"
    start_group "g$round-$mode-$replicas" "$replicas" "$mode"
    if ! primary=$(primary_address); then
      echo "run_replication.sh: no primary for $config" >&2; exit 1
    fi
    "$BIN/strata-bench" --mode=load --shards="$primary" --num_keys="$NUM_KEYS" \
      --dim="$DIM" --batch=8192 --inflight=4 >/dev/null 2>&1
    before=$(cpu_ticks)
    result=$("$BIN/strata-bench" --mode=push --json --shards="$primary" \
      --num_keys="$NUM_KEYS" --dim="$DIM" --batch="$BATCH" \
      --inflight="$INFLIGHT" --duration_s="$DURATION_S" --warmup_s=1 2>/dev/null | tail -1)
    after=$(cpu_ticks)
    echo "{\"round\": $round, \"mode\": \"$mode\", \"replicas\": $replicas, \"cpu_ticks\": $((after - before)), \"clock_ticks\": $(getconf CLK_TCK), \"bench\": $result}" >>"$RUNS"
    stop_group
  done
done

# Failover: KILLS kills of the primary of a 3-replica group under load.
start_group failover 3 replicated
primary_address >/dev/null
"$BIN/strata-failover-probe" --shards="$ADDRESSES" \
  --duration_s=$((KILLS * 8 + 4)) --gap_ms=100 >"$WORK/probe.json" 2>"$WORK/probe.log" &
probe=$!
sleep 2
for ((k = 0; k < KILLS; k++)); do
  primary=$(primary_address) || break
  port=${primary##*:}
  for ((r = 0; r < 3; r++)); do
    [[ "${PORTS[$r]}" == "$port" ]] || continue
    kill -KILL "${PIDS[$r]}"; wait "${PIDS[$r]}" 2>/dev/null
    sleep 3  # restarted after the lease TTL, as a StatefulSet would
    "$BIN/strata-server" --port="$port" --data_dir="$WORK/failover-r$r" \
      --durability=group --etcd_endpoints="127.0.0.1:$ETCD_PORT" \
      --replica_id="r$r" --replicas=3 --replication=replicated \
      --lease_ttl_ms="$LEASE_TTL_MS" --cluster_name=failover \
      >>"$WORK/failover-r$r.log" 2>&1 &
    PIDS[$r]=$!
  done
  sleep 5
done
wait "$probe"
stop_group
echo "{\"failover\": $(cat "$WORK/probe.json"), \"kills\": $KILLS, \"lease_ttl_ms\": $LEASE_TTL_MS}" >>"$RUNS"

python3 - "$RUNS" "$KILLS" <<'PY' | tee "$OUT_DIR/replication.md"
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
kills = int(sys.argv[2])
push = [r for r in runs if "bench" in r]
rounds = sorted({r["round"] for r in push})
peer = {r["round"]: r["bench"]["keys_per_s"] for r in push if r["mode"] == "off"}
print("| mode | R | push keys/s (range over rounds) | vs unreplicated, same round | p50 ms | p99 ms | shard CPU-s per M keys |")
print("| --- | --- | --- | --- | --- | --- | --- |")
def rng(values, fmt):
    return fmt.format(min(values)) if len(values) == 1 else \
        (fmt + "-" + fmt).format(min(values), max(values))
for mode, replicas in [("off", 1), ("replicated", 1), ("replicated", 2), ("replicated", 3), ("async", 2), ("async", 3)]:
    rs = [r for r in push if r["mode"] == mode and r["replicas"] == replicas]
    if not rs:
        continue
    kps = [r["bench"]["keys_per_s"] for r in rs]
    ratio = [r["bench"]["keys_per_s"] / peer[r["round"]] for r in rs]
    p50 = [r["bench"]["latency_ms"]["p50"] for r in rs]
    p99 = [r["bench"]["latency_ms"]["p99"] for r in rs]
    cpu = [r["cpu_ticks"] / r["clock_ticks"] / (r["bench"]["keys"] / 1e6) for r in rs]
    name = "unreplicated" if mode == "off" else mode
    print(f"| {name} | {replicas} | {rng(kps, '{:.0f}')} | {rng(ratio, '{:.2f}')}x | "
          f"{rng(p50, '{:.2f}')} | {rng(p99, '{:.2f}')} | {rng(cpu, '{:.2f}')} |")
fail = [r for r in runs if "failover" in r]
if fail:
    gaps = sorted(fail[0]["failover"]["gaps_ms"], reverse=True)[:kills]
    if gaps:
        print()
        print(f"write unavailability after kill -9 of the primary ({len(gaps)} kills, "
              f"lease TTL {fail[0]['lease_ttl_ms']} ms): median "
              f"{statistics.median(gaps) / 1000:.2f} s, max {max(gaps) / 1000:.2f} s, "
              f"all: {', '.join(f'{g / 1000:.2f}' for g in sorted(gaps))} s; "
              f"{fail[0]['failover']['pushes']} pushes acknowledged, "
              f"{fail[0]['failover']['failures']} gave up")
PY
