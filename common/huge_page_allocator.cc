#include "common/huge_page_allocator.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>

namespace strata {
namespace {
std::atomic<bool> huge_pages_enabled{true};
}  // namespace

void SetHugePagesEnabled(bool enabled) {
  huge_pages_enabled.store(enabled, std::memory_order_relaxed);
}

bool HugePagesEnabled() {
  return huge_pages_enabled.load(std::memory_order_relaxed);
}

namespace huge_pages_internal {

void* Allocate(size_t bytes) {
  if (bytes < kHugePageMinBytes || !HugePagesEnabled()) {
    void* memory = std::malloc(bytes == 0 ? 1 : bytes);
    if (memory == nullptr) throw std::bad_alloc();
    return memory;
  }
  // Whole huge pages, so that no other allocation shares the last one.
  const size_t rounded = (bytes + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  void* memory = std::aligned_alloc(kHugePageBytes, rounded);
  if (memory == nullptr) throw std::bad_alloc();
  // Advice only: where the kernel has no transparent huge pages (or they
  // are off) the memory is plain pages and works the same.
  madvise(memory, rounded, MADV_HUGEPAGE);
  return memory;
}

void Deallocate(void* memory) noexcept { std::free(memory); }

}  // namespace huge_pages_internal
}  // namespace strata
