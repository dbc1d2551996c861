#ifndef STRATA_TESTS_TESTING_SANITIZERS_H_
#define STRATA_TESTS_TESTING_SANITIZERS_H_

namespace strata {
namespace testing {

// Whether this build runs under AddressSanitizer or ThreadSanitizer, which
// add shadow memory and quarantines and make everything several times
// slower: the few tests whose bounds are about plain builds check less.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace testing
}  // namespace strata

#endif  // STRATA_TESTS_TESTING_SANITIZERS_H_
