#!/usr/bin/env bash
# Packs the GPU tests built here into a folder that tests/gpu/check.sh can run
# on a GPU node which has the NVIDIA driver and CUDA libraries but not the
# build's other libraries (Abseil, OpenBLAS, ...): a node without the
# development packages, or without network access to install them.
#
# Usage: bash tests/gpu/bundle.sh BUILD_DIR BUNDLE_DIR
#   BUILD_DIR   a build with the CUDA path on, where `gpu_tests` was built
#   BUNDLE_DIR  created or emptied; gets the GPU tests (listed in
#               gpu_tests.txt), strata-server, strata-worker and
#               strata-datagen for tests/gpu/train_cpu_vs_gpu.sh, and lib/
#               with the libraries they need; debug information is stripped
# Then, on the GPU node: STRATA_GPU_BUNDLE=BUNDLE_DIR bash tests/gpu/check.sh
#
# Libraries from the C library, the compiler's runtime and the CUDA toolkit
# (cudart, cuBLAS, NCCL) stay out: the node's own must match its driver.
set -euo pipefail
die() { echo "bundle.sh: $*" >&2; exit 1; }
(($# == 2)) || die "usage: bundle.sh BUILD_DIR BUNDLE_DIR"
build_dir="$1"
bundle_dir="$2"
list="$build_dir/gpu_tests.txt"
[[ -s "$list" ]] || die "$list is missing or empty: build the target gpu_tests"

# Sonames the node provides itself.
node_provided='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.so'

add() {  # add BINARY: copies it, stripped, and the libraries it needs
  local binary=$1 soname path
  [[ -x "$binary" ]] || die "$binary is not built"
  objcopy --strip-debug "$binary" "$bundle_dir/$(basename "$binary")"
  while read -r soname _ path _; do
    [[ "$soname" =~ $node_provided ]] && continue
    [[ "$path" == /* ]] || die "$binary: $soname is not found here"
    [[ -e "$bundle_dir/lib/$soname" ]] || cp -L "$path" "$bundle_dir/lib/$soname"
  done < <(ldd "$binary" | grep '=>')
}

# Only a former bundle (or nothing) is replaced: a mistyped BUNDLE_DIR must
# not delete a build or a source tree.
if [[ -e "$bundle_dir" && ! -f "$bundle_dir/gpu_tests.txt" ]] &&
   [[ -n "$(ls -A "$bundle_dir" 2>/dev/null)" ]]; then
  die "$bundle_dir exists and is not a bundle; give a new or empty folder"
fi
rm -rf "$bundle_dir"
mkdir -p "$bundle_dir/lib"
: >"$bundle_dir/gpu_tests.txt"
mapfile -t binaries <"$list"
for binary in "${binaries[@]}"; do
  add "$binary"
  basename "$binary" >>"$bundle_dir/gpu_tests.txt"
done
for daemon in strata-server strata-worker strata-datagen; do
  add "$build_dir/bin/$daemon"
done
echo "bundle.sh: $(wc -l <"$bundle_dir/gpu_tests.txt") tests and" \
     "$(ls "$bundle_dir/lib" | wc -l) libraries in $bundle_dir" \
     "($(du -sh "$bundle_dir" | cut -f1))"
