"""Building strata.tf's op library from the checkout strata was installed from.

Two callers: setup.py, at `pip install ./python` when TensorFlow is already
in the environment, and strata.tf at its first import when it is not there
yet at build time (`pip install ./python tensorflow-cpu` in one command:
pip builds strata before it installs TensorFlow). setup.py records the
checkout and its build directory next to the package (_checkout.json), so
that the import can build the library against the TensorFlow it finds and
copy it into the package, once.

This module imports neither TensorFlow nor the rest of strata: setup.py
loads it by path.
"""

import fcntl
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

LIBRARIES = ("libstrata_tf_ops.so", "libstrata_tf_ops.so.tf_version",
             "libstrata_tf_client.so")
CHECKOUT_FILE = "_checkout.json"
# Shared with python/run_tests.sh: one build of a build directory at a time.
LOCK_FILE = "/tmp/strata-build.lock"


def write_checkout(package_dir, repo, build_dir):
    """Records where strata was built from, for a build at first import."""
    path = pathlib.Path(package_dir) / CHECKOUT_FILE
    path.write_text(json.dumps({"repo": str(repo),
                                "build_dir": str(build_dir)}) + "\n")


def read_checkout(package_dir):
    """(repo, build_dir) recorded at install, or None when there is none or
    the checkout is gone."""
    try:
        recorded = json.loads(
            (pathlib.Path(package_dir) / CHECKOUT_FILE).read_text())
        repo = pathlib.Path(recorded["repo"])
        build_dir = pathlib.Path(recorded["build_dir"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not (repo / "CMakeLists.txt").is_file():
        return None
    return repo, build_dir


def built_for(library):
    """The TensorFlow version a built op library is for, or None."""
    try:
        return pathlib.Path(str(library) + ".tf_version").read_text().strip()
    except OSError:
        return None


def build(repo, build_dir, python, env=None, log=sys.stderr):
    """Configures build_dir for `python`'s TensorFlow and builds the op
    library there; returns the folder holding LIBRARIES. RuntimeError with
    CMake's output when it fails."""
    build_dir = pathlib.Path(build_dir)
    cache = build_dir / "CMakeCache.txt"
    if cache.is_file() and re.search(r"^STRATA_(ASAN|TSAN):BOOL=ON",
                                     cache.read_text(), re.MULTILINE):
        raise RuntimeError(f"strata: {build_dir} is a sanitizer build, which "
                           "has no TF op library: set STRATA_BUILD_DIR to "
                           "another build directory")
    jobs = os.environ.get("STRATA_BUILD_JOBS", str(os.cpu_count() or 2))
    commands = (
        ["cmake", "-S", str(repo), "-B", str(build_dir),
         f"-DSTRATA_TF_PYTHON={python}"],
        ["cmake", "--build", str(build_dir), "--target", "strata_tf_ops",
         "-j", jobs])
    with open(LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for command in commands:
            done = subprocess.run(command, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True,
                                  stdin=subprocess.DEVNULL)
            if done.returncode != 0:
                raise RuntimeError(f"strata: {' '.join(command)} failed:\n"
                                   f"{done.stdout[-4000:]}")
    lib = build_dir / "lib"
    for name in LIBRARIES:
        if not (lib / name).is_file():
            raise RuntimeError(f"strata: the build made no {lib / name} (is "
                               f"TensorFlow importable by {python}?)")
    return lib


def copy_libraries(lib, target_dir):
    """Copies the op library and the client library it loads into
    target_dir, each through a temporary name so that a process loading
    them meanwhile never sees half a file."""
    target_dir = pathlib.Path(target_dir)
    # The op library last: whoever finds it finds the others already.
    for name in reversed(LIBRARIES):
        temporary = target_dir / f".{name}.{os.getpid()}"
        shutil.copy2(pathlib.Path(lib) / name, temporary)
        os.replace(temporary, target_dir / name)
