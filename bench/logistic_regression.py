"""Logistic regression (scikit-learn) on Criteo-format files, with the
features strata-worker sees: each categorical value one hashed one-hot
feature ("-" for an empty one; the values of a multi-hot field each weigh
1/n, a mean), each integer log1p-transformed (0 when empty). The peer of the wide term in bench/run_wide.sh and in
python/tests/test_wide_vs_logistic_regression.py.

Usage: python3 bench/logistic_regression.py TRAIN HOLDOUT [C ...]
prints, per C (default 1.0), "C=<c> auc=<holdout AUC> seconds=<fit>
cpu_seconds=<fit>" (the fit only: reading and hashing are not counted)."""

import math
import sys
import time

import numpy as np
from scipy.sparse import csr_matrix, hstack
from sklearn.feature_extraction import FeatureHasher
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

HASHED_FEATURES = 1 << 20


def categorical_tokens(fields):
    tokens = {}
    for i, text in enumerate(fields):
        values = text.split(",") if text else ["-"]
        for value in values:
            token = f"C{i}={value}"
            tokens[token] = tokens.get(token, 0) + 1 / len(values)
    return tokens


def read_criteo(path):
    tokens, dense, labels = [], [], []
    with open(path) as rows:
        for line in rows:
            fields = line.rstrip("\n").split("\t")
            labels.append(int(fields[0]))
            dense.append([math.log1p(max(int(x), 0)) if x else 0.0
                          for x in fields[1:14]])
            tokens.append(categorical_tokens(fields[14:40]))
    return tokens, np.array(dense), np.array(labels)


def features(path):
    tokens, dense, labels = read_criteo(path)
    hasher = FeatureHasher(n_features=HASHED_FEATURES, input_type="dict")
    return hstack([hasher.transform(tokens), csr_matrix(dense)]).tocsr(), labels


def holdout_aucs(train, holdout, regularizations=(1.0,)):
    """[(C, holdout AUC, seconds to fit, CPU-seconds to fit)] of an L2
    logistic regression per C (scikit-learn's C: 1.0 is its default), fitted
    with liblinear."""
    x_train, y_train = features(train)
    x_holdout, y_holdout = features(holdout)
    results = []
    for c in regularizations:
        start, cpu_start = time.monotonic(), time.process_time()
        model = LogisticRegression(C=c, solver="liblinear", max_iter=1000)
        model.fit(x_train, y_train)
        seconds = time.monotonic() - start
        cpu_seconds = time.process_time() - cpu_start
        auc = roc_auc_score(y_holdout, model.predict_proba(x_holdout)[:, 1])
        results.append((c, auc, seconds, cpu_seconds))
    return results


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    regularizations = [float(c) for c in argv[3:]] or [1.0]
    for c, auc, seconds, cpu in holdout_aucs(argv[1], argv[2],
                                             regularizations):
        print(f"C={c:g} auc={auc:.5f} seconds={seconds:.2f} "
              f"cpu_seconds={cpu:.2f}")


if __name__ == "__main__":
    main(sys.argv)
