#include "common/system_memory.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "absl/strings/str_cat.h"

namespace strata {

uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

absl::Status CheckFitsInMemory(absl::string_view what, uint64_t bytes,
                               uint64_t machine_bytes) {
  if (machine_bytes == 0 || bytes <= machine_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " of ", bytes, " bytes is more than this machine's ",
                   machine_bytes, " bytes of memory"));
}

void KeepFreedMemoryForReuse() {
#ifdef __GLIBC__
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if ((tunables != nullptr && std::strstr(tunables, "glibc.malloc.")) ||
      std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr ||
      std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr) {
    return;
  }
  constexpr int kMmapThreshold = 32 << 20;  // glibc's largest
  constexpr int kTrimThreshold = 1 << 30;
  mallopt(M_MMAP_THRESHOLD, kMmapThreshold);
  mallopt(M_TRIM_THRESHOLD, kTrimThreshold);
#endif
}

}  // namespace strata
