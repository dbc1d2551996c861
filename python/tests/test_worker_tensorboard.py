"""strata-worker --tensorboard_dir writes event files that TensorFlow's own
reader (the one TensorBoard's loaders use) accepts: the file version first,
then each progress report's scalars, equal to the --progress_file CSV."""

import csv
import subprocess

import pytest

from strata_cluster import Cluster, binary

tf = pytest.importorskip("tensorflow", reason="needs tensorflow's event "
                         "reader (python/run_tests.sh installs it)")


def test_event_file_holds_the_progress_reports(tmp_path):
    cluster = Cluster("strata-py-tensorboard-")
    try:
        address = cluster.start_shard("shard").wait_ready()
        data = tmp_path / "train"
        subprocess.run([binary("strata-datagen"), f"--out={data}",
                        "--rows=30000", "--holdout_rows=2000"], check=True,
                       capture_output=True, timeout=120,
                       stdin=subprocess.DEVNULL)
        done = subprocess.run(
            [binary("strata-worker"), f"--shards={address}", "--rank=0",
             "--num_workers=1", f"--train_files={data}", "--epochs=1",
             f"--eval_files={data}.holdout", "--eval_every_steps=10",
             "--progress_interval_s=0.05", f"--tensorboard_dir={tmp_path}/tb",
             f"--progress_file={tmp_path}/progress.csv"],
            capture_output=True, text=True, timeout=180,
            stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr[-3000:]
    finally:
        cluster.stop()
    files = list((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert len(files) == 1, files
    events = list(tf.compat.v1.train.summary_iterator(str(files[0])))
    assert events[0].file_version == "brain.Event:2"
    scalars = {}
    for event in events[1:]:
        for value in event.summary.value:
            scalars.setdefault(value.tag, {})[event.step] = value.simple_value
    with open(tmp_path / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 3
    # The last report and the final evaluation can share a step: one event
    # and one CSV row each, the later one counting (as TensorBoard shows).
    last_row = {int(row["step"]): row for row in rows}
    assert sorted(scalars["loss"]) == sorted(last_row)
    for step, row in last_row.items():
        # The CSV has 6 decimals, the event a float32.
        assert scalars["loss"][step] == pytest.approx(float(row["loss"]),
                                                      abs=2e-6)
        if row["eval_auc"]:
            assert scalars["eval_auc"][step] == pytest.approx(
                float(row["eval_auc"]), abs=2e-6)
    assert len(scalars["eval_auc"]) >= 2
    aucs = [scalars["eval_auc"][step] for step in sorted(scalars["eval_auc"])]
    assert all(0 < auc < 1 for auc in aucs), aucs
    # --eval_every_steps=10 over 30 steps (30,000 rows of batch 1024).
    assert sorted(scalars["eval_auc"]) == [10, 20, 30], scalars["eval_auc"]
