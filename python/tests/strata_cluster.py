"""Starting and stopping the processes of a local Strata cluster in tests.

Binaries come from $STRATA_BIN_DIR, else <repo>/build/bin. Every process is
started here, waited for with deadlines, stopped (SIGTERM, then SIGKILL) only
by its own pid, and its temporary directory removed. A missing binary fails
the tests that need it (it is never a silent skip).
"""

import os
import importlib.util
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

import grpc
import pytest

from strata._proto import health_pb2, health_pb2_grpc

REPO = pathlib.Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT = 30.0


def bin_dir():
    return pathlib.Path(os.environ.get("STRATA_BIN_DIR") or REPO / "build" / "bin")


def binary(name):
    path = bin_dir() / name
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing: build it (make -C build {name}) or "
                    "point STRATA_BIN_DIR at the directory holding it")
    return str(path)


class Daemon:
    """One process started by the tests, with its log and port file."""

    def __init__(self, name, argv, workdir):
        self.name = name
        self.port_file = workdir / f"{name}.port"
        self.log_path = workdir / f"{name}.log"
        self.argv = argv + [f"--port_file={self.port_file}"]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log,
                                         stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        self.address = None

    def log_tail(self, lines=30):
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def fail(self, why):
        pytest.fail(f"{self.name}: {why}\ncommand: {' '.join(self.argv)}\n"
                    f"log:\n{self.log_tail()}")

    def wait_ready(self, timeout=STARTUP_TIMEOUT):
        """Waits for the port file, then for grpc.health.v1 SERVING."""
        deadline = time.monotonic() + timeout
        while self.address is None:
            if self.proc.poll() is not None:
                self.fail(f"exited with {self.proc.returncode} before serving")
            try:
                port = int(self.port_file.read_text().strip())
                self.address = f"127.0.0.1:{port}"
            except (OSError, ValueError):
                if time.monotonic() > deadline:
                    self.fail(f"no port in {self.port_file} after {timeout}s")
                time.sleep(0.05)
        with grpc.insecure_channel(self.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.fail(f"not SERVING at {self.address} after {timeout}s")
                if self.proc.poll() is not None:
                    self.fail(f"exited with {self.proc.returncode}")
                try:
                    answer = stub.Check(health_pb2.HealthCheckRequest(),
                                        timeout=min(remaining, 2.0))
                    if answer.status == health_pb2.HealthCheckResponse.SERVING:
                        return self.address
                except grpc.RpcError:
                    pass
                time.sleep(0.05)

    def stop(self, timeout=10.0):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)


class Etcd:
    """A one-member etcd (Debian's etcd-server) on free loopback ports."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.attempt = 0
        self._launch()

    def _launch(self):
        """Starts etcd on a fresh pair of ports, with its own data dir."""
        self.attempt += 1
        self.client_port, peer_port = free_port(), free_port()
        self.endpoint = f"127.0.0.1:{self.client_port}"
        self.log_path = self.workdir / f"etcd.{self.attempt}.log"
        client = f"http://{self.endpoint}"
        peer = f"http://127.0.0.1:{peer_port}"
        self.argv = [
            shutil.which("etcd") or "etcd", "--name=test",
            f"--data-dir={self.workdir / f'etcd.{self.attempt}'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}", f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=test={peer}"]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log,
                                         stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)

    def wait_ready(self, timeout=STARTUP_TIMEOUT, attempts=3):
        """Waits until etcd's /health says true; returns host:port.

        A port found free can be taken before etcd binds it; etcd then exits
        at once and is started again on fresh ports (up to `attempts` runs).
        """
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                log = self.log_path.read_text(errors="replace")
                if ("address already in use" in log
                        and self.attempt < attempts):
                    self._launch()
                    continue
                pytest.fail(f"etcd exited with {self.proc.returncode}:\n"
                            f"{log[-3000:]}")
            try:
                with urllib.request.urlopen(
                        f"http://{self.endpoint}/health", timeout=2) as answer:
                    if b'"true"' in answer.read():
                        return self.endpoint
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"etcd not healthy at {self.endpoint} after "
                            f"{timeout}s")
            time.sleep(0.05)

    def stop(self, timeout=10.0):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)


class Cluster:
    """Processes started by a fixture; stop() ends them and removes workdir."""

    def __init__(self, prefix):
        self.workdir = pathlib.Path(tempfile.mkdtemp(prefix=prefix))
        self.daemons = []

    def start(self, name, argv):
        daemon = Daemon(name, argv, self.workdir)
        self.daemons.append(daemon)
        return daemon

    def start_shard(self, name, *flags):
        """A strata-server on a free loopback port, its data in workdir/name,
        logging warnings only; `flags` are added to its command line."""
        return self.start(name, [
            binary("strata-server"), "--port=0", "--host=127.0.0.1",
            f"--data_dir={self.workdir / name}", "--log_level=warning",
            *flags])

    def start_shards(self, count=2):
        """`count` shards of one cluster (shard0.., their index and count
        set); returns them once each serves."""
        shards = [self.start_shard(f"shard{i}", f"--shard_index={i}",
                                   f"--num_shards={count}")
                  for i in range(count)]
        for shard in shards:
            shard.wait_ready()
        return shards

    def start_etcd(self):
        """An etcd for replicated shards; returns its host:port once healthy."""
        etcd = Etcd(self.workdir)
        self.daemons.append(etcd)
        return etcd.wait_ready()

    def stop(self):
        for daemon in reversed(self.daemons):
            daemon.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _load_free_port():
    """bench/free_port.py's free_port (one copy for the tests and benches)."""
    spec = importlib.util.spec_from_file_location(
        "strata_bench_free_port", REPO / "bench" / "free_port.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.free_port


# A port nothing listens on, drawn below the kernel's ephemeral range so
# that no outgoing connection takes it before the daemon binds it.
free_port = _load_free_port()
