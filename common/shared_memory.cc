#include "common/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace strata {
namespace {

constexpr int kSizeSeals = F_SEAL_SHRINK | F_SEAL_GROW;

bool AllDigits(absl::string_view text) {
  if (text.empty() || text.size() > 10) return false;
  for (char c : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// "/proc/<digits>/fd/<digits>": the only paths a client may name, so that
// a request cannot make a shard open any other file.
bool IsProcFdPath(absl::string_view path) {
  if (!absl::ConsumePrefix(&path, "/proc/")) return false;
  const size_t slash = path.find('/');
  if (slash == absl::string_view::npos || !AllDigits(path.substr(0, slash))) {
    return false;
  }
  path.remove_prefix(slash);
  return absl::ConsumePrefix(&path, "/fd/") && AllDigits(path);
}

std::string Errno(absl::string_view what, int error) {
  return absl::StrCat(what, ": ", std::strerror(error));
}

}  // namespace

SharedMemory::SharedMemory(int fd, uint8_t* data, size_t size, std::string path)
    : fd_(fd), data_(data), size_(size), path_(std::move(path)) {
  struct stat info;
  if (fstat(fd_, &info) == 0) {
    device_ = info.st_dev;
    inode_ = info.st_ino;
  }
}

SharedMemory::~SharedMemory() {
  munmap(data_, size_);
  close(fd_);
}

absl::StatusOr<std::unique_ptr<SharedMemory>> SharedMemory::Create(
    size_t size) {
  if (size == 0) return absl::InvalidArgumentError("shared memory of 0 bytes");
  const int fd = memfd_create("strata-shared", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return absl::InternalError(Errno("memfd_create", errno));
  if (ftruncate(fd, static_cast<off_t>(size)) != 0 ||
      fcntl(fd, F_ADD_SEALS, kSizeSeals | F_SEAL_SEAL) != 0) {
    const int error = errno;
    close(fd);
    return absl::InternalError(Errno("sizing and sealing a memfd", error));
  }
  void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    const int error = errno;
    close(fd);
    return absl::ResourceExhaustedError(Errno(
        absl::StrCat("mapping ", size, " bytes of shared memory"), error));
  }
  return std::unique_ptr<SharedMemory>(
      new SharedMemory(fd, static_cast<uint8_t*>(data), size,
                       absl::StrCat("/proc/", getpid(), "/fd/", fd)));
}

absl::StatusOr<std::unique_ptr<SharedMemory>> SharedMemory::Open(
    const std::string& path, size_t size, size_t max_size) {
  if (!IsProcFdPath(path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory path '", path, "' is not /proc/<pid>/fd/<fd>"));
  }
  if (size == 0 || size > max_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory of ", size, " bytes: want 1 to ", max_size));
  }
  // Only a regular file is opened: opening a device or a FIFO the path
  // might name could have effects of its own.
  struct stat named;
  if (stat(path.c_str(), &named) != 0) {
    return absl::FailedPreconditionError(Errno(
        absl::StrCat("cannot find ", path, " (another machine?)"), errno));
  }
  if (!S_ISREG(named.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a memfd"));
  }
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        Errno(absl::StrCat("cannot open ", path), errno));
  }
  auto refuse = [fd](std::string why) {
    close(fd);
    return absl::FailedPreconditionError(std::move(why));
  };
  struct stat opened;
  if (fstat(fd, &opened) != 0 || opened.st_ino != named.st_ino ||
      opened.st_dev != named.st_dev) {
    return refuse(absl::StrCat(path, " changed while it was opened"));
  }
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & kSizeSeals) != kSizeSeals) {
    return refuse(absl::StrCat(
        path, " is not a memfd sealed against shrinking and growing"));
  }
  if (static_cast<uint64_t>(opened.st_size) != size) {
    return refuse(absl::StrCat(path, " holds ", opened.st_size,
                               " bytes, not the ", size, " asked"));
  }
  void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    return refuse(Errno(absl::StrCat("cannot map ", path), errno));
  }
  return std::unique_ptr<SharedMemory>(
      new SharedMemory(fd, static_cast<uint8_t*>(data), size, path));
}

bool SharedMemory::StillNamedBy(const std::string& path) const {
  struct stat named;
  return stat(path.c_str(), &named) == 0 && named.st_ino == inode_ &&
         named.st_dev == device_;
}

}  // namespace strata
