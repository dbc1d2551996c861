"""strata-datagen --generator=realistic reports two ceilings on its holdout:
the Bayes ceiling (the true probabilities) and the learnable ceiling (an
estimator that knows the generator's form, fitted on the training rows).
The learnable one must sit below the Bayes one and above what a plain
logistic regression (scikit-learn, bench/logistic_regression.py) reaches on
the same rows and features: the data has sparse interactions and unseen
values a linear model cannot use."""

import json
import pathlib
import subprocess
import sys

import pytest

from strata_cluster import binary

pytest.importorskip("sklearn")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
from logistic_regression import holdout_aucs  # noqa: E402

TRAIN_ROWS = 40000
HOLDOUT_ROWS = 10000
# The default vocabularies divided by 50 (ids of 42,000 users, 10,000 ads).
VOCAB_SIZES = ",".join(str(max(2, size // 50)) for size in [
    2100000, 20, 100, 1000, 10000, 100000, 30, 300, 3000, 30000,
    500000, 50, 200, 2000, 20000, 200000, 40, 400, 4000, 40000,
    10, 1000, 1500000, 100, 10000, 500000])


def test_learnable_ceiling_is_between_logistic_regression_and_bayes(
        tmp_path):
    out = tmp_path / "rows"
    done = subprocess.run(
        [binary("strata-datagen"), "--generator=realistic",
         f"--rows={TRAIN_ROWS}", f"--holdout_rows={HOLDOUT_ROWS}",
         f"--out={out}", "--multi_hot_fields=2",
         f"--vocab_sizes={VOCAB_SIZES}"],
        check=True, capture_output=True, text=True, timeout=120)
    assert "learnable AUC" in done.stdout
    meta = json.loads(out.with_name("rows.meta.json").read_text())
    assert meta["generator"] == "realistic"
    bayes = meta["ceilings"]["bayes_auc"]
    learnable = meta["ceilings"]["learnable_auc"]
    assert bayes == meta["holdout"]["planted_auc"]
    assert 0.6 < learnable < bayes
    assert meta["holdout_unseen_value_share"] > 0.01
    # The better of a strong and the default regularization.
    fits = holdout_aucs(out, out.with_name("rows.holdout"), [0.1, 1.0])
    regression = max(auc for _, auc, _, _ in fits)
    assert regression < learnable, (regression, learnable, bayes)
