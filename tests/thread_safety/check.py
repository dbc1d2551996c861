#!/usr/bin/env python3
"""Clang's thread-safety analysis over Strata's own C++ sources.

GCC ignores the ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED annotations,
so without this they are comments. Each translation unit of a configured
build directory (its compile_commands.json) is compiled by clang++ with
-fsyntax-only -Wthread-safety -Wshadow -Werror: the analysis runs in the
front end, so no code is generated and nothing is linked.

Usage: tests/thread_safety/check.py BUILD_DIR [-j N] [PATH_PART...]
Exits 0 when every file passes, 1 naming the files with findings.
"""
import argparse
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys

CHECKS = ["-Wthread-safety", "-Wthread-safety-beta", "-Wshadow", "-Werror",
          # gRPC's generated services hide Pull when it is served raw.
          "-Wno-overloaded-virtual"]
# GCC-only flags clang rejects, and those that only matter for codegen.
DROP = {"-fno-math-errno"}


def clang_command(entry, clang):
    args = shlex.split(entry["command"]) if "command" in entry else list(
        entry["arguments"])
    out = [clang]
    skip = False
    for arg in args[1:]:
        if skip:
            skip = False
            continue
        if arg == "-o":
            skip = True
            continue
        if arg == "-c" or arg in DROP or arg.startswith("-fsanitize"):
            continue
        out.append(arg)
    return out + ["-fsyntax-only"] + CHECKS


def ours(path, root):
    rel = os.path.relpath(path, root)
    return (not rel.startswith("..") and not rel.startswith("build") and
            path.endswith(".cc") and "/proto/" not in path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build_dir")
    parser.add_argument("-j", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--clang", default="clang++-14")
    parser.add_argument("only", nargs="*",
                        help="check only files whose path holds one of these")
    flags = parser.parse_intermixed_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    with open(os.path.join(flags.build_dir, "compile_commands.json")) as f:
        entries = [e for e in json.load(f) if ours(e["file"], root)]
    if flags.only:
        entries = [e for e in entries if any(o in e["file"] for o in flags.only)]

    def check(entry):
        result = subprocess.run(clang_command(entry, flags.clang),
                                cwd=entry["directory"], capture_output=True,
                                text=True)
        return entry["file"], result.returncode, result.stderr

    failed = []
    with concurrent.futures.ThreadPoolExecutor(flags.j) as pool:
        for path, code, stderr in pool.map(check, entries):
            if code != 0:
                failed.append(os.path.relpath(path, root))
                sys.stderr.write(stderr)
    print(f"thread-safety: {len(entries) - len(failed)} passed, "
          f"{len(failed)} failed")
    for path in failed:
        print(f"  {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
