"""Fixtures shared by the tests that run clusters with strata-local."""

import pytest

import k8s_manifests as m


def pytest_configure(config):
    # tests/run_pytest.sh runs the cases marked so one at a time, after the
    # others have run spread over pytest-xdist's workers.
    config.addinivalue_line(
        "markers", "exclusive: asserts on timing or throughput that need the "
        "machine's cores to itself; run alone, after the others")


@pytest.fixture
def run_dir(tmp_path):
    """A strata-local run directory with an empty data/ folder; whatever
    cluster a failed test left running in it (and only that) is stopped."""
    directory = tmp_path / "run"
    (directory / "data").mkdir(parents=True)
    yield directory
    if (directory / "state.json").exists():
        m.strata_local("stop", f"--run_dir={directory}", "--timeout_s=5")
