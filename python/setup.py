"""Build hook of the strata package: generates the gRPC stubs from ../proto.

`pip install ./python` (from the repository root) runs build_py, which runs
grpc_tools.protoc over proto/strata.proto and proto/health.proto and writes
strata/_proto/{strata,health}_pb2.py, *_pb2.pyi and *_pb2_grpc.py, with the
imports between them made package-relative. The generated files are not
committed. STRATA_PROTO_DIR overrides where the .proto files are read from.

The runtime dependencies are derived from the grpcio-tools doing the build:
its generated code refuses a grpcio older than itself and a protobuf runtime
other than the one its protoc matches, and grpcio-tools declares that range.
"""

import importlib.metadata
import os
import pathlib
import re

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


class BuildPyWithProtos(build_py):
    """build_py that generates the stubs first, so they are packaged."""

    def run(self):
        generate_protos()
        super().run()


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
