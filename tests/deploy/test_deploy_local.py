"""deploy/local/strata-local runs the sample cluster file on this machine.

The sample deploy/local/cluster.yaml (2 shards, a serving PS, 2 workers) runs
with only its ports swapped for free ones and a small synthetic data set: the
cluster starts, reports its status, the workers train to completion, and stop
leaves no process behind, each having exited 0.
"""

import json
import os
import subprocess
from pathlib import Path

import yaml

import k8s_manifests as m

REPO = Path(__file__).resolve().parents[2]
STRATA_LOCAL = m.STRATA_LOCAL
local = m.strata_local
SAMPLE = REPO / "deploy" / "local" / "cluster.yaml"




def sample_with_free_ports():
    cluster = yaml.safe_load(SAMPLE.read_text())
    ports = m.free_ports(6)
    cluster["shards"]["addresses"] = [f"127.0.0.1:{p}" for p in ports[:2]]
    cluster["shards"]["member_flags"] = [{"metrics_port": p}
                                         for p in ports[2:4]]
    cluster["serving"]["addresses"] = [f"127.0.0.1:{ports[4]}"]
    cluster["serving"]["flags"]["metrics_port"] = ports[5]
    return cluster


def pids_of(run_dir):
    state = json.loads((run_dir / "state.json").read_text())
    return [state["supervisor_pid"]] + [p["pid"] for p in state["processes"]
                                        if "pid" in p]


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def write_data(run_dir, rows):
    datagen = m.bin_dir() / "strata-datagen"
    vocab = ",".join(["10"] * 26)
    subprocess.run([str(datagen), f"--out={run_dir / 'data' / 'train'}",
                    f"--rows={rows}", "--holdout_rows=2000",
                    f"--vocab_sizes={vocab}", "--tail_rank=30"],
                   check=True, capture_output=True, timeout=120)


def test_sample_cluster_starts_reports_trains_and_stops(run_dir, tmp_path):
    write_data(run_dir, rows=20000)
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text(yaml.safe_dump(sample_with_free_ports()))
    at = f"--run_dir={run_dir}"

    started = local("start", str(cluster_file), at,
                    f"--bin_dir={m.bin_dir()}")
    assert started.returncode == 0, started.stderr + started.stdout
    for name in ("shard-0", "shard-1", "serving", "worker-0", "worker-1"):
        assert name in started.stdout

    status = local("status", at)
    assert status.returncode == 0, status.stderr + status.stdout
    assert "2/2 shards up" in status.stdout, status.stdout
    assert "mode=follow" in status.stdout, status.stdout

    waited = local("wait", at, "--timeout_s=150")
    assert waited.returncode == 0, waited.stderr + waited.stdout
    assert waited.stdout.split("\n")[:2] == ["worker-0 exited 0",
                                             "worker-1 exited 0"]
    result = json.loads((run_dir / "result-0.json").read_text())
    assert result["examples"] == 20000
    assert result["eval_auc"] > 0.65, result

    # Rank 0's progress CSV ends with the final evaluation, and stratactl
    # plot draws it.
    lines = (run_dir / "progress.csv").read_text().splitlines()
    assert lines[0] == ("step,epoch,examples,seconds,samples_per_second,"
                        "loss,eval_auc,eval_log_loss")
    last = dict(zip(lines[0].split(","), lines[-1].split(",")))
    assert int(last["examples"]) == result["examples"]
    assert abs(float(last["eval_auc"]) - result["eval_auc"]) < 1e-5, last
    steps = [int(line.split(",")[0]) for line in lines[1:]]
    assert steps == sorted(steps) and steps[-1] == result["steps"]
    curve = run_dir / "curve.png"
    plotted = subprocess.run(
        [str(m.bin_dir() / "stratactl"), "plot", str(run_dir), "-o",
         str(curve)], capture_output=True, text=True, timeout=120)
    assert plotted.returncode == 0, plotted.stderr
    assert curve.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert curve.stat().st_size > 10000

    # Every process logs to its own file in one folder, one line per event.
    logs = sorted(p.name for p in (run_dir / "logs").iterdir())
    assert logs == ["serving.log", "shard-0.log", "shard-1.log",
                    "worker-0.log", "worker-1.log"]
    assert "flags from cluster file" in (run_dir / "logs" /
                                         "shard-1.log").read_text()

    pids = pids_of(run_dir)
    stopped = local("stop", at)
    assert stopped.returncode == 0, stopped.stderr + stopped.stdout
    lines = [line.split() for line in stopped.stdout.splitlines()[:5]]
    assert lines == [[name, "exited", "0"] for name in
                     ("shard-0", "shard-1", "serving", "worker-0",
                      "worker-1")]
    assert [pid for pid in pids if alive(pid)] == []

    after = local("status", at)
    assert after.returncode == 1
    assert "stopped" in after.stdout


def test_a_shard_that_cannot_start_fails_start_and_leaves_nothing(
        run_dir, tmp_path):
    cluster = sample_with_free_ports()
    cluster["shards"]["flags"]["durability"] = "sometimes"
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text(yaml.safe_dump(cluster))

    started = local("start", str(cluster_file), f"--run_dir={run_dir}",
                    f"--bin_dir={m.bin_dir()}")
    assert started.returncode == 1
    assert "shard-0 exited with 2 while starting" in started.stderr
    assert "durability" in (run_dir / "logs" / "shard-0.log").read_text()
    assert [pid for pid in pids_of(run_dir) if alive(pid)] == []


def test_bad_cluster_file_and_missing_cluster_are_usage_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nshards: [\n")
    result = local("start", str(bad), f"--run_dir={tmp_path / 'run'}")
    assert result.returncode == 2
    assert "bad.yaml" in result.stderr
    result = local("status", f"--run_dir={tmp_path / 'none'}")
    assert result.returncode == 1
    assert "no cluster in" in result.stderr


def test_a_worker_that_dies_at_once_fails_start_saying_why(run_dir, tmp_path):
    # No training data: the workers exit at once.
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text(yaml.safe_dump(sample_with_free_ports()))
    started = local("start", str(cluster_file), f"--run_dir={run_dir}",
                    f"--bin_dir={m.bin_dir()}")
    assert started.returncode == 1, started.stdout + started.stderr
    assert "start failed: worker-" in started.stderr, started.stderr
    assert "of the start" in started.stderr, started.stderr
    # The end of the worker's log says why.
    assert "data/train" in started.stderr, started.stderr
    assert [pid for pid in pids_of(run_dir) if alive(pid)] == []


def test_help_lists_only_user_commands_and_a_closed_pipe_is_quiet(tmp_path):
    shown = local("--help")
    assert shown.returncode == 0
    assert "start" in shown.stdout and "_supervise" not in shown.stdout
    # The status of a stopped cluster, written to a pipe nobody reads any
    # more (`strata-local status --json | head -1` once head is done).
    finished = subprocess.Popen(["true"])
    finished.wait()
    (tmp_path / "state.json").write_text(json.dumps(dict(
        supervisor_pid=finished.pid, phase="stopped", message="",
        bin_dir=str(m.bin_dir()), processes=[dict(
            name=f"worker-{i}", role="worker", address=None, state="exited",
            exit_code=0, pid=finished.pid) for i in range(2)])))
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        closed = subprocess.run(
            [str(STRATA_LOCAL), "status", "--json", f"--run_dir={tmp_path}"],
            stdout=write_end, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL, timeout=60)
    finally:
        os.close(write_end)
    assert b"Traceback" not in closed.stderr, closed.stderr.decode()
    assert b"BrokenPipe" not in closed.stderr, closed.stderr.decode()
