#ifndef STRATA_COMMON_DEFAULT_INIT_ALLOCATOR_H_
#define STRATA_COMMON_DEFAULT_INIT_ALLOCATOR_H_

#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace strata {

// std::allocator, except that an element made without arguments is
// default-initialized instead of value-initialized: resize() of a vector
// of floats leaves them as they were instead of writing zeros. For buffers
// that are written right after they grow, such as a push's staged rows
// (megabytes a push, each zeroed and then overwritten).
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };

  DefaultInitAllocator() = default;
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}

  template <typename U>
  void construct(U* at) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(at)) U;
  }
  template <typename U, typename... Args>
  void construct(U* at, Args&&... args) {
    ::new (static_cast<void*>(at)) U(std::forward<Args>(args)...);
  }
};

}  // namespace strata

#endif  // STRATA_COMMON_DEFAULT_INIT_ALLOCATOR_H_
