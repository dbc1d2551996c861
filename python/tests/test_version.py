"""One version everywhere: the package, its metadata and every program."""

import importlib.metadata
import re
import subprocess

import strata
from strata_cluster import binary


def test_package_and_programs_report_the_same_version():
    assert strata.__version__ == importlib.metadata.version("strata")
    for program in ("strata-server", "strata-serving", "stratactl"):
        out = subprocess.run([binary(program), "--version"], check=True,
                             capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL).stdout
        # "<program> <version> (<build type> build)"
        assert re.fullmatch(
            rf"{program} {re.escape(strata.__version__)} \(\w+ build\)\n",
            out), out
