"""Structural checks of deploy/docker/Dockerfile.

No Docker engine runs where the tests do, so the image is not built here.
Instead: the stages, what crosses from build to runtime, the user, the ports,
no secrets, and the runtime package list re-derived from the built binaries
(`ldd` + `dpkg -S`), the same way it was written, plus the packages of the
other programs the manifests run (etcd).
"""

import os
import re
import shlex
import shutil
import subprocess

import pytest

import k8s_manifests as m

BINARIES = ("strata-server", "strata-serving", "strata-worker", "stratactl",
            "strata-lookup")
# In every Debian image (essential or required by apt itself).
BASE_PACKAGES = {"libc6", "libgcc-s1"}
# Installed for a program of their own, not for a library the binaries
# link: the program's path in the image and the package that holds it.
PROGRAM_PACKAGES = {"/usr/bin/etcd": "etcd-server"}


def instructions():
    """(INSTRUCTION, arguments) pairs, continuation lines joined."""
    lines, current = [], ""
    for raw in m.DOCKERFILE.read_text(encoding="utf-8").splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        lines.append(current)
        current = ""
    assert not current, "Dockerfile ends inside a continued line"
    parsed = []
    for line in lines:
        keyword, _, arguments = line.partition(" ")
        parsed.append((keyword.upper(), arguments.strip()))
    return parsed


def stages():
    """[(FROM arguments, [instructions])] in order."""
    found = []
    for keyword, arguments in instructions():
        if keyword == "FROM":
            found.append((arguments, []))
        else:
            assert found, f"{keyword} before the first FROM"
            found[-1][1].append((keyword, arguments))
    return found


def runs(stage):
    return " && ".join(a for k, a in stage[1] if k == "RUN")


def apt_installed(stage):
    """Package names after `apt-get install` in a stage's RUN commands."""
    installed = set()
    for command in re.split(r"&&|;", runs(stage)):
        words = shlex.split(command)
        if words[:2] == ["apt-get", "install"]:
            installed |= {w for w in words[2:] if not w.startswith("-")}
    return installed


def test_two_stages_debian_12_build_then_slim_runtime():
    found = stages()
    assert [f for f, _ in found] == ["debian:12 AS build",
                                     "debian:12-slim AS runtime"]


def test_build_stage_uses_the_project_scripts():
    build = stages()[0]
    commands = runs(build)
    # The same package list as developers and CI, and the same build script.
    assert "/src/deploy/install_deps.sh" in commands
    assert "/src/deploy/build.sh /src/build" in commands
    copies = [a for k, a in build[1] if k == "COPY"]
    assert "deploy/install_deps.sh /src/deploy/install_deps.sh" in copies
    assert ". /src" in copies


def test_runtime_stage_copies_the_binaries_from_build():
    runtime = stages()[1]
    copies = [a.split() for k, a in runtime[1] if k == "COPY"]
    assert copies, "runtime stage copies nothing"
    for words in copies:
        assert words[0] == "--from=build", "runtime copies only from build"
    sources = {w for words in copies for w in words[1:-1]}
    assert sources == {f"/src/build/bin/{b}" for b in BINARIES}
    assert {words[-1] for words in copies} == {"/usr/local/bin/"}
    # The ldd guard fails the image build when a library is missing.
    assert 'grep "not found"' in runs(runtime)


def test_runtime_stage_has_no_build_tools_and_drops_apt_lists():
    runtime = stages()[1]
    installed = apt_installed(runtime)
    assert not {p for p in installed
                if p.endswith("-dev") or p in ("build-essential", "cmake")}
    assert "rm -rf /var/lib/apt/lists/*" in runs(runtime)


def image_uid():
    users = [a for k, a in stages()[1][1] if k == "USER"]
    assert users, "runtime stage has no USER: it would run as root"
    return users[-1].split(":")[0]


def test_runs_as_a_numeric_non_root_user_that_the_pods_name():
    uid = image_uid()
    assert uid.isdigit() and int(uid) != 0, uid
    for workload in m.workloads():
        context = m.pod_template(workload)["spec"]["securityContext"]
        assert context["runAsUser"] == int(uid), workload["metadata"]["name"]


def test_exposes_the_ports_the_manifests_use():
    exposed = {int(p) for k, a in stages()[1][1] if k == "EXPOSE"
               for p in a.split()}
    used = {p["containerPort"] for _, c in m.every_container()
            for p in c.get("ports", [])}
    assert exposed == used


def test_manifests_use_the_tag_the_dockerfile_documents():
    documented = re.search(r"docker build -f deploy/docker/Dockerfile -t (\S+) \.",
                           m.DOCKERFILE.read_text(encoding="utf-8"))
    assert documented, "the Dockerfile's header shows no build command"
    assert {c["image"] for _, c in m.every_container()} == {documented.group(1)}


def test_every_program_the_manifests_run_is_in_the_image():
    copied = {f"/usr/local/bin/{b}" for b in BINARIES}
    installed = apt_installed(stages()[1])
    for workload, container in m.every_container():
        binary, _ = m.command_line(container)
        where = f"{workload['metadata']['name']}/{container['name']}"
        if binary in copied:
            continue
        assert binary in PROGRAM_PACKAGES, f"{where}: {binary} is not in the image"
        assert PROGRAM_PACKAGES[binary] in installed, (
            f"{where}: the runtime stage lacks {PROGRAM_PACKAGES[binary]}, "
            f"which holds {binary}")


def test_program_packages_hold_the_programs():
    if shutil.which("dpkg") is None:
        pytest.skip("needs dpkg (a Debian machine)")
    for path, package in PROGRAM_PACKAGES.items():
        owner = subprocess.run(["dpkg", "-S", path], capture_output=True,
                               text=True, check=False)
        if owner.returncode != 0:
            pytest.skip(f"{package} is not installed here, so dpkg cannot "
                        f"tell who holds {path}")
        assert owner.stdout.split(":")[0] == package, owner.stdout


def test_no_secrets_or_downloads_in_the_image():
    for keyword, arguments in instructions():
        if keyword in ("ENV", "ARG", "LABEL"):
            assert not re.search(r"(?i)secret|token|passw|api_?key|credential",
                                 arguments), f"{keyword} {arguments}"
        assert keyword != "ADD", "ADD can fetch URLs and unpack; use COPY"
        if keyword == "RUN":
            assert not re.search(r"\b(curl|wget)\b", arguments), arguments


def test_dockerignore_keeps_local_builds_out_of_the_context():
    ignore = m.DOCKERFILE.with_name("Dockerfile.dockerignore")
    patterns = {line.strip() for line in ignore.read_text().splitlines()
                if line.strip() and not line.startswith("#")}
    assert {"build", "build-*", ".git"} <= patterns
    # What the Dockerfile copies by name must be in the context.
    assert (m.REPO / "deploy" / "install_deps.sh").is_file()
    assert not {"deploy", "deploy/*", "*.sh"} & patterns


def linked_packages():
    """Debian packages owning the shared libraries the binaries load."""
    if not (shutil.which("ldd") and shutil.which("dpkg")):
        pytest.skip("needs ldd and dpkg (a Debian machine)")
    paths = [str(m.bin_dir() / b) for b in BINARIES]
    missing = [p for p in paths if not os.path.isfile(p)]
    assert not missing, f"not built: {missing} (build first or set STRATA_BIN_DIR)"
    ldd = subprocess.run(["ldd", *paths], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    # The image builds without CUDA (-DSTRATA_CUDA=OFF): a local build's CUDA
    # libraries, which no Debian package owns, are not the image's.
    libraries = sorted(set(lib for lib in re.findall(r"=> (/\S+) \(", ldd)
                           if not lib.startswith("/usr/local/cuda")))
    resolved = subprocess.run(["readlink", "-f", *libraries], capture_output=True,
                              text=True, check=True).stdout.split()
    # /lib is a symlink to /usr/lib on Debian 12 and dpkg knows one spelling
    # of each path: ask for both spellings of every library in one call.
    def spellings(path):
        return {path, path.replace("/usr/lib/", "/lib/", 1),
                path.replace("/lib/", "/usr/lib/", 1)}
    candidates = sorted(set().union(*(spellings(p) for p in resolved)))
    owners = subprocess.run(["dpkg", "-S", *candidates], capture_output=True,
                            text=True, check=False).stdout
    owner_of = {}
    for line in owners.splitlines():
        package, _, path = line.partition(": ")
        owner_of[path] = package.split(":")[0]
    needed = set()
    for library, path in zip(libraries, resolved):
        owners_found = {owner_of[s] for s in spellings(path) if s in owner_of}
        assert owners_found, f"no Debian package owns {library} ({path})"
        needed |= owners_found
    return needed


def test_runtime_packages_are_exactly_what_the_binaries_link():
    installed = apt_installed(stages()[1]) - set(PROGRAM_PACKAGES.values())
    needed = linked_packages() - BASE_PACKAGES
    assert not needed - installed, f"runtime stage lacks {sorted(needed - installed)}"
    assert not installed - needed, (
        f"runtime stage installs {sorted(installed - needed)}, which no binary "
        "links")


def test_runtime_packages_exist_in_debian():
    if shutil.which("apt-cache") is None:
        pytest.skip("apt-cache is not installed")
    if subprocess.run(["apt-cache", "show", "libc6"], capture_output=True,
                      check=False).returncode != 0:
        pytest.skip("apt has no package lists (run apt-get update)")
    wanted = apt_installed(stages()[1])
    shown = subprocess.run(["apt-cache", "show", "--no-all-versions", *sorted(wanted)],
                           capture_output=True, text=True, check=False)
    known = set(re.findall(r"^Package: (\S+)$", shown.stdout, re.M))
    assert not wanted - known, f"not in Debian's lists: {sorted(wanted - known)}"
