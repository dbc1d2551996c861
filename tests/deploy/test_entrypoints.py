"""Runs the containers' command lines with the built binaries.

Every daemon takes its settings from the cluster file in the ConfigMap
strata-cluster (--cluster_file=/etc/strata/cluster.yaml); a flag there that
the binary lacks or cannot parse makes every pod exit 2 at start, and a
quoting or parameter-expansion slip in a `sh -c` script only shows when a pod
starts. Here each binary reads a local copy of the ConfigMap's file with the
container's own arguments, as every pod would: `sh -c` scripts run under sh
with the pod's HOSTNAME and env, Kubernetes' $(VAR) references get sample
values. The shard's script then starts replica 2 of shard 1 for real, next
to a local one-member etcd, with only the binary path and, in the copy of
the cluster file, etcd's endpoint, addresses and data directory swapped for
local ones; the etcd member's script runs with etcd swapped for printf, to
show what the shell hands it. No process is left running: the file checks
use absl's --only_check_args (exit right after parsing), and the shard and
etcd get SIGTERM (and SIGKILL if that fails).
"""

import base64
import json
import os
import re
import shlex
import signal
import subprocess
import urllib.error
import urllib.request

import pytest
import yaml

import k8s_manifests as m

CONTAINER_BIN = "/usr/local/bin/"
CONTAINER_CLUSTER_FILE = "/etc/strata/cluster.yaml"
# Stand-ins for what Kubernetes fills in for $(VAR) in a pod's args.
POD_VALUES = {"STRATA_JOB_ID": "0b5e7f6c-test-job", "POD_IP": "127.0.0.1"}
# Where a replica registers in etcd (--cluster_name's default prefix).
MEMBERS_KEY = "/strata/shards/{index}/members/r{replica}"


def local_binary(binary):
    path = m.bin_dir() / os.path.basename(binary)
    if not path.is_file():
        pytest.fail(f"{path} is not built (build first or set STRATA_BIN_DIR)")
    return path


def is_shell(container):
    argv = container.get("command", []) + container.get("args", [])
    return len(argv) == 3 and os.path.basename(argv[0]) == "sh" and argv[1] == "-c"


def pod_environment(workload, container, index, replica):
    """The env of member (index, replica)'s pod: the kubelet's HOSTNAME (the
    pod name) and the container's literal env."""
    environment = dict(os.environ,
                       HOSTNAME=m.pod_name(workload, index, replica))
    environment.update({k: v for k, v in m.env(container).items()
                        if v is not None})
    return environment


def pod_command(workload, container, index, replica, cluster_path, extra=()):
    """(argv, env) of member (index, replica) with the local binary and
    cluster file: a `sh -c` script stays a script (the shell expands it), a
    plain command gets sample values for its $(VAR)s."""
    binary, tokens = m.command_line(container)
    assert binary.startswith(CONTAINER_BIN), binary
    environment = pod_environment(workload, container, index, replica)
    if is_shell(container):
        shell, dash_c, script = container["command"] + container["args"]
        assert f"--cluster_file={CONTAINER_CLUSTER_FILE}" in script, script
        local = (script.replace(binary, str(local_binary(binary)))
                 .replace(CONTAINER_CLUSTER_FILE, str(cluster_path)))
        local = " ".join([local, *map(shlex.quote, extra)])
        return [shell, dash_c, local], environment
    values = dict(POD_VALUES, JOB_COMPLETION_INDEX=str(index))
    argv = [str(local_binary(binary))]
    for token in tokens:
        assert token.startswith("--cluster_file=") == (
            token == f"--cluster_file={CONTAINER_CLUSTER_FILE}"), token
        token = token.replace(CONTAINER_CLUSTER_FILE, str(cluster_path))
        token = re.sub(r"\$\((\w+)\)", lambda ref: values[ref.group(1)], token)
        assert "$" not in token, f"no stand-in for the variable in {token}"
        argv.append(token)
    return argv + list(extra), environment


def run_check(argv, environment):
    """Runs argv with --only_check_args: absl exits after parsing, so the
    daemon never binds a port or opens a store."""
    result = subprocess.run(argv, env=environment, capture_output=True,
                            text=True, timeout=30, check=False)
    return result.returncode, result.stdout + result.stderr


def logged_file_flags(output, cluster_path):
    """The flags a daemon logged taking from the cluster file, as a list."""
    match = re.search(
        rf"flags from cluster file {re.escape(str(cluster_path))}: (.*)", output)
    assert match, f"the binary did not log reading {cluster_path}:\n{output}"
    return re.split(r" (?=--)", match.group(1).strip())


def members():
    """(workload, container, index, replica) for every member a workload's
    pods can be, named after the pod."""
    return [pytest.param(w, c, i, r, id=m.pod_name(w, i, r))
            for w, c in m.all_containers() for i, r in m.members(w, c)]


@pytest.mark.parametrize("workload,container,index,replica", members())
def test_every_binary_accepts_the_cluster_file(workload, container, index,
                                               replica, tmp_path):
    cluster_path = tmp_path / m.CLUSTER_KEY
    cluster_path.write_text(m.cluster_file_text())  # the ConfigMap's bytes
    code, output = run_check(*pod_command(workload, container, index, replica,
                                          cluster_path, ["--only_check_args"]))
    assert code == 0, output
    # What it took from the file is what the manifest tests assume
    # (k8s_manifests.file_flags, the basis of every cross-reference check).
    expected = [f"--{name}={value}"
                for name, value in m.file_flags(m.role(container), index, replica)]
    assert logged_file_flags(output, cluster_path) == expected


@pytest.mark.parametrize("bad", [{"no_such_flag": "1"},
                                 {"metrics_port": "not-a-port"}],
                         ids=["unknown-flag", "bad-value"])
@pytest.mark.parametrize(
    "workload,container",
    [pytest.param(w, c, id=w["metadata"]["name"]) for w, c in m.all_containers()])
def test_a_bad_flag_in_the_cluster_file_fails_the_check(workload, container, bad,
                                                        tmp_path):
    # The acceptance check above can fail: --only_check_args still checks the
    # file's flags against the binary's.
    cluster = m.cluster_file(raw=True)
    cluster[m.role(container)].setdefault("flags", {}).update(bad)
    cluster_path = tmp_path / m.CLUSTER_KEY
    cluster_path.write_text(yaml.safe_dump(cluster))
    index, replica = m.members(workload, container)[0]
    code, output = run_check(*pod_command(workload, container, index, replica,
                                          cluster_path, ["--only_check_args"]))
    assert code == 2, output
    assert str(cluster_path) in output and next(iter(bad)) in output, output


def stop(process):
    """SIGTERM to a process this test started, then SIGKILL if it has not
    exited within 30 s."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def etcd_healthy(endpoint):
    try:
        with urllib.request.urlopen(f"http://{endpoint}/health", timeout=2) as r:
            return json.load(r).get("health") == "true"
    except (OSError, ValueError):
        return False


def etcd_members(endpoint):
    """{key: value} of the replica-group members registered in etcd (its
    JSON gateway's /v3/kv/range over every key)."""
    def b64(text):
        return base64.b64encode(text.encode()).decode()
    body = json.dumps({"key": b64("\0"), "range_end": b64("\0")}).encode()
    request = urllib.request.Request(f"http://{endpoint}/v3/kv/range", data=body,
                                     method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:
        kvs = json.load(response).get("kvs", [])
    found = {base64.b64decode(kv["key"]).decode():
             base64.b64decode(kv.get("value", "")).decode() for kv in kvs}
    return {k: v for k, v in found.items() if "/members/" in k}


@pytest.fixture
def etcd_endpoint(tmp_path):
    """A one-member etcd on free loopback ports, data in tmp_path; yields its
    client host:port and stops it afterwards."""
    binary = m.etcd_binary()
    if binary is None:
        pytest.skip("etcd is not installed (Debian: etcd-server)")
    client, peer = m.free_ports(2)
    client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    log_path = tmp_path / "etcd.log"
    endpoint = f"127.0.0.1:{client}"
    with open(log_path, "w", encoding="utf-8") as log:
        process = subprocess.Popen(
            [binary, "--name=test", f"--data-dir={tmp_path / 'etcd'}",
             f"--listen-client-urls={client_url}",
             f"--advertise-client-urls={client_url}",
             f"--listen-peer-urls={peer_url}",
             f"--initial-advertise-peer-urls={peer_url}",
             f"--initial-cluster=test={peer_url}"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            m.wait_until(
                lambda: process.poll() is not None or etcd_healthy(endpoint),
                30, "etcd answering /health")
            assert process.poll() is None, log_path.read_text()
            yield endpoint
        finally:
            stop(process)


def test_shard_entrypoint_starts_the_replica_of_the_pod(tmp_path, etcd_endpoint):
    statefulset = m.shard_statefulsets()[1]
    (container,) = m.containers(statefulset)
    index, replica = m.members(statefulset, container)[-1]  # strata-ps-1-2
    assert (index, replica) == (1, 2)

    # The ConfigMap's cluster file with local etcd, ports and directories;
    # the port file (not in the ConfigMap) tells when the shard listens.
    cluster = m.cluster_file(raw=True)
    groups = m.shard_replicas(cluster)
    ports = iter(m.free_ports(sum(map(len, groups)), host="0.0.0.0"))
    cluster["etcd"]["endpoints"] = [etcd_endpoint]
    cluster["shards"]["addresses"] = [[f"127.0.0.1:{next(ports)}" for _ in group]
                                      for group in groups]
    cluster["shards"]["flags"].update(
        data_dir=f"{tmp_path}/data-{{index}}-r{{replica}}", metrics_port="0",
        port_file=f"{tmp_path}/port-{{index}}-r{{replica}}")
    cluster_path = tmp_path / m.CLUSTER_KEY
    cluster_path.write_text(yaml.safe_dump(cluster))
    address = cluster["shards"]["addresses"][index][replica]
    port = int(address.rpartition(":")[2])

    argv, environment = pod_command(statefulset, container, index, replica,
                                    cluster_path)
    assert environment["HOSTNAME"] == "strata-ps-1-2"
    port_file = tmp_path / f"port-{index}-r{replica}"
    log_path = tmp_path / "shard.log"
    with open(log_path, "w", encoding="utf-8") as log:
        process = subprocess.Popen(argv, env=environment, stdout=log,
                                   stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
        try:
            m.wait_until(lambda: port_file.exists() or process.poll() is not None,
                         30, "the shard writing its port file")
            assert process.poll() is None, log_path.read_text()
            # It joined its group in etcd as replica r<ordinal> of its shard
            # index, at its own entry of the cluster file, and alone.
            registered = m.wait_until(lambda: etcd_members(etcd_endpoint), 30,
                                      "the replica registering in etcd")
            assert registered == {
                MEMBERS_KEY.format(index=index, replica=replica): address}
            # `exec` made the daemon the shell's process: SIGTERM reaches it.
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
        finally:
            stop(process)
    output = log_path.read_text()
    assert process.returncode == 0, output
    assert int(port_file.read_text()) == port, output
    assert [p.name for p in tmp_path.glob("data-*")] == [
        f"data-{index}-r{replica}"], output
    shards, replicas = len(groups), len(groups[index])
    assert re.search(rf"shard {index}/{shards} serving on 0\.0\.0\.0:{port} .*"
                     r"replication=replicated", output), output
    assert (f"replica r{replica} of shard {index} starts as a follower"
            in output), output
    assert f"(replicated, {replicas} replicas)" in output, output
    assert "stopped cleanly" in output, output
    # Stopping revoked its lease: it left the group at once.
    assert etcd_members(etcd_endpoint) == {}


@pytest.mark.parametrize(
    "ordinal", range(m.one("StatefulSet", m.ETCD)["spec"]["replicas"]))
def test_etcd_entrypoint_gives_etcd_the_pods_name_and_urls(ordinal):
    statefulset = m.one("StatefulSet", m.ETCD)
    (container,) = m.containers(statefulset)
    binary, _ = m.command_line(container)
    shell, dash_c, script = container["command"] + container["args"]
    assert script.startswith(f"exec {binary} ")
    # printf prints each argument the shell would have given etcd on a line.
    printing = script.replace(f"exec {binary} ", "exec printf '%s\\n' ", 1)
    pod = m.pod_names(statefulset)[ordinal]
    result = subprocess.run([shell, dash_c, printing], capture_output=True,
                            text=True, timeout=30, check=False,
                            env=dict(os.environ, HOSTNAME=pod))
    assert result.returncode == 0, result.stderr
    arguments = result.stdout.splitlines()
    flags = {}
    for argument in arguments:
        match = re.fullmatch(r"--([a-z-]+)=([^\s'\"$]+)", argument)
        assert match, f"etcd would get '{argument}'"
        flags[match.group(1)] = match.group(2)
    assert len(flags) == len(arguments), "a flag is given twice"
    host = m.pod_host(statefulset, pod)
    assert flags["name"] == pod
    assert flags["advertise-client-urls"] == (
        f"http://{host}:{m.named_port(container, 'client')}")
    peer_url = f"http://{host}:{m.named_port(container, 'peer')}"
    assert flags["initial-advertise-peer-urls"] == peer_url
    # etcd starts only if --initial-cluster lists it under its name at the
    # URL it advertises.
    assert f"{pod}={peer_url}" in flags["initial-cluster"].split(",")
    known = m.etcd_help_flags()
    if known is not None:
        assert set(flags) <= known, sorted(set(flags) - known)
