"""Build hook of the strata package: generates the gRPC stubs from ../proto.

`pip install ./python` (from the repository root) runs build_py, which runs
grpc_tools.protoc over proto/strata.proto and proto/health.proto and writes
strata/_proto/{strata,health}_pb2.py, *_pb2.pyi and *_pb2_grpc.py, with the
imports between them made package-relative. The generated files are not
committed. STRATA_PROTO_DIR overrides where the .proto files are read from.

strata.tf's op library. When the environment being installed into has
TensorFlow, build_py also builds libstrata_tf_ops.so (and the client library
it loads) against that TensorFlow, with CMake in the checkout's build
directory (STRATA_BUILD_DIR, default <checkout>/build), and packages both
next to strata/tf, where `import strata.tf` finds them. Without TensorFlow
the rest is installed and a line says how to add the op library
(STRATA_TF_OPS=0 skips it). pip builds in an isolated environment, but
with the interpreter of the target environment: the build runs that
interpreter with the isolation's PYTHONPATH removed, so it sees the
target's packages.

The runtime dependencies are derived from the grpcio-tools doing the build:
its generated code refuses a grpcio older than itself and a protobuf runtime
other than the one its protoc matches, and grpcio-tools declares that range.
"""

import importlib.metadata
import os
import pathlib
import re
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
PROTO_FILES = ("strata.proto", "health.proto")
OUT_DIR = HERE / "strata" / "_proto"


def _proto_dir():
    return pathlib.Path(os.environ.get("STRATA_PROTO_DIR", HERE.parent / "proto"))


def _fix_imports(path):
    # protoc writes `import strata_pb2 as strata__pb2`; inside a package that
    # must be `from . import strata_pb2 as strata__pb2`.
    text = path.read_text()
    fixed = re.sub(r"^import (\w+_pb2) as (\w+)$", r"from . import \1 as \2",
                   text, flags=re.MULTILINE)
    if fixed != text:
        path.write_text(fixed)


def generate_protos():
    from grpc_tools import protoc  # a build requirement (pyproject.toml)
    import grpc_tools

    proto_dir = _proto_dir()
    missing = [name for name in PROTO_FILES if not (proto_dir / name).is_file()]
    if missing:
        raise RuntimeError(
            f"strata: cannot generate the gRPC stubs: {', '.join(missing)} not "
            f"found in {proto_dir}. Install from the repository checkout "
            "(pip install ./python) or set STRATA_PROTO_DIR.")
    well_known = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    for name in PROTO_FILES:
        args = ["grpc_tools.protoc", f"-I{proto_dir}", f"-I{well_known}",
                f"--python_out={OUT_DIR}", f"--pyi_out={OUT_DIR}",
                f"--grpc_python_out={OUT_DIR}", str(proto_dir / name)]
        if protoc.main(args) != 0:
            raise RuntimeError(f"strata: protoc failed on {proto_dir / name}")
    for generated in OUT_DIR.glob("*_pb2*.py*"):
        _fix_imports(generated)


TF_LIBRARIES = ("libstrata_tf_ops.so", "libstrata_tf_ops.so.tf_version",
                "libstrata_tf_client.so")


def _target_environment():
    """The environment of this interpreter without pip's build isolation."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME")}
    return env


def _target_tensorflow():
    """The version of TensorFlow installed where we install, or None."""
    found = subprocess.run(
        [sys.executable, "-c",
         "import importlib.metadata as m\n"
         "for name in ('tensorflow', 'tensorflow-cpu', 'tf-nightly'):\n"
         "    try:\n        print(m.version(name)); break\n"
         "    except m.PackageNotFoundError: pass"],
        env=_target_environment(), capture_output=True, text=True)
    return found.stdout.strip() or None


def build_tf_ops(package_dir):
    """Builds the op library against the target's TensorFlow into
    package_dir/strata/tf; False when there is no TensorFlow."""
    if os.environ.get("STRATA_TF_OPS", "1") == "0":
        return False
    version = _target_tensorflow()
    if version is None:
        print("strata: no TensorFlow in this environment: strata.tf is "
              "installed without its op library. To add it: pip install "
              "tensorflow-cpu (or tensorflow), then pip install ./python "
              "again.", file=sys.stderr)
        return False
    repo = HERE.parent
    build = pathlib.Path(os.environ.get("STRATA_BUILD_DIR", repo / "build"))
    cache = build / "CMakeCache.txt"
    if cache.is_file() and re.search(r"^STRATA_(ASAN|TSAN):BOOL=ON",
                                     cache.read_text(), re.MULTILINE):
        raise RuntimeError(f"strata: {build} is a sanitizer build, which "
                           "has no TF op library: set STRATA_BUILD_DIR to "
                           "another build directory")
    print(f"strata: building the TF op library against TensorFlow {version} "
          f"in {build} (a first build takes minutes)", file=sys.stderr)
    env = _target_environment()
    lock = ["flock", "/tmp/strata-build.lock"] if shutil.which("flock") else []
    jobs = os.environ.get("STRATA_BUILD_JOBS", str(os.cpu_count() or 2))
    for command in (
            ["cmake", "-S", str(repo), "-B", str(build),
             f"-DSTRATA_TF_PYTHON={sys.executable}"],
            ["cmake", "--build", str(build), "--target", "strata_tf_ops",
             "-j", jobs]):
        done = subprocess.run(lock + command, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"strata: {' '.join(command)} failed:\n"
                               f"{done.stdout[-4000:]}")
    target = pathlib.Path(package_dir) / "strata" / "tf"
    for name in TF_LIBRARIES:
        source = build / "lib" / name
        if not source.is_file():
            raise RuntimeError(f"strata: the build made no {source} (is "
                               "TensorFlow importable by "
                               f"{sys.executable}?)")
        shutil.copy2(source, target / name)
    return True


class BuildPyWithProtos(build_py):
    """build_py that generates the stubs first, so they are packaged, and
    adds the TF op library when the target has TensorFlow."""

    def run(self):
        generate_protos()
        super().run()
        build_tf_ops(self.build_lib)


def runtime_requirements():
    try:
        tools = importlib.metadata.version("grpcio-tools")
        tools_requires = importlib.metadata.requires("grpcio-tools") or []
    except importlib.metadata.PackageNotFoundError as e:
        raise RuntimeError("strata: building needs grpcio-tools "
                           "(a build requirement in pyproject.toml)") from e
    protobuf = [r.split(";")[0].strip() for r in tools_requires
                if re.match(r"protobuf\b", r)]
    return [f"grpcio>={tools},<2", *(protobuf or ["protobuf"]),
            "numpy>=1.23,<3"]


setup(cmdclass={"build_py": BuildPyWithProtos},
      install_requires=runtime_requirements())
