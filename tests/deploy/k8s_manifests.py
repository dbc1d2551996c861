"""Loads deploy/k8s/ and answers the questions the manifest tests ask.

Plain functions over the parsed YAML (dicts), so each test reads as the rule
it checks. Nothing here talks to a cluster.
"""

import os
import pathlib
import re
import shlex
import socket
import subprocess

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
K8S_DIR = REPO / "deploy" / "k8s"
DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"
WORKLOAD_KINDS = ("StatefulSet", "Deployment", "Job")


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


def all_containers():
    """(workload, container) for every container of every workload."""
    return [(w, c) for w in workloads() for c in containers(w)]


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
        match = re.fullmatch(r"--([a-z0-9_]+)=(.*)", token, re.S)
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
# its member index (common/cluster_file.h, ClusterRole).
ROLES = {"strata-server": "shards", "strata-serving": "serving",
         "strata-worker": "workers"}
INDEX_FLAGS = {"shards": "shard_index", "workers": "rank"}
# Flags a daemon derives from the file's addresses and counts; a `flags`
# entry of the same name would silently override them.
DERIVED_FLAGS = {"shards": ("num_shards", "port"), "serving": ("shards", "port"),
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


def _flag_text(value):
    if isinstance(value, list):
        return ",".join(value)
    return "" if value is None else value


def file_flags(group, index, cluster=None):
    """[(name, value)] member `index` of `group` gets from the cluster file.

    Mirrors ClusterFlagsFor (common/cluster_file.cc): the derived flags, then
    the group's flags, then member_flags[index], with "{index}" replaced.
    test_entrypoints.py checks this against what the binaries log.
    """
    cluster = cluster or cluster_file(raw=True)
    shards = ",".join(cluster["shards"]["addresses"])
    section = cluster[group]
    if group == "shards":
        out = [("num_shards", str(len(section["addresses"]))),
               ("port", section["addresses"][index].rpartition(":")[2])]
    elif group == "serving":
        out = [("shards", shards),
               ("port", section["addresses"][index].rpartition(":")[2])]
    else:
        out = [("shards", shards), ("num_workers", str(section["count"]))]
    members = section.get("member_flags") or []
    for flags in [section.get("flags") or {}] + (
            [members[index] or {}] if index < len(members) else []):
        for name, value in flags.items():
            out.append((name, _flag_text(value).replace("{index}", str(index))))
    return out


def effective_flags(container, index=0):
    """{flag: value} a container's daemon runs with as member `index`: the
    cluster file's flags (when it passes --cluster_file), overridden by its
    command line (absl keeps the last value). Variables stay as written."""
    command = flags(container)
    merged = {}
    if "cluster_file" in command:
        merged.update(file_flags(role(container), index))
    merged.update(command)
    return merged


def member_indices(container):
    """Every member index a container's pods take (serving: just 0)."""
    group = role(container)
    return range(member_count(group)) if group in INDEX_FLAGS else range(1)


def variables(value):
    """Names of the $(VAR) (Kubernetes) and ${VAR...} (shell) references."""
    return (set(re.findall(r"\$\((\w+)\)", value)),
            set(re.findall(r"\$\{(\w+)", value)))


_HELP_FLAG = re.compile(r"^\s+--([a-z0-9_]+) \(", re.M)
_help_cache = {}


def help_flags(binary):
    """Flags listed by `binary --help` from STRATA_BIN_DIR, or None if absent."""
    name = os.path.basename(binary)
    if name not in _help_cache:
        path = bin_dir() / name
        if not path.is_file():
            _help_cache[name] = None
        else:
            # absl's --help exits 1 by design; the text is what matters.
            result = subprocess.run([str(path), "--help"], capture_output=True,
                                    text=True, timeout=30, check=False)
            _help_cache[name] = set(_HELP_FLAG.findall(result.stdout + result.stderr))
    return _help_cache[name]


def free_ports(count, host="127.0.0.1"):
    """`count` distinct ports nothing listens on (all bound at once, then
    released)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
