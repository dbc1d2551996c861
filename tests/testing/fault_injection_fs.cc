#include "tests/testing/fault_injection_fs.h"

#include <utility>

namespace strata {
namespace testing {
namespace {

// A file opened for writing whose writes go through MaybeFail first.
class FaultyWritableFile final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FaultyWritableFile(std::unique_ptr<rocksdb::FSWritableFile> file,
                     FaultInjectionFileSystem* faults)
      : FSWritableFileOwnerWrapper(std::move(file)), faults_(faults) {}

  rocksdb::IOStatus Append(const rocksdb::Slice& data,
                           const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus s = faults_->MaybeFail("append");
    return s.ok() ? target()->Append(data, options, debug) : s;
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data,
                           const rocksdb::IOOptions& options,
                           const rocksdb::DataVerificationInfo& info,
                           rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus s = faults_->MaybeFail("append");
    return s.ok() ? target()->Append(data, options, info, debug) : s;
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data,
                                     uint64_t offset,
                                     const rocksdb::IOOptions& options,
                                     rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus s = faults_->MaybeFail("append");
    return s.ok() ? target()->PositionedAppend(data, offset, options, debug)
                  : s;
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& options,
                         rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus s = faults_->MaybeFail("sync");
    return s.ok() ? target()->Sync(options, debug) : s;
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                          rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus s = faults_->MaybeFail("fsync");
    return s.ok() ? target()->Fsync(options, debug) : s;
  }
  rocksdb::IOStatus RangeSync(uint64_t offset, uint64_t nbytes,
                              const rocksdb::IOOptions& options,
                              rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus s = faults_->MaybeFail("sync");
    return s.ok() ? target()->RangeSync(offset, nbytes, options, debug) : s;
  }

 private:
  FaultInjectionFileSystem* const faults_;
};

}  // namespace

FaultInjectionFileSystem::FaultInjectionFileSystem()
    : FileSystemWrapper(rocksdb::FileSystem::Default()) {}

std::unique_ptr<rocksdb::Env> FaultInjectionFileSystem::NewEnv() {
  // Not owned by the Env: an aliasing pointer with no control block.
  return rocksdb::NewCompositeEnv(
      std::shared_ptr<rocksdb::FileSystem>(std::shared_ptr<void>(), this));
}

void FaultInjectionFileSystem::FailWrites(int64_t after, bool no_space) {
  no_space_.store(no_space);
  syncs_only_.store(false);
  countdown_.store(after);
  armed_.store(true);
}

void FaultInjectionFileSystem::FailSyncs(int64_t after) {
  no_space_.store(false);
  syncs_only_.store(true);
  countdown_.store(after);
  armed_.store(true);
}

void FaultInjectionFileSystem::Heal() { armed_.store(false); }

rocksdb::IOStatus FaultInjectionFileSystem::MaybeFail(const char* what) {
  const std::string kind = what;
  if (syncs_only_.load() && kind != "sync" && kind != "fsync") {
    return rocksdb::IOStatus::OK();
  }
  if (!armed_.load() || countdown_.fetch_sub(1) > 0) {
    return rocksdb::IOStatus::OK();
  }
  failures_.fetch_add(1);
  const std::string message = std::string("injected fault in ") + what;
  if (no_space_.load()) return rocksdb::IOStatus::NoSpace(message);
  return rocksdb::IOStatus::IOError(message);
}

rocksdb::IOStatus FaultInjectionFileSystem::NewWritableFile(
    const std::string& path, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* file,
    rocksdb::IODebugContext* debug) {
  rocksdb::IOStatus s = target()->NewWritableFile(path, options, file, debug);
  if (s.ok()) file->reset(new FaultyWritableFile(std::move(*file), this));
  return s;
}

rocksdb::IOStatus FaultInjectionFileSystem::ReopenWritableFile(
    const std::string& path, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* file,
    rocksdb::IODebugContext* debug) {
  rocksdb::IOStatus s =
      target()->ReopenWritableFile(path, options, file, debug);
  if (s.ok()) file->reset(new FaultyWritableFile(std::move(*file), this));
  return s;
}

rocksdb::IOStatus FaultInjectionFileSystem::RenameFile(
    const std::string& from, const std::string& to,
    const rocksdb::IOOptions& options, rocksdb::IODebugContext* debug) {
  rocksdb::IOStatus s = MaybeFail("rename");
  return s.ok() ? target()->RenameFile(from, to, options, debug) : s;
}

}  // namespace testing
}  // namespace strata
