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

// Tells glibc's malloc to keep freed memory for reuse: blocks of up to
// 32 MiB come from the heap instead of a fresh mmap, and the heap's free top
// is not handed back below 1 GiB. For programs that free and allocate again
// buffers of up to megabytes many times a second (a worker's step, a load
// generator's answers): by glibc's defaults those pages were faulted in and
// zeroed again every time. Does nothing when the user tuned malloc
// (GLIBC_TUNABLES, MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_) or
// without glibc.
void KeepFreedMemoryForReuse();

}  // namespace strata

#endif  // STRATA_COMMON_SYSTEM_MEMORY_H_
