# The CUDA path: the CUDA dense model (worker/model) and the NCCL collective
# (worker/collective). Included from the top-level CMakeLists.txt.
#
#   STRATA_CUDA=AUTO  (default) on when a CUDA compiler is found, except in
#                     sanitizer builds (STRATA_ASAN/STRATA_TSAN)
#   STRATA_CUDA=ON    required; a missing CUDA compiler is an error
#   STRATA_CUDA=OFF   CPU only
#
# Sets for the folders:
#   STRATA_WITH_CUDA      ON when the CUDA path is built (CUDA::cudart,
#                         CUDA::cublas and STRATA_CUDA_WARNINGS available)
#   STRATA_WITH_NCCL      ON when NCCL was found too (target NCCL::nccl)
#
# Sanitizer builds: AUTO turns CUDA off there (the sanitizer suites test the
# CPU logic, and the CUDA runtime needs ASAN_OPTIONS=protect_shadow_gap=0 to
# run under ASan). ON still works: the sanitizer flags apply to C++ only, so
# the host code is instrumented and the kernels are not.

set(STRATA_CUDA AUTO CACHE STRING
    "Build the CUDA dense model and NCCL collective: AUTO, ON or OFF")
set_property(CACHE STRATA_CUDA PROPERTY STRINGS AUTO ON OFF)

string(TOUPPER "${STRATA_CUDA}" strata_cuda_mode)
set(STRATA_WITH_CUDA OFF)
set(STRATA_WITH_NCCL OFF)
set(strata_cuda_reason "")

if(strata_cuda_mode STREQUAL "AUTO")
  if(STRATA_ASAN OR STRATA_TSAN)
    set(strata_cuda_reason
        "sanitizer build; pass -DSTRATA_CUDA=ON to build it anyway")
  else()
    include(CheckLanguage)
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
      set(STRATA_WITH_CUDA ON)
    else()
      set(strata_cuda_reason
          "no CUDA compiler found; put nvcc on PATH or set CUDACXX")
    endif()
  endif()
elseif(strata_cuda_mode MATCHES "^(ON|TRUE|YES|Y|1)$")
  include(CheckLanguage)
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR
      "STRATA_CUDA=ON but no CUDA compiler was found: put nvcc on PATH, set "
      "CUDACXX or -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc")
  endif()
  set(STRATA_WITH_CUDA ON)
elseif(strata_cuda_mode MATCHES "^(OFF|FALSE|NO|N|0)$")
  set(strata_cuda_reason "STRATA_CUDA=OFF")
else()
  message(FATAL_ERROR
    "STRATA_CUDA is \"${STRATA_CUDA}\"; want AUTO, ON or OFF")
endif()

if(NOT STRATA_WITH_CUDA)
  message(STATUS "Strata CUDA path: off (${strata_cuda_reason})")
  return()
endif()

# sm_80 (A100) and sm_90 (H100/H200) by default; -DCMAKE_CUDA_ARCHITECTURES=
# native builds for the GPUs of this machine only (fastest to compile).
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES "80;90" CACHE STRING
      "GPU architectures the CUDA kernels are built for")
endif()
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
# One (shared) CUDA runtime for our kernels, our host code, cuBLAS and NCCL.
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
if(CCACHE_PROGRAM)
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${STRATA_CCACHE_LAUNCHER})
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

# nvcc's own warnings and the host compiler's, all errors.
set(STRATA_CUDA_WARNINGS -Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror)

# NCCL ships with the toolkit here (/usr/local/cuda/include/nccl.h) and in
# Debian's libnccl-dev (/usr/include); NCCL_ROOT points elsewhere.
find_path(STRATA_NCCL_INCLUDE_DIR nccl.h
  HINTS ENV NCCL_ROOT ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include)
find_library(STRATA_NCCL_LIBRARY NAMES nccl
  HINTS ENV NCCL_ROOT ${CUDAToolkit_LIBRARY_DIR}
  PATH_SUFFIXES lib lib64)
if(STRATA_NCCL_INCLUDE_DIR AND STRATA_NCCL_LIBRARY)
  set(STRATA_WITH_NCCL ON)
  if(NOT TARGET NCCL::nccl)
    add_library(NCCL::nccl UNKNOWN IMPORTED)
    set_target_properties(NCCL::nccl PROPERTIES
      IMPORTED_LOCATION "${STRATA_NCCL_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${STRATA_NCCL_INCLUDE_DIR}")
  endif()
  set(strata_nccl_note "NCCL ${STRATA_NCCL_LIBRARY}")
else()
  set(strata_nccl_note "no NCCL found (set NCCL_ROOT); NCCL collective off")
endif()

message(STATUS
  "Strata CUDA path: on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
  "architectures ${CMAKE_CUDA_ARCHITECTURES}, ${strata_nccl_note})")
