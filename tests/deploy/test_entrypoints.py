"""Runs the shard pod's entrypoint script with the built binary.

The StatefulSet turns the pod name into --shard_index in a `sh -c` script; a
quoting or parameter-expansion slip there only shows when a pod starts. Here
the script runs under sh as the pod would (HOSTNAME=strata-ps-1, the pod's
env), with only the binary path, data directory and ports swapped for local
ones, and must start shard 1 of 2 and exit 0 on SIGTERM.
"""

import os
import signal
import subprocess
import time

import pytest

import k8s_manifests as m


def test_shard_entrypoint_starts_the_shard_of_the_pod_ordinal(tmp_path):
    binary = m.bin_dir() / "strata-server"
    if not binary.is_file():
        pytest.fail(f"{binary} is not built (build first or set STRATA_BIN_DIR)")
    statefulset = m.one("StatefulSet", "strata-ps")
    (container,) = m.containers(statefulset)
    shell, dash_c, script = container["command"] + container["args"]
    flags = m.flags(container)
    port_file = tmp_path / "port"
    local = (script
             .replace("/usr/local/bin/strata-server", str(binary))
             .replace(f"--data_dir={flags['data_dir']}", f"--data_dir={tmp_path}/data")
             .replace(f"--port={flags['port']}", f"--port=0 --port_file={port_file}")
             .replace(f"--metrics_port={flags['metrics_port']}", "--metrics_port=0"))
    environment = dict(os.environ, HOSTNAME=f"{statefulset['metadata']['name']}-1")
    environment.update({k: v for k, v in m.env(container).items() if v is not None})
    process = subprocess.Popen([shell, dash_c, local], env=environment,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists() and process.poll() is None:
            assert time.monotonic() < deadline, "the shard did not start in 30 s"
            time.sleep(0.05)
        assert process.poll() is None, process.stdout.read()
        # `exec` made the daemon the shell's process: SIGTERM reaches it.
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, output
    replicas = statefulset["spec"]["replicas"]
    assert f"shard 1/{replicas} serving on 0.0.0.0:" in output, output
    assert "stopped cleanly" in output, output
