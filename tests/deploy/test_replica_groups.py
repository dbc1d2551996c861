"""Checks of the shards' replica groups in deploy/k8s/20-ps.yaml.

Each shard index is one StatefulSet strata-ps-<index> whose pods are the
replicas of that index, coordinated through etcd: which member a pod is comes
from its StatefulSet (STRATA_SHARD_INDEX) and its ordinal, the copies must
not drift apart, a group's replicas spread over nodes, and a drain keeps each
group's write quorum.
"""

import copy

import k8s_manifests as m

NAMESPACE = "strata"
PS = "strata-ps"


def test_shard_index_comes_from_the_statefulset_and_replica_from_the_ordinal():
    statefulsets = m.shard_statefulsets()
    for statefulset in statefulsets:
        (container,) = m.containers(statefulset)
        index = m.shard_index(statefulset)
        labels = m.pod_template(statefulset)["metadata"]["labels"]
        assert labels[m.SHARD_INDEX_LABEL] == str(index)
        command = m.flags(container)
        assert command["shard_index"] == "${" + m.SHARD_INDEX_ENV + "}"
        # Pod names are <statefulset>-<ordinal>; the shell takes the part
        # after the last '-' of $HOSTNAME.
        assert command["replica_index"] == "${HOSTNAME##*-}"
        pods = m.pod_names(statefulset)
        assert len(pods) == len(m.members(statefulset, container))
        for pod, (member_index, replica) in zip(
                pods, m.members(statefulset, container)):
            assert member_index == index
            assert pod.rpartition("-")[2] == str(replica)
            flags = m.effective_flags(container, index, replica)
            # --num_shards is the number of shard indexes: one StatefulSet
            # each.
            assert flags["num_shards"] == str(len(statefulsets)), pod
            assert flags["replicas"] == str(statefulset["spec"]["replicas"]), pod
            assert flags["replica_id"] == f"r{replica}", pod
            # The others and the clients reach it by its pod's DNS name.
            assert flags["advertise_address"] == (
                f"{pod}.{PS}.{NAMESPACE}.svc.cluster.local:"
                f"{m.grpc_port(statefulset)}")


def test_shards_replicate_through_etcd():
    for statefulset in m.shard_statefulsets():
        (container,) = m.containers(statefulset)
        # Replicated means at least 2; a group has at most 3.
        assert 2 <= statefulset["spec"]["replicas"] <= 3
        for where, flags in m.member_flags(statefulset, container):
            assert flags["etcd_endpoints"], where
            assert flags["replication"] == "replicated", where
            # Replicated shards refuse periodic durability.
            assert flags["durability"] in ("sync", "group"), where
            assert int(flags["lease_ttl_ms"]) >= 1000, where


def with_index_as_placeholder(statefulset):
    """The StatefulSet with its shard index (name, index labels and
    STRATA_SHARD_INDEX) replaced by "{index}"; asserts each was the index."""
    index = str(m.shard_index(statefulset))
    seen = []

    def replaced(value):
        if isinstance(value, list):
            return [replaced(v) for v in value]
        if not isinstance(value, dict):
            return value
        out = {}
        for key, child in value.items():
            if key == m.SHARD_INDEX_LABEL:
                seen.append(child)
                child = "{index}"
            out[key] = replaced(child)
        if out.get("name") == m.SHARD_INDEX_ENV and "value" in out:
            seen.append(out["value"])
            out["value"] = "{index}"
        return out

    result = replaced(copy.deepcopy(statefulset))
    assert result["metadata"]["name"] == f"{PS}-{index}"
    result["metadata"]["name"] = f"{PS}-{{index}}"
    assert seen and set(seen) == {index}, (
        f"{PS}-{index} names other indexes: {sorted(set(seen))}")
    return result


def test_shard_statefulsets_differ_only_in_their_index():
    # Each shard index is a copy of strata-ps-0; a change made to one copy
    # only (a probe, a resource, R) would make the groups behave differently.
    statefulsets = m.shard_statefulsets()
    first = with_index_as_placeholder(statefulsets[0])
    for statefulset in statefulsets[1:]:
        assert with_index_as_placeholder(statefulset) == first, (
            f"{statefulset['metadata']['name']} differs from "
            f"{statefulsets[0]['metadata']['name']} in more than its index")


def test_replicas_of_a_group_prefer_different_nodes():
    for statefulset in m.objects("StatefulSet"):
        name = statefulset["metadata"]["name"]
        anti = m.pod_template(statefulset)["spec"]["affinity"]["podAntiAffinity"]
        terms = [t["podAffinityTerm"] for t in anti.get(
            "preferredDuringSchedulingIgnoredDuringExecution", [])]
        terms += anti.get("requiredDuringSchedulingIgnoredDuringExecution", [])
        spreading = [t for t in terms
                     if t["topologyKey"] == "kubernetes.io/hostname"
                     and m.workloads_selected_by(
                         t["labelSelector"]["matchLabels"]) == [statefulset]]
        assert spreading, (
            f"{name}: no anti-affinity over kubernetes.io/hostname among its "
            "own pods (and only those)")


def write_quorum(flags):
    """W of a replica group: --write_quorum, 0 (the default) a majority."""
    replicas = int(flags["replicas"])
    return int(flags.get("write_quorum", "0")) or replicas // 2 + 1


def test_each_shard_index_has_a_pdb_that_keeps_its_write_quorum():
    for pdb in m.objects("PodDisruptionBudget"):
        assert m.workloads_selected_by(pdb["spec"]["selector"]["matchLabels"]), (
            f"PodDisruptionBudget {pdb['metadata']['name']} selects no pods")
    for statefulset in m.shard_statefulsets():
        name = statefulset["metadata"]["name"]
        labels = m.pod_template(statefulset)["metadata"]["labels"]
        pdbs = [p for p in m.objects("PodDisruptionBudget")
                if m.selects(p["spec"]["selector"]["matchLabels"], labels)]
        assert [p["metadata"]["name"] for p in pdbs] == [name]
        (pdb,) = pdbs
        assert m.workloads_selected_by(
            pdb["spec"]["selector"]["matchLabels"]) == [statefulset]
        # A drain may take down replicas while W of R stay up: pushes to the
        # index keep being acknowledged.
        (container,) = m.containers(statefulset)
        for where, flags in m.member_flags(statefulset, container):
            replicas = statefulset["spec"]["replicas"]
            unavailable = pdb["spec"]["maxUnavailable"]
            assert 1 <= unavailable <= replicas - write_quorum(flags), where
