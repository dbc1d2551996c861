"""Runs a test case as a script in a NEW Python interpreter, as a user's job
starts one: the TensorFlow and PyTorch tests use it, since what breaks can
depend on what ran first in a process.

A case is a prelude (imports and helpers) plus a body; it reads the cluster
from STRATA_TEST_SHARDS, its own table name from STRATA_TEST_TABLE and a
scratch folder from STRATA_TEST_WORKDIR, asserts the values it gets and
prints one line "RESULT <json>", which the test checks again. A crash is a
non-zero exit with the script's output in the failure."""

import json
import os
import subprocess
import sys
import textwrap

# The start of every case: the cluster (SHARDS), the case's own table name
# (TABLE), its scratch folder (WORK), and report(**values), which prints the
# RESULT line.
CASE_HEADER = '''
import json, os, sys
import numpy as np

SHARDS = os.environ["STRATA_TEST_SHARDS"]
TABLE = os.environ["STRATA_TEST_TABLE"]
WORK = os.environ["STRATA_TEST_WORKDIR"]

def report(**values):
    print("RESULT " + json.dumps(values), flush=True)
'''


def start_script(prelude, body, shards, table, workdir, env=None,
                 log_name=None):
    """Starts CASE_HEADER + prelude + body in the background, with `env`
    added to the environment; returns (process, log path). Wait with
    finish_script."""
    script = workdir / f"{table}.py"
    script.write_text(CASE_HEADER + prelude + textwrap.dedent(body))
    environment = dict(os.environ, STRATA_TEST_SHARDS=shards,
                       STRATA_TEST_TABLE=table,
                       STRATA_TEST_WORKDIR=str(workdir))
    environment.update(env or {})
    log_path = workdir / f"{log_name or table}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, str(script)],
                                   env=environment, stdout=log,
                                   stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    return process, log_path


def finish_script(process, log_path, timeout):
    """Waits up to `timeout` s for a start_script process (killing it
    then); returns (its last RESULT dict, its log)."""
    try:
        process.wait(timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = log_path.read_text(errors="replace")
    assert process.returncode == 0, (
        f"{log_path.stem}: exit {process.returncode}\n{text[-6000:]}")
    results = [line for line in text.splitlines() if line.startswith("RESULT ")]
    assert results, f"{log_path.stem}: no RESULT line\n{text[-6000:]}"
    return json.loads(results[-1][len("RESULT "):]), text
