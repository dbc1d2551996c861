"""The serving PS's HTML status page, rendered by headless Chromium: a
screenshot is taken, and the numbers in the rendered page equal those of
/metrics at the same moment."""

import os
import re
import shutil
import subprocess
import time
import urllib.request

import pytest

from strata_cluster import Cluster, binary, free_port

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="needs Chromium (deploy/install_deps.sh installs Debian's)")


def http_get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}",
                                timeout=10) as answer:
        return answer.read().decode()


def metric(text, series):
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"no {series} in /metrics:\n{text}")


def chromium(*args):
    result = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-dev-shm-usage", *args],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def element(dom, element_id):
    match = re.search(rf'id="{re.escape(element_id)}"[^>]*>([^<]*)<', dom)
    assert match, f"no element {element_id} in the page:\n{dom[:3000]}"
    return match.group(1)


def cell(dom, row_id, cls):
    row = re.search(rf'<tr id="{re.escape(row_id)}">(.*?)</tr>', dom)
    assert row, f"no row {row_id} in the page:\n{dom[:3000]}"
    match = re.search(rf'class="[^"]*\b{cls}\b[^"]*">([^<]*)<', row.group(1))
    assert match, f"no {cls} cell in row {row_id}: {row.group(1)}"
    return match.group(1)


def chart_points(page, chart, series):
    """The (x, y) points of the line `series` of chart `chart` in a page."""
    match = re.search(rf'id="{chart}".*?data-name="{series}"[^>]*'
                      r'points="([^"]*)"', page, re.S)
    if not match:
        return []
    return [tuple(float(v) for v in p.split(",")) for p in
            match.group(1).split()]


def screenshot(port, path, window_size):
    """A headless Chromium picture of the port's /status, checked to be a
    PNG of some size."""
    chromium(f"--screenshot={path}", f"--window-size={window_size}",
             f"http://127.0.0.1:{port}/status")
    image = path.read_bytes()
    assert image[:8] == b"\x89PNG\r\n\x1a\n" and len(image) > 5000


@pytest.fixture
def cluster():
    cluster = Cluster("strata-py-status-")
    try:
        yield cluster
    finally:
        cluster.stop()


def test_status_page_renders_the_numbers_of_metrics(cluster, tmp_path):
    shard = cluster.start_shard("shard")
    shard_address = shard.wait_ready()
    serving = cluster.start("serving", [
        binary("strata-serving"), "--port=0", "--host=127.0.0.1",
        "--metrics_port=0", f"--shards={shard_address}",
        f"--data_dir={cluster.workdir / 'serving'}"])
    serving_address = serving.wait_ready()
    port = int(re.search(r"metrics_port=(\d+)",
                         serving.log_path.read_text()).group(1))

    def ctl(*args):
        subprocess.run([binary("stratactl"), f"--shards={shard_address}",
                        *args], check=True, capture_output=True, timeout=30)

    ctl("create-table", "page_t", "--dim=4")
    ctl("push", "page_t", "--keys=11,22,33,44,55",
        "--gradients=" + ",".join(["1"] * 20))
    subprocess.run([binary("strata-lookup"), f"--serving={serving_address}",
                    "--wait_caught_up_s=30", "page_t", "11,22,99"],
                   check=True, capture_output=True, timeout=60)
    deadline = time.monotonic() + 30
    while True:
        text = http_get(port, "/metrics")
        if 'strata_serving_table_rows{table="page_t"} 5' in text:
            break
        assert time.monotonic() < deadline, text
        time.sleep(0.05)

    # The charts have a point a second; wait for a few, lookups included.
    deadline = time.monotonic() + 30
    while True:
        page = http_get(port, "/status")
        if len(chart_points(page, "chart-lookups", "lookups")) >= 3:
            break
        assert time.monotonic() < deadline, page
        time.sleep(0.2)

    screenshot(port, tmp_path / "status.png", "1000,700")

    dom = chromium("--dump-dom", f"http://127.0.0.1:{port}/status")
    metrics = http_get(port, "/metrics")
    assert element(dom, "mode") == "follow"
    assert element(dom, "shards-connected") == "1"
    assert int(cell(dom, "table-page_t", "rows")) == metric(
        metrics, 'strata_serving_table_rows{table="page_t"}') == 5
    assert int(element(dom, "keys-total")) == metric(
        metrics, "strata_serving_keys_total") == 3
    assert int(element(dom, "missing-keys-total")) == metric(
        metrics, "strata_serving_missing_keys_total") == 1
    assert int(cell(dom, "shard-0", "applied")) == metric(
        metrics, 'strata_serving_shard_applied_sequence{shard="0"}')
    assert cell(dom, "shard-0", "state") == "connected"
    for chart in ("chart-lookups", "chart-keys", "chart-latency",
                  "chart-lag"):
        assert f'id="{chart}"' in dom, chart
    assert '<meta http-equiv="refresh"' in http_get(port, "/status")


def test_training_shard_status_page_charts_and_numbers(cluster, tmp_path):
    """A training shard's /status: charts of the last seconds' traffic (one
    point per second), and tables whose numbers are those of /metrics."""
    port = free_port()
    shard = cluster.start_shard("shard", f"--metrics_port={port}")
    shard_address = shard.wait_ready()

    def ctl(*args):
        subprocess.run([binary("stratactl"), f"--shards={shard_address}",
                        *args], check=True, capture_output=True, timeout=30)

    ctl("create-table", "page_t", "--dim=4", "--optimizer=adagrad")
    # Traffic over several seconds, so that the charts have several points.
    deadline = time.monotonic() + 60
    round_number = 0
    while True:
        round_number += 1
        ctl("push", "page_t", "--keys=11,22,33,44,55",
            "--gradients=" + ",".join(["1"] * 20))
        ctl("pull", "page_t", "11,22,33")
        page = http_get(port, "/status")
        if (round_number >= 3 and
                len(chart_points(page, "chart-requests", "Pull")) >= 4):
            break
        assert time.monotonic() < deadline, page
        time.sleep(0.3)

    picture = tmp_path / "shard-status.png"
    screenshot(port, picture, "1200,900")
    if os.environ.get("STRATA_SCREENSHOT_DIR"):
        shutil.copy(picture, os.environ["STRATA_SCREENSHOT_DIR"])

    dom = chromium("--dump-dom", f"http://127.0.0.1:{port}/status")
    metrics = http_get(port, "/metrics")
    assert element(dom, "shard-index") == "0"
    assert element(dom, "num-shards") == "1"
    assert int(cell(dom, "table-page_t", "rows")) == metric(
        metrics, 'strata_table_rows{table="page_t"}') == 5
    assert cell(dom, "table-page_t", "optimizer") == "adagrad"
    # Counts move between the two reads only by the page's own requests,
    # which are not Pulls or Pushes.
    pulls = metric(metrics,
                   'strata_server_requests_total{method="Pull",code="OK"}')
    assert int(cell(dom, "method-Pull", "calls")) == pulls == round_number
    assert int(cell(dom, "method-Push", "calls")) == round_number
    assert int(element(dom, "keys-pulled")) == metric(
        metrics, "strata_server_keys_pulled_total") == 3 * round_number
    assert float(cell(dom, "method-Pull", "p99")) > 0
    for chart in ("chart-requests", "chart-keys", "chart-latency"):
        assert f'id="{chart}"' in dom, chart
    # The requests chart drew a Pull line with a point a second, and some
    # point is above its zero line (y = 122 in the 140 px chart).
    ys = [y for _, y in chart_points(dom, "chart-requests", "Pull")]
    assert len(ys) >= 4 and min(ys) < 121, ys
    assert '<meta http-equiv="refresh"' in http_get(port, "/status")


def test_worker_status_page_charts_and_numbers(cluster, tmp_path):
    """strata-worker's /status while it trains: charts of samples/s, steps/s,
    loss and held-out AUC (a point a second), and progress numbers that lie
    between those of two /metrics scrapes taken around the page."""
    address = cluster.start_shard("shard").wait_ready()
    data = tmp_path / "train"
    subprocess.run([binary("strata-datagen"), f"--out={data}",
                    "--rows=300000", "--holdout_rows=5000"], check=True,
                   capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    port = free_port()
    with open(tmp_path / "worker.log", "wb") as log:
        worker = subprocess.Popen(
            [binary("strata-worker"), f"--shards={address}", "--rank=0",
             "--num_workers=1", f"--train_files={data}",
             f"--eval_files={data}.holdout", "--epochs=50",
             "--eval_every_steps=40", "--progress_interval_s=0.5",
             f"--metrics_port={port}"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()
            try:
                page = http_get(port, "/status")
            except OSError:
                page = ""
            if (len(chart_points(page, "chart-samples", "samples")) >= 4 and
                    'id="eval-auc">0.' in page):
                break
            assert time.monotonic() < deadline, page or "no page"
            time.sleep(0.3)
        picture = tmp_path / "worker-status.png"
        screenshot(port, picture, "1200,900")
        if os.environ.get("STRATA_SCREENSHOT_DIR"):
            shutil.copy(picture, os.environ["STRATA_SCREENSHOT_DIR"])
        before = http_get(port, "/metrics")
        dom = chromium("--dump-dom", f"http://127.0.0.1:{port}/status")
        after = http_get(port, "/metrics")
        assert worker.poll() is None, "the worker finished during the checks"
    finally:
        worker.kill()
        worker.wait()
    assert element(dom, "rank") == "0"
    assert element(dom, "num-workers") == "1"
    assert element(dom, "num-shards") == "1"
    for element_id, series in (("step", "strata_worker_global_step"),
                               ("examples", "strata_worker_examples_total"),
                               ("pushed-keys",
                                "strata_worker_pushed_keys_total")):
        value = int(element(dom, element_id))
        assert metric(before, series) <= value <= metric(after, series), (
            element_id, value)
    assert int(element(dom, "step")) > 0
    page_auc = element(dom, "eval-auc")
    assert 0.5 < float(page_auc) < 1
    # Evaluations run every 40 steps, so several may land while the page is
    # read; the page's AUC is one the worker logged, as is the last scrape's.
    logged = re.findall(r"eval_auc (0\.\d{5})",
                        (tmp_path / "worker.log").read_text())
    assert page_auc in logged, (page_auc, logged)
    last_auc = metric(after, "strata_worker_eval_auc")
    assert any(abs(float(value) - last_auc) <= 5e-6 for value in logged), (
        last_auc, logged)
    for chart, series in (("chart-samples", "samples"),
                          ("chart-steps", "steps"), ("chart-loss", "loss"),
                          ("chart-auc", "AUC")):
        ys = [y for _, y in chart_points(dom, chart, series)]
        # A point a second, and some point above the zero line (y = 122).
        assert len(ys) >= 3 and min(ys) < 121, (chart, ys)
