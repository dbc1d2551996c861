#ifndef STRATA_TESTS_TESTING_FAULT_INJECTION_FS_H_
#define STRATA_TESTS_TESTING_FAULT_INJECTION_FS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "rocksdb/env.h"
#include "rocksdb/file_system.h"

namespace strata {
namespace testing {

// A RocksDB file system (over the real one) that fails writes on demand,
// as a full or failing disk does: appends, syncs and renames of files
// opened for writing return an I/O error (ENOSPC when `no_space`) once
// armed, after `after` more successful calls. Thread-safe.
//
// Example:
//   auto faults = std::make_shared<FaultInjectionFileSystem>();
//   std::unique_ptr<rocksdb::Env> env = faults->NewEnv();
//   options.rocksdb_env = env.get();
//   faults->FailWrites(/*after=*/0, /*no_space=*/true);
//   ...  // every write fails
//   faults->Heal();
class FaultInjectionFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  FaultInjectionFileSystem();

  const char* Name() const override { return "FaultInjectionFileSystem"; }

  // An Env whose file system this is; it must not outlive it.
  std::unique_ptr<rocksdb::Env> NewEnv();

  // From the call after the next `after` writes on, every write fails.
  void FailWrites(int64_t after, bool no_space);
  // The same for syncs (fsync, fdatasync, range syncs) only: appends still
  // work, as when a disk loses what the page cache held.
  void FailSyncs(int64_t after);
  void Heal();
  // Writes that failed so far.
  int64_t failures() const { return failures_.load(); }

  // Returns an error (and counts it) when writes are to fail now.
  rocksdb::IOStatus MaybeFail(const char* what);

  rocksdb::IOStatus NewWritableFile(
      const std::string& path, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* file,
      rocksdb::IODebugContext* debug) override;
  rocksdb::IOStatus ReopenWritableFile(
      const std::string& path, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* file,
      rocksdb::IODebugContext* debug) override;
  rocksdb::IOStatus RenameFile(const std::string& from, const std::string& to,
                               const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* debug) override;

 private:
  std::atomic<bool> armed_{false};
  std::atomic<int64_t> countdown_{0};
  std::atomic<bool> no_space_{false};
  std::atomic<bool> syncs_only_{false};
  std::atomic<int64_t> failures_{0};
};

}  // namespace testing
}  // namespace strata

#endif  // STRATA_TESTS_TESTING_FAULT_INJECTION_FS_H_
