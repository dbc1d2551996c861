#ifndef STRATA_COMMON_CPU_VERSIONS_H_
#define STRATA_COMMON_CPU_VERSIONS_H_

// Hot loops built more than once, for x86-64-v4 (AVX-512), for x86-64-v3
// (AVX2 and FMA) and for the baseline, with the first call picking the best
// one this CPU runs (__builtin_cpu_supports("x86-64-v4"), ...).
//
// STRATA_X86_VERSIONS is 1 where those versions are built: x86-64 with
// GCC. Sanitizer builds keep the baseline only.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define STRATA_X86_VERSIONS 1
#else
#define STRATA_X86_VERSIONS 0
#endif

// For the helpers of such a loop: they must be inlined into each version of
// their caller, since called out of line they would run as the baseline
// build whatever the CPU.
#if defined(__GNUC__)
#define STRATA_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define STRATA_ALWAYS_INLINE inline
#endif

#endif  // STRATA_COMMON_CPU_VERSIONS_H_
