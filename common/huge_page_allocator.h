#ifndef STRATA_COMMON_HUGE_PAGE_ALLOCATOR_H_
#define STRATA_COMMON_HUGE_PAGE_ALLOCATOR_H_

#include <cstddef>
#include <new>

namespace strata {

// Whether HugePageAllocator asks for huge pages (on by default). A process
// sets it once, at start-up (strata-server --huge_pages).
void SetHugePagesEnabled(bool enabled);
bool HugePagesEnabled();

// Arrays of at least this many bytes get huge pages: the last huge page of
// an array is partly used, and costs at most 2 MiB more than the array.
inline constexpr size_t kHugePageMinBytes = size_t{8} << 20;
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

namespace huge_pages_internal {
// Memory for `bytes`: from kHugePageMinBytes on (and while enabled) aligned
// to 2 MiB and advised to be backed by huge pages (transparent huge pages,
// in the kernel's "madvise" or "always" mode); plain heap memory otherwise.
// Throws std::bad_alloc instead of returning null.
void* Allocate(size_t bytes);
void Deallocate(void* memory) noexcept;
}  // namespace huge_pages_internal

// An allocator for large arrays read at random (an embedding table's rows):
// on a table of hundreds of megabytes nearly every row read misses the TLB
// with 4 KiB pages, and the page walk costs as much as the row's own cache
// misses (more in a virtual machine).
template <typename T>
struct HugePageAllocator {
  using value_type = T;

  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}

  T* allocate(size_t n) {
    if (n > static_cast<size_t>(-1) / sizeof(T)) throw std::bad_alloc();
    return static_cast<T*>(huge_pages_internal::Allocate(n * sizeof(T)));
  }
  void deallocate(T* p, size_t) noexcept { huge_pages_internal::Deallocate(p); }

  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const noexcept {
    return true;
  }
  template <typename U>
  bool operator!=(const HugePageAllocator<U>&) const noexcept {
    return false;
  }
};

}  // namespace strata

#endif  // STRATA_COMMON_HUGE_PAGE_ALLOCATOR_H_
