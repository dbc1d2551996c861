"""Fixtures that start a live local Strata cluster for the tests (see
strata_cluster.py): two training shards, a serving PS following them, and
stratactl pointed at the shards."""

import subprocess

import pytest

from strata_cluster import Cluster, binary


def pytest_configure(config):
    # tests/run_pytest.sh runs the cases marked so one at a time, after the
    # others have run spread over pytest-xdist's workers.
    config.addinivalue_line(
        "markers", "exclusive: asserts on timing or throughput that need the "
        "machine's cores to itself; run alone, after the others")


@pytest.fixture(scope="session")
def shard_addresses():
    """Two training shards (strata-server), in shard-index order."""
    cluster = Cluster("strata-py-train-")
    try:
        yield [shard.address for shard in cluster.start_shards(2)]
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def serving_address(shard_addresses):
    """A strata-serving that follows the two training shards."""
    cluster = Cluster("strata-py-serving-")
    try:
        serving = cluster.start("serving", [
            binary("strata-serving"), "--port=0", "--host=127.0.0.1",
            f"--shards={','.join(shard_addresses)}",
            f"--data_dir={cluster.workdir / 'serving'}",
            "--log_level=warning"])
        yield serving.wait_ready()
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def stratactl(shard_addresses):
    """Runs `stratactl --shards=<the cluster> ARGS`, returning its stdout."""
    path = binary("stratactl")

    def run(*args, timeout=30):
        result = subprocess.run(
            [path, f"--shards={','.join(shard_addresses)}", *args],
            capture_output=True, text=True, timeout=timeout,
            stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            pytest.fail(f"stratactl {' '.join(args)} exited "
                        f"{result.returncode}: {result.stderr}")
        return result.stdout
    return run
