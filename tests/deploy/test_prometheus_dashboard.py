"""A real Prometheus (Debian's `prometheus`) scrapes a local cluster started
by `strata-local start --with-prometheus`, and every query of the Grafana
dashboard deploy/grafana/strata-overview.json finds data.

The cluster: a one-member etcd, one shard of 3 replicas (replicated mode), a
serving PS and one training worker, each with a metrics port. While the
worker trains, the test looks rows up on the serving PS and makes one
failing request of each kind, so that the latency and error panels have
something to draw. Prometheus must scrape every target without an error
(so each daemon's /metrics parses), and each panel's query, run over the
test's time range as Grafana would, must return at least one finite point.
"""

import json
import math
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

import k8s_manifests as m

REPO = Path(__file__).resolve().parents[2]
local = m.strata_local
DASHBOARD = REPO / "deploy" / "grafana" / "strata-overview.json"

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("etcd") is None,
    reason="needs Debian's prometheus and etcd-server")




def panel_queries():
    """(panel title, expression) of every query of the dashboard."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"])
            for panel in dashboard["panels"] if panel["type"] != "row"
            for target in panel["targets"]]


def prometheus_get(address, path, **params):
    url = f"http://{address}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    return body["data"]


def wait_for(condition, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s: {what}")
        time.sleep(0.2)


def port_free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_decade(taken):
    """A free port P, a multiple of 10, with P+1 and P+2 free too and none
    of them in `taken`: replica r of the shard serves /metrics on P+r, which
    the cluster file says once as "<P/10>{replica}", as a StatefulSet's pods
    would share one template."""
    for candidate in m.free_ports(32):
        base = candidate - candidate % 10
        ports = [base + r for r in range(3)]
        if (base > 1024 and not set(ports) & set(taken) and
                all(port_free(p) for p in ports)):
            return base
    pytest.skip("no three consecutive free ports")


def replicated_cluster(ports):
    """One shard of three replicas, serving and a worker on free ports."""
    shard = [f"127.0.0.1:{p}" for p in ports[0:3]]
    return {
        "version": 1,
        "etcd": {"endpoints": [f"127.0.0.1:{ports[3]}"]},
        "shards": {
            "addresses": [shard],
            "flags": {"data_dir": "shard-{index}-r{replica}",
                      "durability": "group", "replication": "replicated",
                      "lease_ttl_ms": 2000},
        },
        "serving": {"addresses": [f"127.0.0.1:{ports[5]}"],
                    "flags": {"data_dir": "serving",
                              "metrics_port": ports[6],
                              # So that a lookup of 5 keys fails on the
                              # server (strata-lookup checks the table
                              # itself).
                              "max_keys_per_request": 4,
                              "unknown_keys": "initializer"}},
        "workers": {"count": 1,
                    "flags": {"job_id": "dash", "train_files": "data/train",
                              "eval_files": "data/train.holdout",
                              "batch_size": 128, "epochs": 8,
                              "eval_every_steps": 40,
                              "progress_interval_s": 1,
                              "metrics_port": ports[7],
                              "result_file": "result-{index}.json"}},
    }


def test_every_dashboard_query_finds_data_in_a_real_prometheus(run_dir,
                                                               tmp_path):
    ports = m.free_ports(10)
    metrics_base = free_decade(ports)
    cluster = replicated_cluster(ports)
    cluster["shards"]["member_flags"] = [
        {"metrics_port": f"{metrics_base // 10}{{replica}}"}]
    replica_metrics = [metrics_base + r for r in range(3)]
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text(yaml.safe_dump(cluster))
    prometheus = f"127.0.0.1:{ports[9]}"

    datagen = m.bin_dir() / "strata-datagen"
    subprocess.run([str(datagen), f"--out={run_dir / 'data' / 'train'}",
                    "--rows=30000", "--holdout_rows=2000",
                    f"--vocab_sizes={','.join(['50'] * 26)}"],
                   check=True, capture_output=True, timeout=120)
    start_time = time.time()
    at = f"--run_dir={run_dir}"
    started = local("start", str(cluster_file), at, f"--bin_dir={m.bin_dir()}",
                    f"--with-prometheus={prometheus}",
                    "--scrape_interval_s=1")
    assert started.returncode == 0, started.stderr + started.stdout
    assert f"Prometheus: http://{prometheus} scrapes" in started.stdout
    config = yaml.safe_load((run_dir / "prometheus.yml").read_text())
    targets = {t["labels"]["process"]: t["targets"][0]
               for job in config["scrape_configs"]
               for t in job["static_configs"]}
    assert targets == {
        "etcd": cluster["etcd"]["endpoints"][0],
        **{f"shard-0-r{r}": f"127.0.0.1:{p}"
           for r, p in enumerate(replica_metrics)},
        "serving": f"127.0.0.1:{ports[6]}",
        "worker-0": f"127.0.0.1:{ports[7]}",
    }

    # Every target scraped, none with an error: each /metrics parses.
    def all_up():
        active = prometheus_get(prometheus, "/api/v1/targets")[
            "activeTargets"]
        return (len(active) == len(targets) and
                all(t["health"] == "up" for t in active) and active)
    try:
        active = wait_for(all_up, 60, "every target up in Prometheus")
    except AssertionError:
        print(json.dumps(prometheus_get(prometheus, "/api/v1/targets"),
                         indent=1))
        raise
    assert all(t["lastError"] == "" for t in active), active

    # While the worker trains: lookups on the serving PS, and one request
    # that fails on each of the shard (a table of another dimension) and the
    # serving PS (too many keys).
    # A generous deadline: six processes share two cores while the worker
    # trains, and this test is about the metrics, not the latency.
    lookup = [str(m.bin_dir() / "strata-lookup"), "--timeout_ms=20000",
              f"--serving={cluster['serving']['addresses'][0]}"]
    stratactl = [str(m.bin_dir() / "stratactl"),
                 f"--cluster_file={run_dir / 'cluster.yaml'}"]
    wait_for(lambda: subprocess.run(
        lookup + ["dlrm_embeddings", "1,2,3"], capture_output=True,
        timeout=30).returncode == 0, 90, "the worker's table on serving")
    for _ in range(20):
        looked_up = subprocess.run(lookup + ["dlrm_embeddings", "1,2,3,4"],
                                   capture_output=True, text=True, timeout=30)
        assert looked_up.returncode == 0, looked_up.stderr
    too_many = subprocess.run(lookup + ["dlrm_embeddings", "1,2,3,4,5"],
                              capture_output=True, text=True, timeout=30)
    assert too_many.returncode == 1, too_many.stderr
    assert "INVALID_ARGUMENT" in too_many.stderr, too_many.stderr
    # The shard refuses it (stratactl checks a pull's table itself).
    clash = subprocess.run(stratactl + ["create-table", "dlrm_embeddings",
                                        "--dim=3"],
                           capture_output=True, text=True, timeout=30)
    assert clash.returncode == 1, clash.stdout + clash.stderr
    assert "ALREADY_EXISTS" in clash.stderr, clash.stderr

    # Grafana draws each panel over a time range: each query, run over the
    # test's range at a 1 s step, must give a finite point. Rates need two
    # scrapes after an event, so poll (the worker trains for a while).
    def panels_without_data():
        empty = []
        for title, expr in panel_queries():
            data = prometheus_get(prometheus, "/api/v1/query_range",
                                  query=expr, start=f"{start_time:.3f}",
                                  end=f"{time.time():.3f}", step="1")
            values = [float(v) for series in data["result"]
                      for _, v in series["values"]]
            if not any(math.isfinite(v) for v in values):
                empty.append(f"{title}: {expr}")
        return empty
    deadline = time.monotonic() + 120
    while (empty := panels_without_data()) and time.monotonic() < deadline:
        time.sleep(1)
    assert empty == [], "panels without data:\n" + "\n".join(empty)

    waited = local("wait", at, "--timeout_s=150")
    assert waited.returncode == 0, waited.stderr + waited.stdout

    # The figures behind two panels are right, not just present.
    auc = prometheus_get(prometheus, "/api/v1/query_range",
                         query="max(strata_worker_eval_auc)",
                         start=f"{start_time:.3f}", end=f"{time.time():.3f}",
                         step="1")["result"][0]["values"]
    assert 0.5 < float(auc[-1][1]) <= 1.0, auc
    rows = prometheus_get(prometheus, "/api/v1/query",
                          query="max(strata_table_rows)")["result"]
    assert int(float(rows[0]["value"][1])) > 0, rows
    refused = prometheus_get(prometheus, "/api/v1/query", query=(
        'sum(strata_server_requests_total{method="CreateTable",'
        'code="ALREADY_EXISTS"})'))["result"]
    assert refused and float(refused[0]["value"][1]) >= 1, refused

    stopped = local("stop", at)
    assert stopped.returncode == 0, stopped.stderr + stopped.stdout
    assert re.search(r"^prometheus\s+exited 0$", stopped.stdout,
                     re.MULTILINE), stopped.stdout
