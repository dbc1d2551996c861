"""`stratactl status` against the live cluster: rows and rates from every
shard, the serving PS's lag, and a shard that is down named with exit 1;
`stratactl shard-map`."""

import json
import subprocess
import threading

from strata_cluster import binary, free_port


def test_status_reports_rows_rates_and_serving_lag(stratactl, serving_address):
    stratactl("create-table", "status_t", "--dim=2", "--optimizer=sgd",
              "--learning_rate=0.1")
    keys = ",".join(str(k) for k in range(1, 41))
    grads = ",".join(["0.5"] * 80)
    stop = threading.Event()

    def push_until_stopped():
        while not stop.is_set():
            stratactl("push", "status_t", f"--keys={keys}",
                      f"--gradients={grads}")

    pusher = threading.Thread(target=push_until_stopped)
    pusher.start()
    try:
        doc = json.loads(stratactl("--json", "status",
                                   f"--serving={serving_address}",
                                   "--interval_s=1.0"))
    finally:
        stop.set()
        pusher.join()
    shards = doc["shards"]
    assert [s["up"] for s in shards] == [True, True]
    # The 40 keys are spread over both shards; each shard holds its share.
    stats = json.loads(stratactl("--json", "stats"))
    for shard, stat in zip(shards, stats["shards"]):
        assert shard["rows"] == sum(t["rows"] for t in stat["tables"])
    assert sum(s["pushes_per_second"] for s in shards) > 0
    assert sum(s["keys_pushed_per_second"] for s in shards) > 0
    serving = doc["serving"]
    assert serving["up"] and serving["mode"] == "follow"
    assert [s["connected"] for s in serving["shards"]] == [True, True]


def test_status_names_a_shard_that_is_down_and_exits_1(shard_addresses):
    dead = f"127.0.0.1:{free_port()}"
    result = subprocess.run(
        [binary("stratactl"), f"--shards={shard_addresses[0]},{dead}",
         "status", "--interval_s=0"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 1, result.stderr
    assert "cluster: 1/2 shards up" in result.stdout
    assert f"{dead} DOWN: UNAVAILABLE" in result.stdout
    assert f"{shard_addresses[0]} UP" in result.stdout


def test_shard_map_shows_the_version_and_each_shards_buckets(stratactl):
    doc = json.loads(stratactl("--json", "shard-map"))
    assert doc["version"] == 1 and doc["num_shards"] == 2
    assert [s["buckets"] for s in doc["shards"]] == [2048, 2048]
    assert [s["serves_version"] for s in doc["shards"]] == [1, 1]
    text = stratactl("shard-map")
    assert text.splitlines()[0] == "shard map version 1: 2 shards, 4096 buckets"
    assert "2048 buckets, serves version 1" in text
