#include "worker/model/blas_core.h"

#include <cblas.h>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"

namespace strata {

std::string BlasCoreName() {
  const char* name = openblas_get_corename();
  return name == nullptr ? "" : name;
}

CpuVectorUnits DetectCpuVectorUnits() {
  CpuVectorUnits units;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  units.avx2_fma =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  units.avx512 = units.avx2_fma && __builtin_cpu_supports("avx512f") &&
                 __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512dq") &&
                 __builtin_cpu_supports("avx512cd") &&
                 __builtin_cpu_supports("avx512vl");
#endif
  return units;
}

std::string BetterBlasCoreType(absl::string_view core_name,
                               const CpuVectorUnits& units) {
  // OpenBLAS's x86-64 families that predate AVX2, which it falls back to
  // for a CPU it does not know.
  static constexpr absl::string_view kWithoutAvx2[] = {
      "prescott", "core2",     "penryn",       "dunnington",
      "nehalem",  "atom",      "sandybridge",  "barcelona",
      "bobcat",   "bulldozer", "piledriver",   "steamroller",
      "athlon",   "opteron",   "opteron_sse3", "nano"};
  const std::string name = absl::AsciiStrToLower(core_name);
  if (!absl::c_linear_search(kWithoutAvx2, name) || !units.avx2_fma) {
    return "";
  }
  return units.avx512 ? "SkylakeX" : "Haswell";
}

}  // namespace strata
