"""strata-worker's wide (first-order) term on data whose signal is
first-order only (strata-datagen --interaction_scale=0), against
scikit-learn's logistic regression on the same rows and features
(bench/logistic_regression.py).

The worker runs as its own process against the session's two shards."""

import json
import pathlib
import subprocess
import sys

import pytest

from strata_cluster import binary

pytest.importorskip("sklearn")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
from logistic_regression import holdout_aucs  # noqa: E402

TRAIN_ROWS = 60000
HOLDOUT_ROWS = 10000
# 26 vocabularies from 10 to about 7,000 values.
VOCAB_SIZES = ",".join(str(int(10 * 1.3 ** i)) for i in range(26))


@pytest.fixture(scope="module")
def first_order_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("first_order") / "rows"
    subprocess.run(
        [binary("strata-datagen"), f"--rows={TRAIN_ROWS}",
         f"--holdout_rows={HOLDOUT_ROWS}", f"--out={out}",
         "--interaction_scale=0", "--first_order_scale=1.5",
         f"--vocab_sizes={VOCAB_SIZES}"],
        check=True, capture_output=True, timeout=120)
    meta = json.loads(out.with_name("rows.meta.json").read_text())
    assert meta["interaction_scale"] == 0
    return out, out.with_name(out.name + ".holdout"), meta


def train_auc(shard_addresses, tmp_path, table, train, holdout, *flags):
    result = tmp_path / f"{table}.json"
    done = subprocess.run(
        [binary("strata-worker"), f"--shards={','.join(shard_addresses)}",
         f"--train_files={train}", f"--eval_files={holdout}",
         f"--table={table}", f"--result_file={result}", *flags],
        capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    evaluated = json.loads(result.read_text())
    assert evaluated["eval_examples"] == HOLDOUT_ROWS
    return evaluated["eval_auc"]


def test_the_wide_term_reaches_logistic_regression_on_first_order_data(
        shard_addresses, first_order_data, tmp_path):
    train, holdout, meta = first_order_data
    # scikit-learn's default regularization (C=1).
    [(_, regression, _, _)] = holdout_aucs(train, holdout)
    wide = train_auc(shard_addresses, tmp_path, "fo_wide", train, holdout,
                     "--wide", "--epochs=4", "--batch_size=256",
                     "--shuffle_buffer=0",
                     "--sparse_learning_rate=0.01", "--wide_learning_rate=0.5")
    ceiling = meta["holdout"]["planted_auc"]
    assert regression < ceiling
    assert wide < ceiling
    assert wide >= regression, (wide, regression, ceiling)


def test_in_one_epoch_the_wide_term_learns_what_the_deep_part_misses(
        shard_addresses, first_order_data, tmp_path):
    # One epoch of batches of 1024 in file order: the embeddings of the
    # deep part barely move, the wide weights do.
    train, holdout, _ = first_order_data
    one_pass = ("--epochs=1", "--shuffle_buffer=0", "--wide_learning_rate=0")
    deep = train_auc(shard_addresses, tmp_path, "fo_deep", train, holdout,
                     "--wide=false", *one_pass)
    wide = train_auc(shard_addresses, tmp_path, "fo_deep_and_wide", train,
                     holdout, "--wide", *one_pass)
    assert wide >= deep + 0.05, (wide, deep)


def test_the_defaults_learn_small_realistic_data(shard_addresses, tmp_path):
    # 10,000 realistic rows: the defaults make ten shuffled passes with the
    # wide term; the former defaults (one pass of ten batches in file
    # order, no wide term) hardly move from chance.
    out = tmp_path / "small"
    subprocess.run(
        [binary("strata-datagen"), "--generator=realistic", "--rows=10000",
         f"--holdout_rows={HOLDOUT_ROWS}", f"--out={out}", "--seed=3"],
        check=True, capture_output=True, timeout=120)
    holdout = out.with_name(out.name + ".holdout")
    meta = json.loads(out.with_name("small.meta.json").read_text())
    learnable = meta["ceilings"]["learnable_auc"]
    defaults = train_auc(shard_addresses, tmp_path, "small_defaults", out,
                         holdout)
    former = train_auc(shard_addresses, tmp_path, "small_former", out,
                       holdout, "--epochs=1", "--shuffle_buffer=0",
                       "--wide=false")
    assert defaults >= former + 0.1, (defaults, former, learnable)
    assert defaults >= learnable - 0.05, (defaults, learnable)
