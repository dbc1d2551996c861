#ifndef STRATA_COMMON_FILE_SYSTEM_H_
#define STRATA_COMMON_FILE_SYSTEM_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strata {

// The files Strata writes itself (checkpoint manifests, markers). RocksDB's
// own files go through rocksdb::Env. Implementations are thread-safe.
class FileSystem {
 public:
  virtual ~FileSystem() = default;

  virtual absl::StatusOr<std::string> ReadFile(absl::string_view path) = 0;
  // Writes to a temporary file, fsyncs it, renames it over `path` and fsyncs
  // the directory: readers see the old or the new content, never a mix.
  virtual absl::Status WriteFileAtomically(absl::string_view path,
                                           absl::string_view content) = 0;
  // Names (not paths) of the entries of `dir`, sorted.
  virtual absl::StatusOr<std::vector<std::string>> ListDir(
      absl::string_view dir) = 0;
  virtual absl::Status Rename(absl::string_view from, absl::string_view to) = 0;
  // Creates `dir` and its missing parents; OK when it exists.
  virtual absl::Status CreateDirs(absl::string_view dir) = 0;
  // Deletes a file or a directory tree; OK when `path` does not exist.
  virtual absl::Status DeleteRecursively(absl::string_view path) = 0;
  virtual bool Exists(absl::string_view path) = 0;
  virtual bool IsDirectory(absl::string_view path) = 0;

  // The POSIX file system; never deleted.
  static FileSystem* Default();
};

// Forwards every call to another FileSystem; a fault-injecting fake
// overrides one method.
class FileSystemWrapper : public FileSystem {
 public:
  explicit FileSystemWrapper(FileSystem* target) : target_(target) {}

  absl::StatusOr<std::string> ReadFile(absl::string_view path) override {
    return target_->ReadFile(path);
  }
  absl::Status WriteFileAtomically(absl::string_view path,
                                   absl::string_view content) override {
    return target_->WriteFileAtomically(path, content);
  }
  absl::StatusOr<std::vector<std::string>> ListDir(
      absl::string_view dir) override {
    return target_->ListDir(dir);
  }
  absl::Status Rename(absl::string_view from, absl::string_view to) override {
    return target_->Rename(from, to);
  }
  absl::Status CreateDirs(absl::string_view dir) override {
    return target_->CreateDirs(dir);
  }
  absl::Status DeleteRecursively(absl::string_view path) override {
    return target_->DeleteRecursively(path);
  }
  bool Exists(absl::string_view path) override { return target_->Exists(path); }
  bool IsDirectory(absl::string_view path) override {
    return target_->IsDirectory(path);
  }

 private:
  FileSystem* target_;
};

}  // namespace strata

#endif  // STRATA_COMMON_FILE_SYSTEM_H_
