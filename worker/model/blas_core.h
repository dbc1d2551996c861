#ifndef STRATA_WORKER_MODEL_BLAS_CORE_H_
#define STRATA_WORKER_MODEL_BLAS_CORE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace strata {

// OpenBLAS picks its kernels by the CPU's model number. A virtual machine
// that hides the model (it reports "Intel Xeon Processor") gets the
// baseline "Prescott" kernels, SSE3 only, even where the CPU has AVX2 or
// AVX-512: on such a machine the CPU model's steps took 1.6x the time they
// take with the right kernels. OPENBLAS_CORETYPE overrides the choice, but
// only when the library loads.

// The kernel family OpenBLAS chose (openblas_get_corename()).
std::string BlasCoreName();

// What the CPU offers that OpenBLAS's kernels use.
struct CpuVectorUnits {
  bool avx2_fma = false;  // AVX2 and FMA
  bool avx512 = false;    // AVX-512 F, BW, DQ, CD and VL
};
CpuVectorUnits DetectCpuVectorUnits();

// The OPENBLAS_CORETYPE to ask for ("SkylakeX" or "Haswell") when OpenBLAS
// chose `core_name`, a family without AVX2, on a CPU that has `units`;
// empty when its choice stands.
std::string BetterBlasCoreType(absl::string_view core_name,
                               const CpuVectorUnits& units);

}  // namespace strata

#endif  // STRATA_WORKER_MODEL_BLAS_CORE_H_
