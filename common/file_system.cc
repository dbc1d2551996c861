#include "common/file_system.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

absl::Status ErrnoStatus(absl::string_view what, absl::string_view path) {
  const int error = errno;
  const std::string message =
      absl::StrCat(what, " ", path, ": ", std::strerror(error));
  if (error == ENOENT) return absl::NotFoundError(message);
  return absl::InternalError(message);
}

absl::Status ErrorCodeStatus(absl::string_view what, absl::string_view path,
                             const std::error_code& error) {
  return absl::InternalError(
      absl::StrCat(what, " ", path, ": ", error.message()));
}

absl::Status FsyncPath(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) return ErrnoStatus("open", path);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return ErrnoStatus("fsync", path);
  return absl::OkStatus();
}

class PosixFileSystem final : public FileSystem {
 public:
  absl::StatusOr<std::string> ReadFile(absl::string_view path) override {
    std::ifstream in{std::string(path), std::ios::binary};
    if (!in) return ErrnoStatus("cannot read", path);
    std::ostringstream content;
    content << in.rdbuf();
    return content.str();
  }

  absl::Status WriteFileAtomically(absl::string_view path,
                                   absl::string_view content) override {
    const std::string final_path(path);
    const std::string temp_path = final_path + ".tmp";
    const int fd =
        ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return ErrnoStatus("cannot create", temp_path);
    size_t written = 0;
    while (written < content.size()) {
      const ssize_t n =
          ::write(fd, content.data() + written, content.size() - written);
      if (n < 0) {
        if (errno == EINTR) continue;
        ::close(fd);
        return ErrnoStatus("cannot write", temp_path);
      }
      written += static_cast<size_t>(n);
    }
    if (::fsync(fd) != 0) {
      ::close(fd);
      return ErrnoStatus("fsync", temp_path);
    }
    ::close(fd);
    if (::rename(temp_path.c_str(), final_path.c_str()) != 0) {
      return ErrnoStatus("cannot rename onto", final_path);
    }
    const std::string dir = fs::path(final_path).parent_path().string();
    return FsyncPath(dir.empty() ? "." : dir, O_RDONLY | O_DIRECTORY);
  }

  absl::StatusOr<std::vector<std::string>> ListDir(
      absl::string_view dir) override {
    std::error_code error;
    std::vector<std::string> names;
    for (const auto& entry :
         fs::directory_iterator(fs::path(std::string(dir)), error)) {
      names.push_back(entry.path().filename().string());
    }
    if (error) {
      if (error == std::errc::no_such_file_or_directory) {
        return absl::NotFoundError(absl::StrCat("no directory ", dir));
      }
      return ErrorCodeStatus("cannot list", dir, error);
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  absl::Status Rename(absl::string_view from, absl::string_view to) override {
    const std::string to_path(to);
    if (::rename(std::string(from).c_str(), to_path.c_str()) != 0) {
      return ErrnoStatus(absl::StrCat("cannot rename ", from, " to"), to);
    }
    const std::string dir = fs::path(to_path).parent_path().string();
    return FsyncPath(dir.empty() ? "." : dir, O_RDONLY | O_DIRECTORY);
  }

  absl::Status CreateDirs(absl::string_view dir) override {
    std::error_code error;
    fs::create_directories(fs::path(std::string(dir)), error);
    if (error) return ErrorCodeStatus("cannot create directory", dir, error);
    return absl::OkStatus();
  }

  absl::Status DeleteRecursively(absl::string_view path) override {
    std::error_code error;
    fs::remove_all(fs::path(std::string(path)), error);
    if (error) return ErrorCodeStatus("cannot delete", path, error);
    return absl::OkStatus();
  }

  bool Exists(absl::string_view path) override {
    std::error_code error;
    return fs::exists(fs::path(std::string(path)), error);
  }

  bool IsDirectory(absl::string_view path) override {
    std::error_code error;
    return fs::is_directory(fs::path(std::string(path)), error);
  }
};

}  // namespace

FileSystem* FileSystem::Default() {
  static PosixFileSystem* const file_system = new PosixFileSystem();
  return file_system;
}

}  // namespace strata
