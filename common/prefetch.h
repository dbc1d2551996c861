#ifndef STRATA_COMMON_PREFETCH_H_
#define STRATA_COMMON_PREFETCH_H_

namespace strata {

// Hints the CPU to fetch the cache line holding `address` into all levels
// of its caches. A hint only: it never faults, whatever the address.
//
// Why not __builtin_prefetch: GCC 12 at -O2 deletes it as dead code when it
// sits under a branch on a member (as in "if (size_ == 0) return;"), and
// then deletes calls of functions that did nothing else. The prefetches of
// EmbeddingTable's pushes vanished that way. An asm statement that is
// volatile is never deleted.
inline void PrefetchLine(const void* address) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetcht0 (%0)" : : "r"(address));
#else
  __builtin_prefetch(address);
#endif
}

}  // namespace strata

#endif  // STRATA_COMMON_PREFETCH_H_
