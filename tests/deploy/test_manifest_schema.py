"""Schema checks of deploy/k8s/ that need no cluster.

kubectl cannot validate offline: `apply --dry-run=client` still asks the API
server which kinds exist (discovery), and `--validate` fetches the OpenAPI
schema from it. So the field-level check here uses the models of the
Kubernetes Python client: every manifest is decoded into its typed object and
encoded back, and any field the model does not know (a typo such as
`readinesProbe`, or a field nested at the wrong level) is missing from the
result. kubectl is still run where it works offline (`--local`), and its
server-side dry run is tried and skipped with the reason when it cannot work.
"""

import os
import shutil
import subprocess

import pytest

import k8s_manifests as m


def leaves(value, path=()):
    """(path, scalar) pairs of a nested dict/list."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield from leaves(child, path + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from leaves(child, path + (index,))
    else:
        yield path, value


def lookup(value, path):
    for key in path:
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and isinstance(key, int) and key < len(value):
            value = value[key]
        else:
            return KeyError
    return value


def model_name(document):
    version = document["apiVersion"].split("/")[-1]
    return version[0].upper() + version[1:] + document["kind"]


@pytest.mark.parametrize(
    "document", m.objects(),
    ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_manifest_round_trips_through_the_kubernetes_models(document):
    kubernetes = pytest.importorskip(
        "kubernetes", reason="the kubernetes Python client is not installed "
        "(tests/deploy/run_tests.sh installs it)")
    client = kubernetes.client.ApiClient()
    name = model_name(document)
    assert hasattr(kubernetes.client, name), f"no model {name}"
    # The client's own decoder (what it uses for API responses); private, but
    # the public deserialize() only takes an HTTP response.
    decoded = client._ApiClient__deserialize(document, name)  # noqa: SLF001
    encoded = client.sanitize_for_serialization(decoded)
    for path, value in leaves(document):
        if path[:2] == ("data", "cluster.yaml"):
            continue  # ConfigMap data is opaque text
        round_tripped = lookup(encoded, path)
        assert round_tripped is not KeyError, (
            f"{'.'.join(map(str, path))} is not a field of {name}")
        assert round_tripped == value or str(round_tripped) == str(value), (
            f"{'.'.join(map(str, path))}: {value!r} became {round_tripped!r}")


def kubectl():
    path = os.environ.get("KUBECTL") or shutil.which("kubectl")
    if path is None:
        pytest.skip("kubectl is not installed (Debian: kubernetes-client)")
    return path


def run_offline(arguments, tmp_path):
    # An empty kubeconfig and a closed local port: never a developer's real
    # cluster, never the network.
    config = tmp_path / "kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\n")
    return subprocess.run(
        [kubectl(), "--kubeconfig", str(config), "--server", "http://127.0.0.1:9",
         *arguments], capture_output=True, text=True, timeout=120, check=False)


def test_kubectl_decodes_every_manifest_offline(tmp_path):
    result = run_offline(["label", "--local", "--dry-run=client", "-o", "name",
                          "-R", "-f", str(m.K8S_DIR), "strata.dev/checked=true"],
                         tmp_path)
    assert result.returncode == 0, result.stderr
    # kubectl prints kind.group/name, e.g. statefulset.apps/strata-ps.
    printed = set()
    for line in result.stdout.split():
        kind_and_group, name = line.split("/", 1)
        printed.add((kind_and_group.split(".")[0], name))
    assert printed == {(o["kind"].lower(), o["metadata"]["name"])
                       for o in m.objects()}


def test_kubectl_apply_dry_run_client(tmp_path):
    result = run_offline(["apply", "--dry-run=client", "--validate=false",
                          "-R", "-f", str(m.K8S_DIR)], tmp_path)
    output = result.stdout + result.stderr
    if result.returncode != 0 and ("unable to recognize" in output
                                   or "connection refused" in output):
        pytest.skip("kubectl apply --dry-run=client needs an API server: it "
                    "maps each kind through the server's discovery API, and no "
                    "cluster is reachable offline (kubectl label --local and "
                    "the model round trip cover parsing and fields instead)")
    assert result.returncode == 0, output
