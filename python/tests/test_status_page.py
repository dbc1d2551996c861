"""The serving PS's HTML status page, rendered by headless Chromium: a
screenshot is taken, and the numbers in the rendered page equal those of
/metrics at the same moment."""

import re
import shutil
import subprocess
import time
import urllib.request

import pytest

from strata_cluster import Cluster, binary

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

    screenshot = tmp_path / "status.png"
    chromium(f"--screenshot={screenshot}", "--window-size=1000,700",
             f"http://127.0.0.1:{port}/status")
    image = screenshot.read_bytes()
    assert image[:8] == b"\x89PNG\r\n\x1a\n" and len(image) > 5000

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
    assert '<meta http-equiv="refresh"' in http_get(port, "/status")
