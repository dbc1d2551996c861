#ifndef STRATA_COMMON_SHARED_MEMORY_H_
#define STRATA_COMMON_SHARED_MEMORY_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace strata {

// Memory that two processes of one machine map: a memfd whose size is
// sealed (F_SEAL_SHRINK, F_SEAL_GROW), so that neither side can shrink it
// under the other's mapping (a read past the end would be SIGBUS). One
// process creates it; another opens it by its path in the creator's /proc,
// which exists only on the creator's machine (and pid namespace).
class SharedMemory {
 public:
  // A new memfd of `size` bytes, zero-filled, sealed and mapped.
  static absl::StatusOr<std::unique_ptr<SharedMemory>> Create(size_t size);
  // Maps the memfd that `path` ("/proc/<pid>/fd/<fd>", nothing else) names.
  // INVALID_ARGUMENT for another path or a size of 0 or over `max_size`;
  // FAILED_PRECONDITION when it cannot be opened (another machine), is not
  // a memfd sealed against shrinking and growing, or is not `size` bytes.
  static absl::StatusOr<std::unique_ptr<SharedMemory>> Open(
      const std::string& path, size_t size, size_t max_size);
  ~SharedMemory();
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // The path another process of this machine opens it by (Create only).
  const std::string& path() const { return path_; }
  // Whether `path` still names this memory: false once its creator closed
  // it or exited (the path is gone or names another file).
  bool StillNamedBy(const std::string& path) const;

 private:
  SharedMemory(int fd, uint8_t* data, size_t size, std::string path);

  int fd_;
  uint8_t* data_;
  size_t size_;
  std::string path_;
  dev_t device_ = 0;
  ino_t inode_ = 0;
};

}  // namespace strata

#endif  // STRATA_COMMON_SHARED_MEMORY_H_
