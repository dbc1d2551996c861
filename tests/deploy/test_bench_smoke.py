"""The short version of bench/run.sh that CI runs: every row of the matrix
(Strata pulls and pushes, Redis MGET/MSET) measures something, with its CPU
seconds per million keys next to keys/s."""

import os
import re
import shutil
import subprocess
import sys

import pytest

import k8s_manifests as m


def run_bench_script(script, *build_dirs, env):
    """Runs bench/SCRIPT on BUILD_DIRS with ENV and returns the finished
    process; the test fails if the script does."""
    done = subprocess.run(
        ["bash", str(m.REPO / "bench" / script), *map(str, build_dirs)],
        env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    return done


def alternating_rows(done, row_pattern):
    """The lines of DONE's output that match ROW_PATTERN (after "ROUND
    BUILD "), split; asserts that two rounds ran A, B and then B, A."""
    rows = [line.split() for line in done.stdout.splitlines()
            if re.fullmatch(r"[12] [AB] " + row_pattern, line)]
    assert [row[:2] for row in rows] == [["1", "A"], ["1", "B"], ["2", "B"],
                                         ["2", "A"]], done.stdout
    return rows


def table_rows(text, width, first_cells=None):
    """The rows of TEXT's markdown tables that have WIDTH cells (and, when
    given, a first cell in FIRST_CELLS; else not a header or rule), each
    as its stripped cells."""
    rows = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != width:
            continue
        if (cells[0] in first_cells if first_cells is not None
                else not cells[0].startswith("---")):
            rows.append(cells)
    return rows


def test_bench_matrix_runs_and_reports_cpu_per_million_keys(tmp_path):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    build = m.bin_dir().parent
    env = dict(os.environ, DURATION_S="0.5", WARMUP_S="0.2", NUM_KEYS="20000",
               DIM="16", OUT_DIR=str(tmp_path))
    done = run_bench_script("run.sh", build, env=env)
    rows = [line for line in (tmp_path / "results.md").read_text().splitlines()
            if line.startswith("| `")]
    # load x2, pulls 2 encodings x 2 batches x 2 inflights, MGET x4, MSET x2,
    # pushes x3.
    assert len(rows) == 19, rows
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        label, keys_per_s, cpu = cells[0], cells[1], cells[5]
        assert float(keys_per_s) > 0, row
        match = re.fullmatch(r"([0-9.]+) \(client ([0-9.]+)\)", cpu)
        assert match, row
        total, client = float(match.group(1)), float(match.group(2))
        assert total >= client >= 0, row
        # A timed row's server answered requests for the whole duration, so
        # its share is above zero. A load row is one pass over 20,000 keys:
        # redis-server can take less than one clock tick (10 ms) for it, and
        # /proc counts CPU time in ticks.
        if "load" not in label:
            assert total > client, row


def test_ceiling_run_measures_strata_and_both_transport_ceilings():
    build = m.bin_dir().parent
    env = dict(os.environ, ROUNDS="1", DURATION_S="0.3", WARMUP_S="0.1",
               NUM_KEYS="20000", DIM="16", SHAPES="1000x8 8192x1")
    done = run_bench_script("run_ceiling.sh", build, env=env)
    rows = [line for line in done.stdout.splitlines()
            if re.match(r"\| 1 \| \d+x\d+ \|", line)]
    targets = {}
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        shape, target, keys_per_s, cpu = cells[1], cells[2], cells[3], cells[4]
        assert float(keys_per_s) > 0, row
        match = re.fullmatch(r"([0-9.]+) \(([0-9.]+) \+ ([0-9.]+)\)", cpu)
        assert match, row
        # The server answered every pull, so it spent CPU on them.
        assert float(match.group(3)) > 0, row
        targets.setdefault(shape, set()).add(target)
    every = {"strata", "strata-grpc", "grpc", "tcp"}
    assert targets == {"1000x8": every, "8192x1": every}, rows


# Exclusive: its open loops offer 10x a capacity measured moments before,
# which another test on the same cores would change in between.
@pytest.mark.exclusive
def test_overload_run_answers_at_ten_times_capacity_only_with_the_throttle():
    build = m.bin_dir().parent
    env = dict(os.environ, ROUNDS="1", DURATION_S="0.5", WARMUP_S="0.3",
               NUM_KEYS="5000", DIM="8")
    done = run_bench_script("run_overload.sh", build, env=env)
    answered = {}
    for line in done.stdout.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 12 and cells[0] == "1":
            key = (cells[1], cells[2], cells[3].split(",")[0])
            answered[key] = float(cells[5])
    for nice in ("10", "0"):
        # Measured before the open loops and again after them.
        assert answered[(nice, "capacity", "closed loop before")] > 0, \
            done.stdout
        assert answered[(nice, "capacity", "closed loop after")] > 0, \
            done.stdout
        for load in ("1x", "2x", "10x"):
            assert (nice, load, "raw") in answered, done.stdout
    # The throttled and the limited clients keep the server answering at
    # 10x its capacity.
    assert answered[("10", "10x", "throttled")] > 0, done.stdout
    assert answered[("10", "10x", "limited")] > 0, done.stdout


def test_reshard_run_splits_and_merges_every_row():
    build = m.bin_dir().parent
    env = dict(os.environ, ROUNDS="1", NUM_KEYS="30000", DIM="8")
    done = run_bench_script("run_reshard.sh", build, env=env)
    rows = [line.split("|") for line in done.stdout.splitlines()
            if line.startswith("| 1 |")]
    # The script itself fails when a reshard moves another number of rows.
    assert [row[2].strip() for row in rows] == ["copy", "split", "merge"], \
        done.stdout
    for row in rows:
        # A copy of this small checkpoint can round to 0.00 s; the
        # reshards read and write every row, and cannot.
        assert float(row[3]) > 0 or row[2].strip() == "copy", done.stdout
        assert row[4].strip().endswith(" M"), done.stdout


def test_online_reshard_run_reports_training_around_a_2_to_4_reshard():
    build = m.bin_dir().parent
    env = dict(os.environ, ROUNDS="1", NUM_KEYS="20000", ROWS="20000",
               EPOCHS="60", BEFORE_S="2")
    done = run_bench_script("run_online_reshard.sh", build, env=env)
    rows = [line.split("|") for line in done.stdout.splitlines()
            if line.startswith("| 1 |")]
    assert len(rows) == 1, done.stdout
    row = [cell.strip() for cell in rows[0][1:-1]]
    # The script fails unless the reshard ended on 4 even shards; it moved
    # about half of the bulk table's rows, and training ran before and after
    # it. An epoch of 20,000 rows takes 0.15-0.5 s here, so 60 epochs run
    # 9-30 s and outlast a reshard started after 2 s by several seconds (20
    # epochs once ended 0.4 s after the reshard, with no interval after it).
    assert float(row[1]) > 0 and float(row[3]) > 0, done.stdout
    assert int(row[6]) > 8000, done.stdout
    assert float(row[8]) > 0 and float(row[9]) >= float(row[8]), done.stdout


def test_replicated_move_run_pairs_replicated_and_plain_moves():
    build = m.bin_dir().parent
    env = dict(os.environ, ROUNDS="2", NUM_KEYS="20000")
    done = run_bench_script("run_replicated_move.sh", build, env=env)
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in done.stdout.splitlines()
            if re.match(r"\| [12] \| (plain|replicated) \|", line)]
    # Alternating order; both sides move the same rows (a quarter of the
    # table: the script fails unless 1024 buckets moved).
    assert [row[1] for row in rows] == [
        "plain", "replicated", "replicated", "plain"], done.stdout
    assert len({row[2] for row in rows}) == 1 and int(rows[0][2]) > 3000, rows
    for row in rows:
        assert float(row[3]) > 0 and float(row[7]) > 0, row
    ratios = [line for line in done.stdout.splitlines()
              if re.match(r"\| [12] \| [0-9.]+x \| [0-9.]+x \|", line)]
    assert len(ratios) == 2, done.stdout


def test_wide_run_compares_the_wide_term_with_logistic_regression():
    build = m.bin_dir().parent
    env = dict(os.environ, ROUNDS="1", ROWS="20000", HOLDOUT_ROWS="4000",
               PYTHON=sys.executable)
    done = run_bench_script("run_wide.sh", build, env=env)
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in done.stdout.splitlines() if line.startswith("| 1 |")]
    models = [row[1] for row in rows]
    assert models == ["lr C=1", "lr C=0.1", "deep", "deep+wide", "deep*",
                      "deep+wide*"], done.stdout
    for row in rows:
        assert 0.5 < float(row[2]) < 1.0, row
        assert float(row[3]) > 0 and float(row[4]) > 0, row


def test_realistic_run_reports_both_ceilings_and_each_model():
    build = m.bin_dir().parent
    env = dict(os.environ, ROUNDS="1", ROWS="20000", HOLDOUT_ROWS="4000")
    done = run_bench_script("run_realistic.sh", build, env=env)
    assert "Bayes AUC 0." in done.stdout and "learnable AUC 0." in done.stdout
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in done.stdout.splitlines() if line.startswith("| 1 |")]
    assert [row[1] for row in rows] == ["defaults", "deep", "deep+wide",
                                        "tuned"], done.stdout
    for row in rows:
        assert 0.5 < float(row[2]) < 1.0, row
        assert int(row[8]) > 1000, row  # rows the table ends with


def test_keras_realistic_run_pairs_strata_and_keras_with_the_wide_term():
    build = m.bin_dir().parent
    venv_python = build / "python-venv" / "bin" / "python"
    if subprocess.run([str(venv_python), "-c", "import tensorflow, keras"],
                      capture_output=True).returncode != 0:
        pytest.skip("build/python-venv has no tensorflow (python/run_tests.sh "
                    "makes it)")
    env = dict(os.environ, SIZES="20000", ROUNDS="1", HOLDOUT_ROWS="4000")
    done = run_bench_script("run_keras_realistic.sh", build, env=env)
    assert "learnable AUC 0." in done.stdout, done.stdout
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in done.stdout.splitlines() if line.startswith("| 1 |")]
    assert [row[1] for row in rows] == ["Strata 1 worker + 1 shard",
                                        "Keras, one process"], done.stdout
    for row in rows:
        assert float(row[2]) > 0 and float(row[3]) > 0, row
        # Both learn (the wide term alone is well above chance here).
        assert 0.6 < float(row[4]) < 1.0, row
    assert re.fullmatch(r"[0-9.]+x", rows[0][6]), rows[0]


def test_defaults_run_trains_both_ways_next_to_the_learnable_ceiling():
    build = m.bin_dir().parent
    env = dict(os.environ, SIZES="10000", ROUNDS="1")
    done = run_bench_script("run_defaults.sh", build, env=env)
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in done.stdout.splitlines()
            if line.startswith("| 10000 |")]
    assert [row[3] for row in rows] == ["defaults", "former"], done.stdout
    defaults, former = (float(row[4]) for row in rows)
    # One pass of ten batches barely leaves chance; ten shuffled passes
    # with the wide term come near the learnable ceiling.
    assert former + 0.1 < defaults < float(rows[0][1]), rows
    assert [row[6] for row in rows] == ["10", "1"], rows  # passes


def test_mixed_dims_run_shrinks_the_tables_memory_with_a_narrow_tail():
    build = m.bin_dir().parent
    env = dict(os.environ, ROWS="20000", HOLDOUT_ROWS="4000", ROUNDS="1")
    done = run_bench_script("run_mixed_dims.sh", build, env=env)
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in done.stdout.splitlines() if line.startswith("| 1 |")]
    assert [row[1] for row in rows] == ["uniform", "narrow (4)"], done.stdout
    uniform, narrow = rows
    # The same keys in both; the narrow tail costs less than the uniform
    # one's memory, and the model still learns.
    assert uniform[6] == narrow[6] and int(uniform[6]) > 0, rows
    assert int(narrow[7]) < int(uniform[7]), rows
    for row in rows:
        assert 0.6 < float(row[4]) < 1.0, row
    assert narrow[10].endswith("x"), narrow


def test_worker_ab_run_pairs_float32_and_fp16_pulls():
    build = m.bin_dir().parent
    env = dict(os.environ, ROWS="20000", HOLDOUT_ROWS="4000", ROUNDS="2")
    done = run_bench_script("run_worker_ab.sh", build, env=env)
    assert "B: strata-worker --pull_fp16" in done.stdout, done.stdout
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in done.stdout.splitlines()
            if re.match(r"\| [12] \|", line)]
    assert [row[:2] for row in rows] == [["1", "A"], ["1", "B"], ["2", "A"],
                                         ["2", "B"]], done.stdout
    for row in rows:
        assert float(row[2]) > 0 and float(row[3]) > 0, row
        assert 0.6 < float(row[4]) < 1.0, row
    # fp16 rows learn as float32 rows do.
    for row in rows[1::2]:
        assert abs(float(row[7])) < 0.01, row


def test_recovery_run_kills_and_restarts_each_build():
    # The same build as A and B: each round has one row per build with the
    # log at the kill, the restart's seconds and the log after it.
    build = m.bin_dir().parent
    env = dict(os.environ, ROUNDS="2", NUM_KEYS="5000", DIM="8",
               BATCH="1000", PUSH_S="0.5")
    done = run_bench_script("run_recovery.sh", build, build, env=env)
    rows = alternating_rows(done, r"[0-9]+ [0-9.]+ [0-9]+")
    assert all(float(row[3]) > 0 for row in rows), rows
    assert len(re.findall(r"round [12]: [0-9.]+", done.stdout)) == 2, \
        done.stdout


def test_ab_run_pairs_two_builds_round_by_round():
    # The same build as A and B: each round has one row per build and mode,
    # and a ratio per mode and round.
    build = m.bin_dir().parent
    env = dict(os.environ, ROUNDS="2", DURATION_S="0.3", NUM_KEYS="5000",
               DIM="8")
    done = run_bench_script("run_ab.sh", build, build, env=env)
    rows = [line.split() for line in done.stdout.splitlines()
            if re.fullmatch(r"[12] [AB] pu(ll|sh) [0-9.]+ [0-9.]+", line)]
    assert len(rows) == 8, done.stdout
    assert all(float(row[3]) > 0 and float(row[4]) > 0 for row in rows), rows
    ratios = re.findall(r"(pull|push) round ([12]): ([0-9.]+), ([0-9.]+)",
                        done.stdout)
    assert len(ratios) == 4, done.stdout


def test_training_ab_pairs_two_builds_with_worker_and_shard_cpu():
    # The same build as A and B on a small data set: a row per run with
    # samples/s, the worker's and the shard's CPU and the AUC, and the
    # ratios per round.
    build = m.bin_dir().parent
    env = dict(os.environ, ROUNDS="2", ROWS="6000", HOLDOUT_ROWS="1000",
               BATCH="256")
    done = run_bench_script("run_training_ab.sh", build, build, env=env)
    rows = alternating_rows(done, r"[0-9]+ [0-9.]+ [0-9.]+ [0-9.]+")
    for row in rows:
        assert float(row[2]) > 0 and float(row[3]) > 0, row
        assert 0.5 < float(row[5]) < 1.0, row  # a learned, held-out AUC
    assert len(re.findall(r"round [12]: [0-9.]+; [0-9.]+, [0-9.]+, [0-9.]+",
                          done.stdout)) == 2, done.stdout


def test_serving_run_reports_freshness_per_push_rate_and_lookup_cpu(tmp_path):
    build = m.bin_dir().parent
    env = dict(os.environ, DURATION_S="0.5", NUM_KEYS="5000", DIM="8",
               CACHE_ROWS="5000", PUSH_RATES="10000 20000",
               OVERLOAD_FACTORS="2", SHARD_DURABILITY="periodic",
               OUT_DIR=str(tmp_path))
    done = run_bench_script("run_serving.sh", build, env=env)
    rows = {cells[0]: cells
            for cells in table_rows((tmp_path / "serving.md").read_text(), 7)
            if cells[0] != "run"}
    freshness = [label for label in rows if label.startswith("freshness")]
    assert len(freshness) == 2, done.stdout
    lookups = [label for label in rows if label.startswith("lookup")]
    # Closed loop, 25%, 50%, 90% and 2x.
    assert len(lookups) == 5, done.stdout
    for label in freshness + lookups[:4]:
        assert float(rows[label][1]) > 0, rows[label]
    # The serving PS's CPU per million keys, for the lookups that must all
    # be answered (at 2x some may not be).
    for label in lookups[:4]:
        assert float(rows[label][6]) > 0, rows[label]


def test_serving_ab_run_pairs_two_servings_with_their_cpu():
    # The same strata-serving as A and B, B answering in fp16, the daemons
    # and the client on cores of their own: each round has a closed and an
    # open loop for each, every one answering and with the serving PS's and
    # the client's CPU.
    build = m.bin_dir().parent
    serving = m.bin_dir() / "strata-serving"
    env = dict(os.environ, ROUNDS="2", DURATION_S="0.5", NUM_KEYS="5000",
               DIM="8", ENCODING_B="float16", PIN="1")
    done = run_bench_script("run_serving_ab.sh", serving, serving, build,
                            env=env)
    rows = table_rows(done.stdout, 9, ("1", "2"))
    assert len(rows) == 8, done.stdout
    assert {(row[0], row[1]) for row in rows} == {
        ("1", "A float32"), ("1", "B float16"), ("2", "A float32"),
        ("2", "B float16")}, done.stdout
    for row in rows:
        assert float(row[3]) > 0, row
        assert float(row[7]) > 0, row
        assert float(row[8]) > 0, row


def test_follower_ab_run_gives_each_servings_cpu_per_key_pushed():
    # The same strata-serving as A and B, one short round: the pushes reach
    # both, and each spends some CPU applying them.
    build = m.bin_dir().parent
    serving = m.bin_dir() / "strata-serving"
    env = dict(os.environ, ROUNDS="1", NUM_KEYS="5000", DIM="8",
               PUSH_S="0.5", WARM_S="0.5")
    done = run_bench_script("run_follower_ab.sh", serving, serving, build,
                            env=env)
    rows = table_rows(done.stdout, 5, ("1",))
    assert len(rows) == 1, done.stdout
    assert int(rows[0][1]) > 0, rows
    assert float(rows[0][2]) > 0 and float(rows[0][3]) > 0, rows


def _start_daemon(argv, port_file, log_path):
    log = open(log_path, "w", encoding="utf-8")
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL)
    log.close()
    m.wait_until(lambda: port_file.exists() or process.poll() is not None, 30,
                 f"{argv[0]} writing its port file")
    assert process.poll() is None, log_path.read_text()
    return process, f"127.0.0.1:{int(port_file.read_text())}"


def test_freshness_runs_twice_against_one_serving_ps(tmp_path):
    """A second freshness run on the table of a first one used to wait
    forever: its probe keys were the first run's, whose rows were already
    past the value it waits for. Each run now has its own probe keys, and
    probes that never reach serving are counted after a bounded wait."""
    bin_dir = m.bin_dir()
    processes = []
    try:
        shard, shard_address = _start_daemon(
            [str(bin_dir / "strata-server"), "--port=0",
             f"--port_file={tmp_path}/shard.port",
             f"--data_dir={tmp_path}/shard", "--durability=group",
             "--log_level=warning"],
            tmp_path / "shard.port", tmp_path / "shard.log")
        processes.append(shard)
        serving, serving_address = _start_daemon(
            [str(bin_dir / "strata-serving"), "--port=0",
             f"--port_file={tmp_path}/serving.port",
             f"--shards={shard_address}", f"--data_dir={tmp_path}/serving",
             "--log_level=warning"],
            tmp_path / "serving.port", tmp_path / "serving.log")
        processes.append(serving)
        for run in (1, 2):
            done = subprocess.run(
                [str(bin_dir / "strata-bench"), "--mode=freshness",
                 f"--shards={shard_address}", f"--serving={serving_address}",
                 "--table=fresh", "--dim=8", "--num_keys=1000", "--batch=100",
                 "--push_keys_per_s=5000", "--duration_s=1", "--warmup_s=0"],
                capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr[-4000:]
            summary = done.stdout.splitlines()[0]
            probes = int(re.search(r"requests=(\d+)", summary).group(1))
            # 50 pushes a second for a second, each with one probe.
            assert probes >= 25, (run, summary)
            assert "errors=0" in summary, (run, summary)
    finally:
        for process in processes:
            process.kill()
            process.wait()
