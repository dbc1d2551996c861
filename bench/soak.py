#!/usr/bin/env python3
"""Soak: a two-shard cluster with a serving PS under steady push and pull
load, one shard killed with SIGKILL and restarted every --kill_every_s.

Every push adds exactly 1 to each coordinate of the rows it names (SGD,
learning rate 1, gradient -1, zeros initializer), and each pusher owns its
keys, so at the end a row's value must be the number of its acknowledged
pushes, plus at most the pushes whose outcome is unknown (they failed after
being sent). The check, after the load stops:
  - no acknowledged update lost (shard value >= acknowledged pushes), none
    applied twice (value <= acknowledged + unknown);
  - the serving PS converges to exactly the shards' rows;
  - no call wedged: every worker thread finished its last call within its
    deadline, and pushes went on after every restart;
  - resident memory after warm-up grows less than --max_rss_growth.
Prints one summary line (and JSON with --json) and exits 1 on any violation.

Usage: bench/soak.py --bin_dir=build/bin [--duration_s=600]
       [--kill_every_s=60] [--load=0.8]
Run with a Python that has the strata package (python/run_tests.sh makes
one in BUILD_DIR/python-venv).
"""
import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

import strata
from strata.errors import StrataError

from free_port import free_port

TABLE = "soak"
DIM = 4
BATCH = 32


def listening(port):
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


class Daemon:
    """One strata-server or strata-serving, restartable on its port."""

    def __init__(self, name, argv, port, log_dir):
        self.name, self.argv, self.port = name, argv, port
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self.process = None

    def start(self, timeout=60.0):
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.argv, stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while not listening(self.port):
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited "
                                   f"{self.process.returncode}; see "
                                   f"{self.log_path}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not listen in {timeout}s")
            time.sleep(0.05)

    def kill9(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                return self.process.wait()
        return self.process.returncode if self.process else None


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.pushes = 0
        self.pulls = 0
        self.errors = {}
        # Longest time a pusher waited between two acknowledged pushes (its
        # retries through a restart included).
        self.longest_push_gap = 0.0

    def error(self, e):
        name = type(e).__name__
        with self.lock:
            self.errors[name] = self.errors.get(name, 0) + 1


def pusher(shards, keys, acked, unknown, stats, stop, interval, timeout):
    """Pushes BATCH of its own keys at a time, at one push per `interval`."""
    client = strata.ParameterServerClient(shards, timeout=timeout)
    ones = -np.ones((BATCH, DIM), dtype=np.float32)
    rng = random.Random(keys[0])
    next_at = last_acked = time.monotonic()
    while not stop.is_set():
        batch = rng.sample(keys, BATCH)
        try:
            client.push(TABLE, batch, ones)
            for k in batch:
                acked[k] += 1
            now = time.monotonic()
            with stats.lock:
                stats.pushes += 1
                stats.longest_push_gap = max(stats.longest_push_gap,
                                             now - last_acked)
            last_acked = now
        except StrataError as e:
            for k in batch:
                unknown[k] += 1
            stats.error(e)
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))
    client.close()


def puller(shards, num_keys, stats, stop, interval, timeout):
    client = strata.ParameterServerClient(shards, timeout=timeout)
    rng = random.Random(7)
    next_at = time.monotonic()
    while not stop.is_set():
        try:
            client.pull(TABLE, rng.sample(range(num_keys), BATCH))
            with stats.lock:
                stats.pulls += 1
        except StrataError as e:
            stats.error(e)
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))
    client.close()


def measure_capacity(shards, num_keys, seconds):
    """Push+pull pairs per second of one closed-loop client."""
    client = strata.ParameterServerClient(shards)
    ones = -np.ones((BATCH, DIM), dtype=np.float32)
    # Keys past the soak's own, so that they do not count.
    keys = list(range(num_keys, num_keys + 10 * BATCH))
    done, start = 0, time.monotonic()
    while time.monotonic() - start < seconds:
        batch = random.sample(keys, BATCH)
        client.push(TABLE, batch, ones)
        client.pull(TABLE, batch)
        done += 1
    client.close()
    return done / (time.monotonic() - start)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin_dir", required=True)
    parser.add_argument("--duration_s", type=float, default=600)
    parser.add_argument("--kill_every_s", type=float, default=60)
    parser.add_argument("--load", type=float, default=0.8,
                        help="share of the measured push+pull capacity")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--keys_per_thread", type=int, default=2000)
    parser.add_argument("--warmup_s", type=float, default=None)
    parser.add_argument("--max_rss_growth", type=float, default=0.05)
    parser.add_argument("--timeout_s", type=float, default=20.0)
    parser.add_argument("--json", action="store_true")
    flags = parser.parse_args()
    warmup = flags.warmup_s if flags.warmup_s is not None else min(
        30.0, flags.duration_s / 4)

    work = tempfile.mkdtemp(prefix="strata-soak.")
    shard_ports = [free_port(), free_port()]
    shards = [f"127.0.0.1:{p}" for p in shard_ports]
    daemons = []
    for i, port in enumerate(shard_ports):
        daemons.append(Daemon(f"shard-{i}", [
            os.path.join(flags.bin_dir, "strata-server"), f"--port={port}",
            f"--shard_index={i}", "--num_shards=2", "--durability=group",
            f"--data_dir={work}/shard-{i}", "--log_level=warning",
            # Small memtables: they fill and flush many times within the
            # warm-up, so that what grows after it is not RocksDB's buffers.
            "--write_buffer_mb=1", "--change_log_mb=16"], port, work))
    serving_port = free_port()
    serving = Daemon("serving", [
        os.path.join(flags.bin_dir, "strata-serving"), f"--port={serving_port}",
        f"--shards={','.join(shards)}", f"--data_dir={work}/serving",
        "--log_level=warning", "--write_buffer_mb=1"], serving_port, work)
    violations = []
    summary = {}
    try:
        for d in daemons:
            d.start()
        serving.start()
        admin = strata.ParameterServerClient(shards, timeout=flags.timeout_s)
        admin.create_table(TABLE, dim=DIM, optimizer="sgd", learning_rate=1.0,
                           initializer="zeros")
        num_keys = flags.threads * flags.keys_per_thread
        capacity = measure_capacity(shards, num_keys, 3.0)
        # Each thread pushes and one puller pulls; together `load` of what
        # one closed-loop client managed.
        rate = max(1.0, capacity * flags.load)
        push_interval = flags.threads / rate
        acked = np.zeros(num_keys, dtype=np.int64)
        unknown = np.zeros(num_keys, dtype=np.int64)
        stats, stop = Stats(), threading.Event()
        workers = [threading.Thread(target=pusher, args=(
            shards, list(range(t * flags.keys_per_thread,
                               (t + 1) * flags.keys_per_thread)),
            acked, unknown, stats, stop, push_interval, flags.timeout_s))
            for t in range(flags.threads)]
        workers.append(threading.Thread(target=puller, args=(
            shards, num_keys, stats, stop, 1.0 / rate, flags.timeout_s)))
        start = time.monotonic()
        for w in workers:
            w.start()

        kills, next_kill, victim = 0, start + flags.kill_every_s, 0
        rss_after_warmup, rss_now = None, {}
        while time.monotonic() - start < flags.duration_s:
            time.sleep(0.2)
            now = time.monotonic()
            if now >= next_kill:
                daemons[victim].kill9()
                daemons[victim].start()
                kills += 1
                victim = 1 - victim
                next_kill = now + flags.kill_every_s
            rss_now = {"serving": rss_mib(serving.process.pid)}
            if rss_after_warmup is None and now - start >= warmup:
                rss_after_warmup = dict(rss_now)
        stop.set()
        for w in workers:
            w.join(timeout=flags.timeout_s * 3)
            if w.is_alive():
                violations.append("a load thread is stuck in a call")
        elapsed = time.monotonic() - start
        longest_push_gap = stats.longest_push_gap

        # The shards' rows against what was acknowledged.
        keys = list(range(num_keys))
        values = np.concatenate([admin.pull(TABLE, keys[i:i + 4096])
                                 for i in range(0, num_keys, 4096)])[:, 0]
        lost = int(np.sum(values < acked))
        twice = int(np.sum(values > acked + unknown))
        if lost:
            violations.append(f"{lost} rows lost acknowledged updates")
        if twice:
            violations.append(f"{twice} rows have updates applied twice")
        # Serving converges to the shards' rows.
        serving_client = strata.ServingClient([f"127.0.0.1:{serving_port}"])
        deadline = time.monotonic() + 120
        mismatched = num_keys
        while time.monotonic() < deadline:
            served = np.concatenate([
                serving_client.lookup(TABLE, keys[i:i + 4096])
                for i in range(0, num_keys, 4096)])[:, 0]
            mismatched = int(np.sum(served != values))
            if mismatched == 0:
                break
            time.sleep(0.5)
        if mismatched:
            violations.append(f"serving differs from the shards on "
                              f"{mismatched} rows")
        if longest_push_gap > max(flags.timeout_s, 15.0):
            violations.append(f"no push succeeded for {longest_push_gap:.1f}s")
        growth = None
        if rss_after_warmup and rss_after_warmup["serving"] > 0:
            growth = rss_now["serving"] / rss_after_warmup["serving"] - 1
            if growth > flags.max_rss_growth:
                violations.append(f"serving RSS grew {growth:.1%} after "
                                  f"warm-up")
        summary = {
            "seconds": round(elapsed, 1), "kills": kills,
            "capacity_pairs_per_s": round(capacity, 1),
            "target_pushes_per_s": round(rate, 1),
            "pushes_acknowledged": stats.pushes, "pulls": stats.pulls,
            "errors": stats.errors,
            "updates_acknowledged": int(acked.sum()),
            "updates_unknown": int(unknown.sum()),
            "rows_lost": lost, "rows_applied_twice": twice,
            "serving_mismatched_rows": mismatched,
            "longest_push_gap_s": round(longest_push_gap, 2),
            "serving_rss_mib_after_warmup": rss_after_warmup and round(
                rss_after_warmup["serving"], 1),
            "serving_rss_mib_end": round(rss_now.get("serving", 0), 1),
            "serving_rss_growth": growth and round(growth, 4),
        }
        admin.close()
        serving_client.close()
    finally:
        for d in [serving] + daemons:
            d.stop()
    summary["violations"] = violations
    print(("soak: " + ("FAILED: " + "; ".join(violations) if violations
                       else "passed") + " " +
           " ".join(f"{k}={v}" for k, v in summary.items()
                    if k != "violations")))
    if flags.json:
        print(json.dumps(summary))
    if not violations:
        subprocess.run(["rm", "-rf", work], check=False)
    else:
        print(f"soak: logs kept in {work}", file=sys.stderr)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
