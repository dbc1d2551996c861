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
(also when it comes in the same pip command, which pip installs after it
built strata) the checkout and build directory are recorded next to
strata/tf (_checkout.json), and the first `import strata.tf` builds the
library there against the TensorFlow it finds and copies it into the
package (strata/tf/_build.py does both builds). STRATA_TF_OPS=0 skips all
of it. pip builds in an isolated environment, but
with the interpreter of the target environment: the build runs that
interpreter with the isolation's PYTHONPATH removed, so it sees the
target's packages.

The runtime dependencies are derived from the grpcio-tools doing the build:
its generated code refuses a grpcio older than itself and a protobuf runtime
other than the one its protoc matches, and grpcio-tools declares that range.
"""

import importlib.metadata
import importlib.util
import os
import pathlib
import re
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


def _load_build_module():
    """strata/tf/_build.py, loaded by path: importing the package would
    import TensorFlow."""
    spec = importlib.util.spec_from_file_location(
        "strata_tf_build", HERE / "strata" / "tf" / "_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    package_dir/strata/tf; False when there is no TensorFlow (yet).

    Either way the checkout and its build directory are recorded there, so
    that `import strata.tf` can build the library itself once TensorFlow is
    installed (pip installs the packages of one command after building
    strata)."""
    tools = _load_build_module()
    repo = HERE.parent
    build = pathlib.Path(os.environ.get("STRATA_BUILD_DIR", repo / "build"))
    target = pathlib.Path(package_dir) / "strata" / "tf"
    # pip builds in the source tree, whose build/lib keeps what an earlier
    # build put there: never package a library of another build (or
    # another TensorFlow).
    for stale in (*tools.LIBRARIES, tools.CHECKOUT_FILE):
        (target / stale).unlink(missing_ok=True)
    if os.environ.get("STRATA_TF_OPS", "1") == "0":
        return False
    tools.write_checkout(target, repo, build)
    version = _target_tensorflow()
    if version is None:
        print("strata: no TensorFlow in this environment yet: strata.tf "
              "will build its op library from this checkout at its first "
              "import once TensorFlow is installed (pip install "
              "tensorflow-cpu)", file=sys.stderr)
        return False
    print(f"strata: building the TF op library against TensorFlow {version} "
          f"in {build} (a first build takes minutes)", file=sys.stderr)
    lib = tools.build(repo, build, sys.executable, env=_target_environment())
    tools.copy_libraries(lib, target)
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
