"""The test cluster's own helpers: free ports and etcd's start."""

import socket

import strata_cluster


def _ephemeral_range():
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low, high = f.read().split()
    return int(low), int(high)


def test_free_ports_are_bindable_and_outside_the_ephemeral_range():
    low, high = _ephemeral_range()
    drawn = set()
    for _ in range(20):
        port = strata_cluster.free_port()
        assert not low <= port <= high, port
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
        drawn.add(port)
    assert len(drawn) > 10, drawn


def test_etcd_starts_on_other_ports_when_its_port_is_taken(tmp_path,
                                                           monkeypatch):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        draws = [taken]
        real_free_port = strata_cluster.free_port
        monkeypatch.setattr(
            strata_cluster, "free_port",
            lambda: draws.pop() if draws else real_free_port())
        etcd = strata_cluster.Etcd(tmp_path)
        try:
            endpoint = etcd.wait_ready()
            assert endpoint != f"127.0.0.1:{taken}"
            assert etcd.attempt == 2
            log = (tmp_path / "etcd.1.log").read_text(errors="replace")
            assert "address already in use" in log
        finally:
            etcd.stop()
