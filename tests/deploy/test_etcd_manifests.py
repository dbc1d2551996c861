"""Checks of etcd in deploy/k8s/15-etcd.yaml, which coordinates the shards'
replica groups.

The members must name each other (--initial-cluster) and themselves (--name
and the URLs they advertise, from the pod name) the way the headless Service
publishes them, the cluster file must name every member, a drain must keep a
quorum, and every flag must exist in the etcd the image installs (Debian's
etcd-server, the package of this machine's etcd). test_entrypoints.py runs
the member's `sh -c` script.
"""

import pytest

import k8s_manifests as m

ETCD_BINARY = "/usr/bin/etcd"  # where Debian's etcd-server puts it


def etcd():
    statefulset = m.one("StatefulSet", m.ETCD)
    (container,) = m.containers(statefulset)
    return statefulset, container


def member_url(statefulset, pod, port_name):
    """http://<pod>.<service>.<namespace>.svc.cluster.local:<port>."""
    (container,) = m.containers(statefulset)
    return (f"http://{m.pod_host(statefulset, pod)}:"
            f"{m.named_port(container, port_name)}")


def quorum(members):
    return members // 2 + 1


def test_etcd_runs_from_the_image_with_an_odd_number_of_members():
    statefulset, container = etcd()
    binary, _ = m.command_line(container)
    assert binary == ETCD_BINARY
    members = statefulset["spec"]["replicas"]
    # An even count tolerates no more failures than the odd one below it.
    assert members >= 3 and members % 2 == 1, members
    # Members wait for each other before any is ready: one by one would
    # never finish.
    assert statefulset["spec"]["podManagementPolicy"] == "Parallel"


def test_etcd_service_is_headless_and_publishes_members_before_they_are_ready():
    statefulset, container = etcd()
    service = m.one("Service", statefulset["spec"]["serviceName"])
    assert service["spec"].get("clusterIP") == "None"
    assert service["spec"].get("publishNotReadyAddresses") is True
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    assert set(ports) == {"client", "peer"}
    for name, port in ports.items():
        assert port["targetPort"] == name
        assert port["port"] == m.named_port(container, name)


def test_initial_cluster_names_every_member_at_its_peer_url():
    statefulset, container = etcd()
    flags = m.flags(container)
    entries = [entry.split("=", 1) for entry in flags["initial-cluster"].split(",")]
    assert dict(entries) == {pod: member_url(statefulset, pod, "peer")
                             for pod in m.pod_names(statefulset)}
    assert len(entries) == statefulset["spec"]["replicas"]
    assert flags["initial-cluster-state"] == "new"
    assert flags["initial-cluster-token"]


def test_each_member_takes_its_name_and_urls_from_the_pod_name():
    statefulset, container = etcd()
    flags = m.flags(container)
    # The kubelet sets HOSTNAME to the pod name, strata-etcd-<ordinal>: the
    # name --initial-cluster gives the member.
    assert flags["name"] == "${HOSTNAME}"
    assert flags["initial-advertise-peer-urls"] == member_url(
        statefulset, "${HOSTNAME}", "peer")
    assert flags["advertise-client-urls"] == member_url(
        statefulset, "${HOSTNAME}", "client")
    # Listening on every address: the pod IP, which the names resolve to.
    for kind in ("client", "peer"):
        assert flags[f"listen-{kind}-urls"] == (
            f"http://0.0.0.0:{m.named_port(container, kind)}")


def test_cluster_file_names_every_etcd_member():
    statefulset, container = etcd()
    endpoints = m.cluster_file()["etcd"]["endpoints"]
    assert endpoints == m.pod_dns_names(
        statefulset, m.named_port(container, "client"))


def test_etcd_data_dir_is_on_its_volume_claim():
    statefulset, container = etcd()
    (template,) = statefulset["spec"]["volumeClaimTemplates"]
    assert template["spec"]["resources"]["requests"]["storage"]
    mounts = {v["name"]: v["mountPath"] for v in container["volumeMounts"]}
    claim_mount = mounts[template["metadata"]["name"]]
    data_dir = m.flags(container)["data-dir"]
    assert data_dir == claim_mount or data_dir.startswith(
        claim_mount.rstrip("/") + "/"), (
        f"--data-dir={data_dir} is not on the member's volume {claim_mount}")


def test_etcd_probes_check_health_on_the_client_port():
    _, container = etcd()
    found = m.probes(container)
    assert {"livenessProbe", "readinessProbe"} <= {kind for kind, _, _ in found}
    client = m.named_port(container, "client")
    for kind, handler, port in found:
        assert handler == "httpGet", kind
        assert container[kind]["httpGet"]["path"] == "/health", kind
        assert m.container_port(container, port) == client, kind


def test_etcd_metrics_annotations_point_at_the_client_port():
    statefulset, container = etcd()
    annotations = m.pod_template(statefulset)["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/path"] == "/metrics"
    assert int(annotations["prometheus.io/port"]) == m.named_port(
        container, "client")


def test_etcd_pdb_keeps_a_quorum():
    statefulset, _ = etcd()
    labels = m.pod_template(statefulset)["metadata"]["labels"]
    pdbs = [p for p in m.objects("PodDisruptionBudget")
            if m.selects(p["spec"]["selector"]["matchLabels"], labels)]
    assert [p["metadata"]["name"] for p in pdbs] == [m.ETCD]
    (pdb,) = pdbs
    assert m.workloads_selected_by(
        pdb["spec"]["selector"]["matchLabels"]) == [statefulset]
    members = statefulset["spec"]["replicas"]
    # Without a quorum no primary can renew its lease: pushes stop.
    assert 1 <= pdb["spec"]["maxUnavailable"] <= members - quorum(members)


def test_every_etcd_flag_exists_in_etcd_help():
    known = m.etcd_help_flags()
    if known is None:
        pytest.skip("etcd is not installed (Debian: etcd-server)")
    assert known, "etcd --help listed no flags"
    _, container = etcd()
    unknown = set(m.flags(container)) - known
    assert not unknown, f"etcd has no flags {sorted(unknown)}"
