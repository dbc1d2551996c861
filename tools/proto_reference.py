#!/usr/bin/env python3
"""Writes docs/API.md, the reference of Strata's gRPC API, from the comments
of proto/*.proto.

protoc (grpcio-tools' copy) parses the files with their source info, and
this script walks the descriptors: every service with its methods, then
every message with its fields and every enum with its values, each with the
comment written above it (or after it, on the same line). So the reference
says exactly what the .proto files say; change the comments there and run

  build/python-venv/bin/python tools/proto_reference.py          # rewrite
  build/python-venv/bin/python tools/proto_reference.py --check  # compare

--check exits 1 when docs/API.md is not what the .proto files give (a test
runs it).
"""

import argparse
import pathlib
import sys
import tempfile

from google.protobuf import descriptor_pb2
from grpc_tools import protoc

REPO = pathlib.Path(__file__).resolve().parents[1]
PROTOS = ("proto/strata.proto", "proto/replication.proto", "proto/health.proto")
OUTPUT = REPO / "docs" / "API.md"

# Field numbers of FileDescriptorProto and DescriptorProto, the elements of
# a SourceCodeInfo location path.
FILE_MESSAGES, FILE_ENUMS, FILE_SERVICES = 4, 5, 6
MESSAGE_FIELDS, MESSAGE_NESTED, MESSAGE_ENUMS = 2, 3, 4
ENUM_VALUES, SERVICE_METHODS = 2, 2
FILE_SYNTAX, FILE_PACKAGE = 12, 2

SCALARS = {number: name[len("TYPE_"):].lower() for name, number in
           descriptor_pb2.FieldDescriptorProto.Type.items()}


def parse(protos):
    with tempfile.TemporaryDirectory() as work:
        out = pathlib.Path(work) / "set.pb"
        if protoc.main(["protoc", f"-I{REPO}", "--include_source_info",
                        f"--descriptor_set_out={out}", *protos]) != 0:
            raise SystemExit("proto_reference: protoc failed")
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return files.file


def comments_of(file):
    """{location path: comment text} of a file."""
    found = {}
    for location in file.source_code_info.location:
        text = location.leading_comments or location.trailing_comments
        if text.strip():
            found[tuple(location.path)] = text
        elif location.leading_detached_comments:
            found[tuple(location.path)] = location.leading_detached_comments[-1]
    return found


def paragraph(text):
    """A comment as Markdown: lines joined, blank lines kept."""
    lines = [line.strip() for line in text.strip("\n").splitlines()]
    return "\n".join(lines).strip()


def cell(text):
    return " ".join(paragraph(text).split()).replace("|", "\\|")


PACKAGES = ("strata.v1", "grpc.health.v1")


def local_name(full_name):
    """ChangeBatch.Kind of .strata.v1.ChangeBatch.Kind."""
    name = full_name.lstrip(".")
    for package in PACKAGES:
        if name.startswith(package + "."):
            return name[len(package) + 1:]
    return name


def link(full_name):
    name = local_name(full_name)
    return f"[`{name}`](#{anchor(name)})"


def type_name(field):
    if field.type_name:
        return link(field.type_name)
    return f"`{SCALARS[field.type]}`"


def anchor(name):
    return name.lower().replace(".", "-")


def write_service(out, service, path, comments):
    out.append(f"### service `{service.name}`\n")
    if tuple(path) in comments:
        out.append(paragraph(comments[tuple(path)]) + "\n")
    for i, method in enumerate(service.method):
        request = local_name(method.input_type)
        response = local_name(method.output_type)
        stream_in = "stream " if method.client_streaming else ""
        stream_out = "stream " if method.server_streaming else ""
        out.append(f"#### `{method.name}`\n")
        out.append(f"`{method.name}({stream_in}{request}) returns "
                   f"({stream_out}{response})`: request "
                   f"{link(method.input_type)}, response "
                   f"{link(method.output_type)}.\n")
        text = comments.get((*path, SERVICE_METHODS, i))
        out.append((paragraph(text) if text else "(No comment.)") + "\n")


def write_message(out, message, path, comments, prefix=""):
    name = prefix + message.name
    out.append(f'<a id="{anchor(name)}"></a>\n')
    out.append(f"### `{name}`\n")
    if tuple(path) in comments:
        out.append(paragraph(comments[tuple(path)]) + "\n")
    if message.field:
        out.append("| field | number | type | meaning |")
        out.append("| --- | ---: | --- | --- |")
        for i, field in enumerate(message.field):
            repeated = ("repeated " if field.label ==
                        descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
                        else "")
            text = comments.get((*path, MESSAGE_FIELDS, i), "")
            out.append(f"| `{field.name}` | {field.number} | {repeated}"
                       f"{type_name(field)} | {cell(text)} |")
        out.append("")
    else:
        out.append("No fields.\n")
    for i, enum in enumerate(message.enum_type):
        write_enum(out, enum, (*path, MESSAGE_ENUMS, i), comments, name + ".")
    for i, nested in enumerate(message.nested_type):
        write_message(out, nested, (*path, MESSAGE_NESTED, i), comments,
                      name + ".")


def write_enum(out, enum, path, comments, prefix=""):
    out.append(f'<a id="{anchor(prefix + enum.name)}"></a>\n')
    out.append(f"### enum `{prefix}{enum.name}`\n")
    if tuple(path) in comments:
        out.append(paragraph(comments[tuple(path)]) + "\n")
    out.append("| value | number | meaning |")
    out.append("| --- | ---: | --- |")
    for i, value in enumerate(enum.value):
        text = comments.get((*path, ENUM_VALUES, i), "")
        out.append(f"| `{value.name}` | {value.number} | {cell(text)} |")
    out.append("")


def reference(files):
    out = ["# gRPC API reference", "",
           "Generated by `tools/proto_reference.py` from the comments of "
           "`proto/*.proto`; edit those, not this file. How the pieces fit: "
           "[ARCHITECTURE.md](ARCHITECTURE.md); limits and what a client "
           "gets past each: the README.", ""]
    for file in files:
        comments = comments_of(file)
        out.append(f"## `{file.name}` (package `{file.package}`)\n")
        header = comments.get((FILE_SYNTAX,)) or comments.get((FILE_PACKAGE,))
        if header:
            out.append(paragraph(header) + "\n")
        for i, service in enumerate(file.service):
            write_service(out, service, (FILE_SERVICES, i), comments)
        for i, message in enumerate(file.message_type):
            write_message(out, message, (FILE_MESSAGES, i), comments)
        for i, enum in enumerate(file.enum_type):
            write_enum(out, enum, (FILE_ENUMS, i), comments)
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true",
                   help="exit 1 if docs/API.md differs from the .proto files")
    p.add_argument("--output", default=str(OUTPUT))
    args = p.parse_args(argv)
    text = reference(parse(PROTOS))
    output = pathlib.Path(args.output)
    if args.check:
        if not output.is_file() or output.read_text() != text:
            print(f"proto_reference: {output} is out of date: run "
                  "tools/proto_reference.py", file=sys.stderr)
            return 1
        return 0
    output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
