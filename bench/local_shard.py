"""One strata-server for a benchmark script that needs a shard of its own:
a free port, a temporary data directory, --durability=periodic (as training
shards run)."""

import os
import pathlib
import subprocess
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


class LocalShard:
    """Starts strata-server from `bin_dir` (default $STRATA_BIN_DIR, else
    build/bin) and waits for its port; SystemExit when it does not start
    within 30 s. `address` is host:port, `proc` the process; stop() ends it
    and removes its data."""

    def __init__(self, bin_dir=None):
        bin_dir = pathlib.Path(bin_dir or os.environ.get("STRATA_BIN_DIR") or
                               REPO / "build" / "bin")
        self.dir = tempfile.TemporaryDirectory(prefix="strata-bench-shard-")
        port_file = pathlib.Path(self.dir.name) / "port"
        self.proc = subprocess.Popen(
            [str(bin_dir / "strata-server"), "--port=0", "--host=127.0.0.1",
             f"--port_file={port_file}", "--durability=periodic",
             f"--data_dir={self.dir.name}/data", "--log_level=warning"],
            stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit("bench: strata-server did not start")
            time.sleep(0.05)
        self.address = f"127.0.0.1:{port_file.read_text().strip()}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(30)
        self.dir.cleanup()
