"""Loads deploy/k8s/ and answers the questions the manifest tests ask.

Plain functions over the parsed YAML (dicts), so each test reads as the rule
it checks. Nothing here talks to a cluster.
"""

import importlib.util
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import time

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
K8S_DIR = REPO / "deploy" / "k8s"
DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"
WORKLOAD_KINDS = ("StatefulSet", "Deployment", "Job")
# The Strata daemons the manifests run; every other container (etcd's) has
# checks of its own.
STRATA_BINARIES = ("strata-server", "strata-serving", "strata-worker")
# The env variable that tells a shard StatefulSet's pods their shard index,
# and the pod label that carries it.
SHARD_INDEX_ENV = "STRATA_SHARD_INDEX"
SHARD_INDEX_LABEL = "strata.io/shard-index"
ETCD = "strata-etcd"


STRATA_LOCAL = REPO / "deploy" / "local" / "strata-local"


def strata_local(*args, timeout=180):
    """Runs deploy/local/strata-local with `args`; the CompletedProcess."""
    return subprocess.run([str(STRATA_LOCAL), *args], capture_output=True,
                          text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def bin_dir():
    return pathlib.Path(os.environ.get("STRATA_BIN_DIR", REPO / "build" / "bin"))


def manifest_files():
    """Every manifest under deploy/k8s/, subfolders included (jobs/)."""
    return sorted(p for p in K8S_DIR.rglob("*") if p.suffix in (".yaml", ".yml"))


def load_documents():
    """(path, document) for every non-empty YAML document."""
    documents = []
    for path in manifest_files():
        with open(path, encoding="utf-8") as f:
            for document in yaml.safe_load_all(f):
                if document is not None:
                    documents.append((path, document))
    return documents


def objects(kind=None):
    found = [d for _, d in load_documents()]
    return [d for d in found if kind is None or d["kind"] == kind]


def one(kind, name):
    matches = [o for o in objects(kind) if o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name}, found {len(matches)}"
    return matches[0]


def workloads():
    return [o for o in objects() if o["kind"] in WORKLOAD_KINDS]


def pod_template(workload):
    return workload["spec"]["template"]


def containers(workload):
    return pod_template(workload)["spec"]["containers"]


def every_container():
    """(workload, container) for every container of every workload, etcd's
    included: what the image, user, resources and volume checks cover."""
    return [(w, c) for w in workloads() for c in containers(w)]


def all_containers():
    """(workload, container) for every Strata daemon container (strata-server,
    strata-serving, strata-worker): the ones that read the cluster file."""
    return [(w, c) for w, c in every_container()
            if os.path.basename(command_line(c)[0]) in STRATA_BINARIES]


def selects(selector, labels):
    """True when a label selector (a plain map) matches the labels."""
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def workloads_selected_by(selector):
    return [w for w in workloads()
            if selects(selector, pod_template(w)["metadata"].get("labels", {}))]


def command_line(container):
    """(binary, [flag tokens]) of a container, looking through `sh -c`.

    A `sh -c "exec BINARY --flag ..."` entrypoint is split like the shell
    would (quotes removed, variables left as written).
    """
    argv = list(container.get("command", [])) + list(container.get("args", []))
    if len(argv) >= 3 and os.path.basename(argv[0]) == "sh" and argv[1] == "-c":
        argv = shlex.split(argv[2])
        assert argv[0] == "exec", (
            f"{container['name']}: a sh -c entrypoint must `exec` the daemon so "
            "that it is PID 1 and receives SIGTERM")
        argv = argv[1:]
    return argv[0], argv[1:]


def flags(container):
    """{flag name: value} of a container's command line."""
    _, tokens = command_line(container)
    parsed = {}
    for token in tokens:
        match = re.fullmatch(r"--([a-z0-9_-]+)=(.*)", token, re.S)
        assert match, f"{container['name']}: '{token}' is not --flag=value"
        parsed[match.group(1)] = match.group(2)
    return parsed


def env(container):
    """{name: literal value} of a container's env (valueFrom maps to None)."""
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def container_port(container, port):
    """The containerPort a probe or Service port (number or name) refers to."""
    for declared in container.get("ports", []):
        if port in (declared["containerPort"], declared.get("name")):
            return declared["containerPort"]
    return None


def named_port(container, name):
    ports = [p["containerPort"] for p in container.get("ports", [])
             if p.get("name") == name]
    assert len(ports) == 1, f"{container['name']}: no single port named {name}"
    return ports[0]


def probes(container):
    """(kind, handler name, port) of every probe of a container."""
    found = []
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        probe = container.get(kind)
        if probe is None:
            continue
        handler = next(h for h in ("grpc", "httpGet", "tcpSocket", "exec")
                       if h in probe)
        found.append((kind, handler, probe[handler].get("port")))
    return found


CLUSTER_CONFIG_MAP = "strata-cluster"
CLUSTER_KEY = "cluster.yaml"

# Which group of the cluster file each binary reads, and the flag that gives
# its member index (common/cluster_file.h, ClusterRole); a shard also names
# its replica.
ROLES = {"strata-server": "shards", "strata-serving": "serving",
         "strata-worker": "workers"}
INDEX_FLAGS = {"shards": "shard_index", "workers": "rank"}
REPLICA_FLAG = "replica_index"
# Flags a daemon derives from the file's addresses, counts and etcd section;
# a `flags` entry of the same name would silently override them.
DERIVED_FLAGS = {"shards": ("num_shards", "port", "etcd_endpoints", "replicas",
                            "replica_id", "advertise_address"),
                 "serving": ("shards", "port"),
                 "workers": ("shards", "num_workers")}


def cluster_file_text():
    """The text of the ConfigMap's cluster file, as mounted in the pods."""
    return one("ConfigMap", CLUSTER_CONFIG_MAP)["data"][CLUSTER_KEY]


def cluster_file(raw=False):
    """The ConfigMap's cluster file, parsed.

    raw: every scalar as the text written (YAML 1.1 types off), which is what
    the daemons see (yaml-cpp's Scalar()): `true` stays "true", not True.
    """
    loader = yaml.BaseLoader if raw else yaml.SafeLoader
    return yaml.load(cluster_file_text(), Loader=loader)  # noqa: S506


def role(container):
    """The cluster-file group ("shards", "serving", "workers") a container is."""
    binary, _ = command_line(container)
    return ROLES[os.path.basename(binary)]


def member_count(group, cluster=None):
    cluster = cluster or cluster_file(raw=True)
    if group == "workers":
        return int(cluster["workers"]["count"])
    return len(cluster[group]["addresses"])


def shard_replicas(cluster=None):
    """[[replica address, ...] per shard index] of the cluster file: an entry
    that is one address is a shard of one replica."""
    cluster = cluster or cluster_file(raw=True)
    return [entry if isinstance(entry, list) else [entry]
            for entry in cluster["shards"]["addresses"]]


def _flag_text(value):
    if isinstance(value, list):
        return ",".join(value)
    return "" if value is None else value


def file_flags(group, index, replica=0, cluster=None):
    """[(name, value)] member `index` (replica `replica` of a shard) of
    `group` gets from the cluster file.

    Mirrors ClusterFlagsFor (common/cluster_file.cc): the derived flags (for
    a shard with an etcd section, its replica group's too), then the group's
    flags, then member_flags[index], with "{index}" and "{replica}" replaced.
    Clients get a shard as its replicas joined by '|'. test_entrypoints.py
    checks this against what the binaries log.
    """
    cluster = cluster or cluster_file(raw=True)
    replicas = shard_replicas(cluster)
    shards = ",".join("|".join(members) for members in replicas)
    section = cluster[group]
    if group == "shards":
        address = replicas[index][replica]
        out = [("num_shards", str(len(replicas))),
               ("port", address.rpartition(":")[2])]
        endpoints = (cluster.get("etcd") or {}).get("endpoints")
        if endpoints:
            out += [("etcd_endpoints", ",".join(endpoints)),
                    ("replicas", str(len(replicas[index]))),
                    ("replica_id", f"r{replica}"),
                    ("advertise_address", address)]
    elif group == "serving":
        out = [("shards", shards),
               ("port", section["addresses"][index].rpartition(":")[2])]
    else:
        out = [("shards", shards), ("num_workers", str(section["count"]))]
    members = section.get("member_flags") or []
    for flags in [section.get("flags") or {}] + (
            [members[index] or {}] if index < len(members) else []):
        for name, value in flags.items():
            out.append((name, _flag_text(value)
                        .replace("{index}", str(index))
                        .replace("{replica}", str(replica))))
    return out


def effective_flags(container, index=0, replica=0):
    """{flag: value} a container's daemon runs with as member `index`
    (replica `replica` of a shard): the cluster file's flags (when it passes
    --cluster_file), overridden by its command line (absl keeps the last
    value). Variables stay as written."""
    command = flags(container)
    merged = {}
    if "cluster_file" in command:
        merged.update(file_flags(role(container), index, replica))
    merged.update(command)
    return merged


def shard_statefulsets():
    """The StatefulSets of strata-server pods, in shard-index order."""
    found = [w for w, c in all_containers()
             if w["kind"] == "StatefulSet" and role(c) == "shards"]
    return sorted(found, key=shard_index)


def shard_index(workload):
    """The shard index a shard StatefulSet's pods are (its container's
    STRATA_SHARD_INDEX)."""
    (container,) = containers(workload)
    return int(env(container)[SHARD_INDEX_ENV])


def pod_names(statefulset):
    """The pods of a StatefulSet, by ordinal: <name>-<ordinal>."""
    return [f"{statefulset['metadata']['name']}-{ordinal}"
            for ordinal in range(statefulset["spec"]["replicas"])]


def pod_host(statefulset, pod):
    """The DNS name of a StatefulSet's pod through its headless Service."""
    return (f"{pod}.{statefulset['spec']['serviceName']}."
            f"{statefulset['metadata']['namespace']}.svc.cluster.local")


def pod_dns_names(statefulset, port):
    """host:port of each pod of a StatefulSet, by ordinal."""
    return [f"{pod_host(statefulset, pod)}:{port}"
            for pod in pod_names(statefulset)]


def members(workload, container):
    """(index, replica) of every member a container's pods are: a shard
    StatefulSet's pods are the replicas of its shard index by ordinal, the
    workers' pods ranks 0..count-1 (replica 0), serving is (0, 0)."""
    group = role(container)
    if group == "shards":
        return [(shard_index(workload), replica)
                for replica in range(workload["spec"]["replicas"])]
    if group in INDEX_FLAGS:
        return [(index, 0) for index in range(member_count(group))]
    return [(0, 0)]


def member_flags(workload, container):
    """(where, effective flags) of every member a container's pods are;
    `where` names the pod and container."""
    return [(f"{pod_name(workload, index, replica)}/{container['name']}",
             effective_flags(container, index, replica))
            for index, replica in members(workload, container)]


def grpc_port(statefulset):
    """The containerPort named grpc of a StatefulSet's one container."""
    (container,) = containers(statefulset)
    return named_port(container, "grpc")


def pod_name(workload, index, replica):
    """The name of the pod that is member (index, replica) of a workload."""
    if workload["kind"] == "StatefulSet":
        return f"{workload['metadata']['name']}-{replica}"
    if workload["kind"] == "Job":
        return f"{workload['metadata']['name']}-{index}"
    return workload["metadata"]["name"]


def variables(value):
    """Names of the $(VAR) (Kubernetes) and ${VAR...} (shell) references."""
    return (set(re.findall(r"\$\((\w+)\)", value)),
            set(re.findall(r"\$\{(\w+)", value)))


_HELP_FLAG = re.compile(r"^\s+--([a-z0-9_]+) \(", re.M)
_help_cache = {}


def etcd_binary():
    """The local etcd (Debian's etcd-server, as in the image), or None."""
    found = shutil.which("etcd")
    if found is None and os.path.isfile("/usr/bin/etcd"):
        found = "/usr/bin/etcd"
    return found


_ETCD_HELP_FLAG = re.compile(r"^\s+--([a-z0-9-]+)", re.M)


def etcd_help_flags():
    """Flags listed by the local `etcd --help`, or None without etcd."""
    if "etcd" not in _help_cache:
        binary = etcd_binary()
        if binary is None:
            _help_cache["etcd"] = None
        else:
            result = subprocess.run([binary, "--help"], capture_output=True,
                                    text=True, timeout=30, check=False)
            _help_cache["etcd"] = set(
                _ETCD_HELP_FLAG.findall(result.stdout + result.stderr))
    return _help_cache["etcd"]


def help_flags(binary):
    """Flags listed by `binary --help` from STRATA_BIN_DIR, or None if absent."""
    name = os.path.basename(binary)
    if name not in _help_cache:
        path = bin_dir() / name
        if not path.is_file():
            _help_cache[name] = None
        else:
            # The text is what matters (--help exits 0 since it answers).
            result = subprocess.run([str(path), "--help"], capture_output=True,
                                    text=True, timeout=30, check=False)
            _help_cache[name] = set(_HELP_FLAG.findall(result.stdout + result.stderr))
    return _help_cache[name]


def wait_until(predicate, timeout_s, what):
    """Polls `predicate` until it returns a true value, which it returns;
    fails the test naming `what` after `timeout_s` seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s"
        time.sleep(0.05)


def free_ports(count, host="127.0.0.1"):
    """`count` distinct ports on `host` nothing listens on, drawn below the
    kernel's ephemeral range (bench/free_port.py)."""
    spec = importlib.util.spec_from_file_location(
        "strata_bench_free_port", REPO / "bench" / "free_port.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ports = []
    while len(ports) < count:
        port = module.free_port(host)
        if port not in ports:
            ports.append(port)
    return ports
