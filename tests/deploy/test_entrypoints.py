"""Runs the containers' command lines with the built binaries.

Every daemon takes its settings from the cluster file in the ConfigMap
strata-cluster (--cluster_file=/etc/strata/cluster.yaml); a flag there that
the binary lacks or cannot parse makes every pod exit 2 at start, and a
quoting or parameter-expansion slip in the shard's `sh -c` script only shows
when a pod starts. Here each binary reads a local copy of the ConfigMap's
file with the container's own arguments (pod variables filled in), and the
shard's script runs under sh as the pod would (HOSTNAME=strata-ps-1), with
only the binary path and, in the copy of the cluster file, ports and data
directory swapped for local ones. No process is left running: the file checks
use absl's --only_check_args (exit right after parsing), and the shard gets
SIGTERM (and SIGKILL if that fails).
"""

import os
import re
import signal
import subprocess
import time

import pytest
import yaml

import k8s_manifests as m

CONTAINER_BIN = "/usr/local/bin/"
CONTAINER_CLUSTER_FILE = "/etc/strata/cluster.yaml"
# Stand-ins for what Kubernetes fills in for $(VAR) in a pod's args.
POD_VALUES = {"STRATA_JOB_ID": "0b5e7f6c-test-job", "POD_IP": "127.0.0.1"}


def local_binary(binary):
    path = m.bin_dir() / os.path.basename(binary)
    if not path.is_file():
        pytest.fail(f"{path} is not built (build first or set STRATA_BIN_DIR)")
    return path


def pod_argv(container, index, cluster_path):
    """The container's command line as member `index` would run it, with the
    local binary and cluster file; pod variables become sample values."""
    binary, tokens = m.command_line(container)
    assert binary.startswith(CONTAINER_BIN), binary
    values = dict(POD_VALUES, JOB_COMPLETION_INDEX=str(index))
    argv = [str(local_binary(binary))]
    for token in tokens:
        assert token.startswith("--cluster_file=") == (
            token == f"--cluster_file={CONTAINER_CLUSTER_FILE}"), token
        token = token.replace(CONTAINER_CLUSTER_FILE, str(cluster_path))
        token = token.replace("${HOSTNAME##*-}", str(index))
        token = re.sub(r"\$\((\w+)\)", lambda ref: values[ref.group(1)], token)
        assert "$" not in token, f"no stand-in for the variable in {token}"
        argv.append(token)
    return argv


def run_check(argv):
    """Runs argv with --only_check_args: absl exits after parsing, so the
    daemon never binds a port or opens a store."""
    result = subprocess.run(argv + ["--only_check_args"], capture_output=True,
                            text=True, timeout=30, check=False)
    return result.returncode, result.stdout + result.stderr


def logged_file_flags(output, cluster_path):
    """The flags a daemon logged taking from the cluster file, as a list."""
    match = re.search(
        rf"flags from cluster file {re.escape(str(cluster_path))}: (.*)", output)
    assert match, f"the binary did not log reading {cluster_path}:\n{output}"
    return re.split(r" (?=--)", match.group(1).strip())


def members():
    """(container, index) for every member a workload's pods can be."""
    return [pytest.param(c, i, id=f"{c['name']}-{i}")
            for _, c in m.all_containers() for i in m.member_indices(c)]


@pytest.mark.parametrize("container,index", members())
def test_every_binary_accepts_the_cluster_file(container, index, tmp_path):
    cluster_path = tmp_path / m.CLUSTER_KEY
    cluster_path.write_text(m.cluster_file_text())  # the ConfigMap's bytes
    code, output = run_check(pod_argv(container, index, cluster_path))
    assert code == 0, output
    # What it took from the file is what the manifest tests assume
    # (k8s_manifests.file_flags, the basis of every cross-reference check).
    expected = [f"--{name}={value}"
                for name, value in m.file_flags(m.role(container), index)]
    assert logged_file_flags(output, cluster_path) == expected


@pytest.mark.parametrize("bad", [{"no_such_flag": "1"},
                                 {"metrics_port": "not-a-port"}],
                         ids=["unknown-flag", "bad-value"])
@pytest.mark.parametrize(
    "container", [c for _, c in m.all_containers()], ids=lambda c: c["name"])
def test_a_bad_flag_in_the_cluster_file_fails_the_check(container, bad, tmp_path):
    # The acceptance check above can fail: --only_check_args still checks the
    # file's flags against the binary's.
    cluster = m.cluster_file(raw=True)
    cluster[m.role(container)].setdefault("flags", {}).update(bad)
    cluster_path = tmp_path / m.CLUSTER_KEY
    cluster_path.write_text(yaml.safe_dump(cluster))
    code, output = run_check(pod_argv(container, 0, cluster_path))
    assert code == 2, output
    assert str(cluster_path) in output and next(iter(bad)) in output, output


def test_shard_entrypoint_starts_the_shard_of_the_pod_ordinal(tmp_path):
    binary = local_binary("strata-server")
    statefulset = m.one("StatefulSet", "strata-ps")
    (container,) = m.containers(statefulset)
    shell, dash_c, script = container["command"] + container["args"]

    # The ConfigMap's cluster file with local ports and directories; the
    # port file (not in the ConfigMap) tells when the shard listens.
    cluster = m.cluster_file(raw=True)
    ports = m.free_ports(len(cluster["shards"]["addresses"]), host="0.0.0.0")
    cluster["shards"]["addresses"] = [
        f"{address.rpartition(':')[0]}:{port}"
        for address, port in zip(cluster["shards"]["addresses"], ports)]
    cluster["shards"]["flags"].update(
        data_dir=f"{tmp_path}/data-{{index}}", metrics_port="0",
        port_file=f"{tmp_path}/port-{{index}}")
    cluster_path = tmp_path / m.CLUSTER_KEY
    cluster_path.write_text(yaml.safe_dump(cluster))

    assert CONTAINER_CLUSTER_FILE in script and CONTAINER_BIN in script
    local = (script
             .replace(f"{CONTAINER_BIN}strata-server", str(binary))
             .replace(CONTAINER_CLUSTER_FILE, str(cluster_path)))
    environment = dict(os.environ, HOSTNAME=f"{statefulset['metadata']['name']}-1")
    environment.update({k: v for k, v in m.env(container).items() if v is not None})
    port_file = tmp_path / "port-1"
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
    assert int(port_file.read_text()) == ports[1], output
    assert (tmp_path / "data-1").is_dir(), output
    assert not (tmp_path / "data-0").exists(), output
    replicas = statefulset["spec"]["replicas"]
    assert f"shard 1/{replicas} serving on 0.0.0.0:{ports[1]}" in output, output
    assert "stopped cleanly" in output, output
