"""What of tests/gpu/check.sh can run without a GPU: tests/gpu/bundle.sh
packs everything the GPU node needs, and tests/gpu/train_cpu_vs_gpu.sh
trains on the CPU and stops with the CUDA model's reason when no GPU is
usable (on a GPU machine, check.sh runs it in full)."""

import os
import subprocess

import pytest

import k8s_manifests as m


def gpu_test_list(build):
    listed = build / "gpu_tests.txt"
    if not listed.exists():
        pytest.skip("this build has no CUDA path (no gpu_tests.txt)")
    return listed


def test_bundle_holds_the_gpu_tests_the_daemons_and_their_libraries(tmp_path):
    build = m.bin_dir().parent
    gpu_tests = [os.path.basename(line) for line in
                 gpu_test_list(build).read_text().split()]
    bundle = tmp_path / "bundle"
    subprocess.run(["bash", str(m.REPO / "tests/gpu/bundle.sh"), str(build),
                    str(bundle)], check=True, capture_output=True, timeout=300)
    assert (bundle / "gpu_tests.txt").read_text().split() == gpu_tests
    env = dict(os.environ, LD_LIBRARY_PATH=str(bundle / "lib"))
    for name in gpu_tests + ["strata-server", "strata-worker",
                             "strata-datagen"]:
        binary = bundle / name
        assert os.access(binary, os.X_OK), name
        linked = subprocess.run(["ldd", str(binary)], env=env,
                                capture_output=True, text=True).stdout
        assert "not found" not in linked, linked
        for line in linked.splitlines():
            # Abseil, gRPC and the rest resolve inside the bundle; only the C
            # and C++ runtimes and CUDA's libraries come from the node.
            if "libabsl_" in line or "libgrpc" in line or "librocksdb" in line:
                assert str(bundle / "lib") in line, line
    # Debug information is stripped, which keeps the bundle small enough
    # to copy to a node.
    assert (bundle / "strata-worker").stat().st_size < \
        (build / "bin" / "strata-worker").stat().st_size


def test_training_script_runs_the_cpu_and_names_why_cuda_failed(tmp_path):
    build = m.bin_dir().parent
    gpu_test_list(build)
    if os.path.exists("/dev/nvidia0"):
        pytest.skip("a GPU is present: tests/gpu/check.sh runs this script")
    env = dict(os.environ, ROWS="4000", HOLDOUT_ROWS="1000",
               MODELS="tiny 256 --bottom_mlp=8 --top_mlp=8",
               TMPDIR=str(tmp_path))
    done = subprocess.run(
        ["bash", str(m.REPO / "tests/gpu/train_cpu_vs_gpu.sh"),
         str(m.bin_dir())], env=env, capture_output=True, text=True,
        timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "strata-worker --device=cuda (tiny) failed" in done.stderr
    assert "no usable CUDA device" in done.stderr, done.stderr
    # The CPU run finished and is in the table; the temporary folder is gone.
    assert "| tiny | 256 | cpu |" in done.stdout, done.stdout
    assert list(tmp_path.iterdir()) == []
