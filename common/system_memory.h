#ifndef STRATA_COMMON_SYSTEM_MEMORY_H_
#define STRATA_COMMON_SYSTEM_MEMORY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace strata {

// The machine's physical memory in bytes (0 when it cannot be read).
uint64_t PhysicalMemoryBytes();

// INVALID_ARGUMENT naming `what` when `bytes` is more than `machine_bytes`
// (the machine's memory by default): a budget larger than the machine can
// never be honoured, and would only make the process run out of memory.
absl::Status CheckFitsInMemory(absl::string_view what, uint64_t bytes,
                               uint64_t machine_bytes = PhysicalMemoryBytes());

}  // namespace strata

#endif  // STRATA_COMMON_SYSTEM_MEMORY_H_
