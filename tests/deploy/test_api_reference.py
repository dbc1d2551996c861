"""docs/API.md, the gRPC API reference, is generated from the comments of
proto/*.proto (tools/proto_reference.py): it must be current, its links must
land, and every client-facing method must say what it does."""

import pathlib
import re
import subprocess
import sys

import pytest

pytest.importorskip("grpc_tools", reason="grpcio-tools is not installed")

REPO = pathlib.Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "proto_reference.py"
REFERENCE = REPO / "docs" / "API.md"


def run_tool(*args):
    return subprocess.run([sys.executable, str(TOOL), *args],
                          capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)


def test_committed_reference_is_what_the_protos_give():
    done = run_tool("--check")
    assert done.returncode == 0, done.stderr


def test_check_fails_on_a_stale_reference(tmp_path):
    stale = tmp_path / "API.md"
    stale.write_text(REFERENCE.read_text().replace("Pull", "Fetch", 1))
    done = run_tool("--check", f"--output={stale}")
    assert done.returncode == 1
    assert "out of date" in done.stderr


def test_every_link_has_its_anchor():
    text = REFERENCE.read_text()
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', text))
    links = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert links, "no links"
    assert links <= anchors, sorted(links - anchors)


def test_every_client_facing_method_is_documented():
    text = REFERENCE.read_text()
    for proto, services in (("strata.proto", ("ParameterServer", "Rendezvous",
                                              "ServingService")),
                            ("replication.proto", ("Replication",))):
        source = (REPO / "proto" / proto).read_text()
        for service in services:
            body = re.search(r"service %s \{(.*?)\n\}" % service, source,
                             re.S).group(1)
            methods = re.findall(r"rpc (\w+)\(", body)
            assert methods, service
            for method in methods:
                section = text.split(f"#### `{method}`\n", 1)
                assert len(section) == 2, f"{service}.{method} missing"
                first_lines = section[1].split("\n####", 1)[0]
                assert "(No comment.)" not in first_lines, method
    assert "| `client_id` | 3 | `string` |" in text
